// A conversation over one KV cache (docs/design.md §4): prefill, the compression schedule (after
// the context, per chunk, per decode interval, per turn over a multi-turn budget) and the decode
// loop. The pipeline (session/pipeline.h), the server's turns and `primekv bench`'s depth fill
// all run through it, so their schedules are decided here. Two callers still compress a cache
// outside it: the C API's pk_session_compress (src/capi/session_api.cc) and fidelity's
// compressed clone (src/eval/fidelity.cc) call Compressor::Compress directly (issue 50).
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/model/sampler.h"
#include "primekv/press/compressor.h"

namespace primekv {

enum class CompressionMode {
  kContext,    // compress after the context, before any question (default)
  kQuestion,   // each question is prefilled with the context, then compressed
  kMultiTurn,  // questions in turns; answers stay; re-compress when over budget
  kChunked,    // prefill the context in chunks, compressing after each one
  kDecode,     // like kContext, and re-compress every `interval` generated tokens
  // The context and the first question are prefilled and compressed once (query-aware presses
  // see the first question); every question is then asked on that cache, independently.
  kFirstQuestion,
};
std::optional<CompressionMode> ParseCompressionMode(std::string_view s);
std::string_view CompressionModeName(CompressionMode m);

// When a Session compresses.
struct Schedule {
  double ratio = 0.0;  // fraction of the entries a compression removes; 0 = never compress
  CompressionMode mode = CompressionMode::kContext;
  int chunk = 512;     // kChunked: tokens per prefill chunk
  int interval = 512;  // kDecode: generated tokens between compressions
  int ubatch = 0;      // tokens per forward pass of a prefill; 0 = the whole piece at once
  // Positions the run may use (0 = the model's trained context). Bounds KVzip's second pass.
  int window = 0;
};

// Whether `press` can run outside the fidelity protocol: a press that reads the true future
// queries cannot, since only that protocol knows the continuation in advance.
Status CheckPipelinePress(const Press& press);
// Whether `press` can follow `schedule`: CheckPipelinePress, and a press scored by a pass that
// repeats the whole context compresses only once after it, and only a query-free press can
// compress between chunks (the queries after a chunk do not exist yet).
Status CheckSchedule(const Press& press, const Schedule& schedule);

struct DecodeOptions {
  int max_new_tokens = 128;
  SamplerOptions sampler;
  // Feed the final token (the end token, or the last one allowed) into the cache too, so the
  // whole answer stays there (multi-turn); otherwise the loop stops before that forward.
  bool feed_last = false;
  // Called with each generated token that is not an end token; return false to stop.
  std::function<bool(Token)> on_token;
  // Asked after every sampled token, the end token included; false stops (a client gone).
  std::function<bool()> keep_going;
  int reserve = 0;    // tokens reserved up front, so the loop itself allocates nothing
  std::string label;  // prepended to sampling errors, e.g. "turn 2, "
};

struct DecodeResult {
  std::vector<Token> tokens;  // generated ids, without the end-of-generation token
  bool stopped_at_end = false;
};

// What a Session has done to its cache.
struct SessionStats {
  int compressions = 0;
  double score_ms = 0;       // all scoring and selection
  size_t kv_bytes_peak = 0;  // largest BytesInUse() after a forward pass
  // The compression after the context (after its last chunk in chunked mode), if any ran.
  size_t kv_bytes_compressed = 0;
  std::vector<int64_t> kept_per_layer;  // summed over KV heads
};

// What a Session works on; the caller keeps all of it alive and may share the model mutex.
struct SessionParts {
  KvCache& cache;
  PressCapture* capture = nullptr;        // what the press reads; null when it reads nothing
  ForwardWorkspace* workspace = nullptr;  // null: the session's own
  std::mutex* model_mutex = nullptr;      // held around each forward pass and compression, if given
};

class Session {
 public:
  Session(const Model& model, const Compressor& compressor, const Schedule& schedule,
          ThreadPool& pool, SessionParts parts);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  bool Compressing() const { return schedule_.ratio > 0 && compressor_.enabled(); }
  KvCache& cache() { return cache_; }
  // The distribution after the last token fed: a decode step overwrites it.
  std::span<float> logits() { return logits_; }
  void SetLogits(std::span<const float> logits);
  const SessionStats& stats() const { return stats_; }
  // Entries per head a multi-turn conversation comes back to after each turn.
  int budget() const { return budget_; }
  void set_budget(int budget) { budget_ = budget; }
  // Folds the cache's current size into the peak (a cache filled elsewhere).
  void NotePeak();
  // Frees the forward buffers (a caller whose decode steps run elsewhere).
  void ReleaseWorkspace();

  // Runs tokens through the model (in micro-batches of the schedule's ubatch); no compression.
  Status Prefill(std::span<const Token> tokens);
  // The context under the schedule: in chunks compressing after each (kChunked), or whole and
  // compressed once after it. Sets the multi-turn budget to the context's share.
  Status PrefillContext(std::span<const Token> context);
  // After a chunk of the context: every head comes down to the share of the positions so far.
  Status AfterChunk();
  // After a context of `context_tokens` already in the cache (and reconstructed, for a press
  // that needs it): one compression to the ratio. Sets the multi-turn budget.
  Status CompressContext(int context_tokens);
  // One decode step: the token through the model, its logits into logits().
  Status FeedToken(Token token);
  // After the `generated`-th token of an answer was fed: every `interval` tokens (kDecode) the
  // cache comes down to the share of its positions.
  Status AfterToken(int generated);
  // After a turn: a multi-turn cache over its budget comes back to it.
  Status EndTurn();
  // The decode loop: samples from logits(), hands each token on, feeds it (through `feed` when
  // given, which must leave the next logits in logits(), else FeedToken) and applies
  // AfterToken. Sampling errors read label + "token N: ..."; errors of feed pass unchanged.
  Result<DecodeResult> Decode(const DecodeOptions& options,
                              const std::function<Status(Token)>& feed = {});

 private:
  Status Forward(std::span<const Token> tokens);
  Status CompressTo(int target, bool context);
  Status Account(const Status& s, const CompressStats& st, bool context);
  std::unique_lock<std::mutex> LockModel();

  const Model& model_;
  const Compressor& compressor_;
  Schedule schedule_;
  ThreadPool& pool_;
  KvCache& cache_;
  PressCapture* capture_;
  std::mutex* model_mutex_;
  ForwardWorkspace own_ws_;
  ForwardWorkspace* ws_;
  std::vector<float> logits_;
  SessionStats stats_;
  int budget_ = 0;
};

}  // namespace primekv
