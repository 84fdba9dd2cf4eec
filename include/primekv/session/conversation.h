// A conversation over one KV cache (docs/design.md §4): the one owner of its cache, its tokens,
// its turns, its multi-turn budget and its schedule. It prefills, compresses when its schedule
// says (after the context, per chunk, per decode interval, per turn) or when told
// (CompressNow), runs the decode loop, and is the only reader and writer of session files
// (session/session_file.h). The pipeline, the server's turns, the C API's pk_session, `primekv
// bench`'s depth fill and fidelity all drive one.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "primekv/kv/kv_cache.h"
#include "primekv/model/model.h"
#include "primekv/press/compressor.h"
#include "primekv/session/record.h"
#include "primekv/session/session.h"
#include "primekv/session/session_file.h"

namespace primekv {

// What a conversation borrows from its caller; the caller keeps each alive.
struct ConversationParts {
  // The press's inputs, shared with other conversations over one prefill (fidelity); null: the
  // conversation captures its own.
  PressCapture* capture = nullptr;
  ForwardWorkspace* workspace = nullptr;  // null: the conversation's own
  std::mutex* model_mutex = nullptr;      // held around each forward pass and compression
};

class Conversation {
 public:
  // Over `record`; a record without a cache gets an empty one of `kv`.
  Conversation(const Model& model, const Compressor& compressor, ThreadPool& pool,
               ConversationRecord record, const KvCacheOptions& kv = {},
               ConversationParts parts = {});
  Conversation(const Conversation&) = delete;
  Conversation& operator=(const Conversation&) = delete;

  // The record is the conversation's own: others read it, and change it only through the
  // operations below, named by what they do.
  const ConversationRecord& record() const { return record_; }
  const std::vector<Token>& tokens() const { return record_.tokens; }
  const Schedule& schedule() const { return record_.schedule; }
  int budget() const { return record_.budget; }
  bool Compressing() const { return record_.schedule.ratio > 0 && compressor_->enabled(); }
  const Compressor& compressor() const { return *compressor_; }
  // Per layer, the most entries a head holds while a turn runs (KvCache::Reserve's layer_rows):
  // a sliding-window layer drops as it goes, unless a second pass must read the whole context.
  std::vector<int> TurnWindowRows() const;

  bool has_cache() const { return record_.cache.has_value(); }
  KvCache& cache() { return *record_.cache; }
  const KvCache& cache() const { return *record_.cache; }
  PressCapture& capture() { return *capture_; }
  // Starts from a copy of another run's capture (a prefilled context's), as its own.
  void AdoptCapture(const PressCapture& capture);
  // Frees the cache (evicted: the tokens stay, and a store holds the rest).
  void DropCache() {
    record_.cache.reset();
    rewind_cache_.reset();
  }
  // Continues from a stored image of this conversation (a session file, a store, its own
  // evicted cache read back): the image's cache (an empty one when it has none), tokens,
  // budget, turn count, salt and last prompt replace this one's; id, tenant, press and schedule
  // stay. Every restore goes through here, so what the sliding-window layers no longer hold is
  // always known and a later cut never keeps what they dropped. `stored`: what the store holds
  // (the base of the next save's delta). The press starts with an empty query window.
  void Restore(ConversationRecord image, std::optional<StoredImage> stored = std::nullopt);
  // An empty cache if it holds none (a new conversation whose first use comes later).
  void EnsureCache();
  // Continues another run's prefix: `shared` (a Share() of its cache) holding `tokens`, cut to
  // `keep` tokens. Kept tokens carry the press's view of the source (its capture and multi-turn
  // budget), as if this conversation had run them; kept 0 (a cut a window had passed), it is a
  // new conversation. Returns the tokens kept.
  size_t ForkFrom(KvCache shared, std::span<const Token> tokens, const PressCapture& capture,
                  int budget, size_t keep);
  // The prompt is in: what follows is the answer (a regenerate cuts back to here).
  void BeginAnswer() { record_.last_prompt_len = static_cast<int>(record_.tokens.size()); }
  // The cache, handed to the caller; the conversation holds none after.
  KvCache TakeCache();
  // Drops the tokens from position `n` on, with their entries.
  // Returns the tokens kept: n, or 0 when a sliding-window layer has already freed entries that
  // position n still needs. Kept 0, the conversation is reset (its capture too), and the caller
  // prefills it all.
  // The sliding-window layers free them at every forward pass, so on such a model only the
  // rewind point (SetRewindPoint) can be returned to once a window has passed.
  size_t TruncateTo(size_t n);
  // What TruncateTo(n) would keep, without cutting anything (what a turn will prefill).
  size_t Keepable(size_t n) const;
  // Remembers the sliding-window layers as they are now, by reference to their pages, so that
  // TruncateTo(tokens().size()) can return to this point later (independent questions on one
  // context). The global layers are truncated as usual. Nothing is kept on a model without a
  // window; Reset forgets the point.
  void SetRewindPoint();
  // Empties the cache, the tokens and the capture (a new context on the same conversation).
  void Reset();

  // The distribution after the last token fed: a decode step overwrites it.
  std::span<float> logits() { return logits_; }
  void SetLogits(std::span<const float> logits);
  const ConversationStats& stats() const { return stats_; }
  // Folds the cache's current size into the peak (a cache filled elsewhere).
  void NotePeak();
  // Frees the forward buffers (a caller whose decode steps run elsewhere).
  void ReleaseWorkspace();
  // Frees the forward buffers and the logits (an idle conversation kept in memory).
  void ReleaseBuffers();

  // Runs tokens through the model (in micro-batches of the schedule's ubatch), appending them
  // to tokens(); no compression.
  Status Prefill(std::span<const Token> tokens);
  // The context under the schedule: in chunks compressing after each (kChunked), or whole and
  // compressed once after it. Sets the multi-turn budget to the context's share.
  Status PrefillContext(std::span<const Token> context);
  // After a chunk of the context: every head comes down to the share of the positions so far.
  Status AfterChunk();
  // After a context of `context_tokens` already in the cache (and reconstructed, for a press
  // that needs it): one compression to the ratio. Sets the multi-turn budget.
  Status CompressContext(int context_tokens);
  // Compresses now to `ratio` of every entry, whatever the schedule; the multi-turn budget
  // becomes that share of the tokens.
  Status CompressNow(double ratio);
  // One decode step: the token through the model (appended to tokens()), its logits into
  // logits().
  Status FeedToken(Token token);
  // After the `generated`-th token of an answer was fed: every `interval` tokens (kDecode) the
  // cache comes down to the share of its positions.
  Status AfterToken(int generated);
  // After a turn: a multi-turn cache over its budget comes back to it. Counts the turn.
  Status EndTurn();
  // The decode loop: samples from logits(), hands each token on, feeds it (through `feed` when
  // given, which must leave the next logits in logits(), else FeedToken), appends it to
  // tokens() and applies AfterToken. Sampling errors read label + "token N: ..."; errors of
  // feed pass unchanged.
  Result<DecodeResult> Decode(const DecodeOptions& options,
                              const std::function<Status(Token)>& feed = {});

  // The conversation as a session file's bytes (session/session_file.h). It needs its cache
  // and an id.
  Result<std::string> Image() const;
  // Writes `dir/<id>.pkvs` under another id than its own (the conversation keeps its id and
  // what it knows of its own file).
  Status SaveAs(const std::string& dir, const std::string& id);
  // Writes `dir/<id>.pkvs`: the turns since the last save or load there appended as a delta,
  // or the whole image (the first save, another directory, deltas grown past the base's size,
  // or a file another writer replaced).
  Status Save(const std::string& dir);

  // What a store is sent next: a delta over what it holds (`stored()`, when that is at `where`,
  // a file's path or a store's name, and the deltas stay below the base's size), else the
  // whole image.
  struct StoreWrite {
    bool delta = false;
    uint64_t after_turn = 0;  // a delta's: the turn the store must hold
    std::string bytes;
  };
  Result<StoreWrite> NextWrite(const std::string& where) const;
  // The store at `where` now holds `w`.
  void Stored(const StoreWrite& w, const std::string& where);
  // What a store holds of this conversation (after a load: DescribeStored), or nothing.
  void SetStored(std::optional<StoredImage> stored) { stored_ = std::move(stored); }
  const std::optional<StoredImage>& stored() const { return stored_; }

 private:
  // Frees the sliding-window layers' entries no later query can see (the forward passes do it
  // too; this covers a cache filled elsewhere).
  void DropExpired();
  // Whether TruncateTo(n) returns to the rewind point.
  bool RewindPointAt(size_t n) const;
  // drop_expired: the windowed layers drop what no later query sees (ForwardOptions).
  Status Forward(std::span<const Token> tokens, bool drop_expired = true);
  Status Prefill(std::span<const Token> tokens, bool drop_expired);
  Status CompressTo(int target, bool context);
  Status Account(const Status& s, const CompressStats& st, bool context);
  // One compression under the model lock, timed, with the heads' lengths before and after.
  Status RunCompression(const std::function<Status(CompressStats*)>& compress, bool context);
  std::vector<int> HeadLengths() const;  // entries per (layer, KV head), row-major
  std::unique_lock<std::mutex> LockModel();

  const Model* model_;
  const Compressor* compressor_;
  ThreadPool* pool_;
  KvRetention retention_;
  KvCacheOptions kv_;
  ConversationRecord record_;
  std::optional<PressCapture> own_capture_;
  PressCapture* capture_;
  std::mutex* model_mutex_;
  ForwardWorkspace own_ws_;
  ForwardWorkspace* ws_;
  std::vector<float> logits_;
  ConversationStats stats_;
  std::optional<StoredImage> stored_;
  // SetRewindPoint's sliding-window layers (the others empty) and its token count.
  std::optional<KvCache> rewind_cache_;
  size_t rewind_tokens_ = 0;
};

}  // namespace primekv
