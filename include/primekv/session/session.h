// The compression schedule of a conversation (docs/design.md §4): when it compresses, which
// presses can follow which schedule, and the options of its decode loop. The conversation itself
// (the owner of the cache, its tokens and turns) is session/conversation.h.
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

// The compression modes, one vocabulary: the four a conversation schedules (ScheduleMode: when
// its cache is compressed) and two protocols of the pipeline (session/pipeline.h) that ask each
// question on a cache compressed with it (question) or with the first question only
// (first-question); both of those compress once, like kContext. One table names them all
// (src/session/session.cc).
enum class ScheduleMode {
  kContext,    // once, after the context (the first prefill of a conversation)
  kChunked,    // the context in chunks, compressing after each one
  kDecode,     // like kContext, and again every `interval` generated tokens
  kMultiTurn,  // like kContext, and after each turn the cache comes back to the context's budget
};
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
// "context", "question", "multiturn" (or "multi-turn"), "chunked", "decode", "first-question".
std::optional<CompressionMode> ParseCompressionMode(std::string_view s);
std::string_view CompressionModeName(CompressionMode m);
// The schedule the conversation runs under a mode.
ScheduleMode ScheduleModeOf(CompressionMode m);
// The modes a conversation schedules: "context", "chunked", "decode", "multiturn".
std::optional<ScheduleMode> ParseScheduleMode(std::string_view s);
std::string_view ScheduleModeName(ScheduleMode m);

// When a conversation compresses.
struct Schedule {
  double ratio = 0.0;  // fraction of the entries a compression removes; 0 = never compress
  ScheduleMode mode = ScheduleMode::kContext;
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

// What a conversation has done to its cache since it was made or loaded.
struct ConversationStats {
  int compressions = 0;
  double score_ms = 0;       // all scoring and selection
  size_t kv_bytes_peak = 0;  // largest BytesInUse() after a forward pass
  // The compression after the context (after its last chunk in chunked mode), if any ran.
  size_t kv_bytes_compressed = 0;
  std::vector<int64_t> kept_per_layer;  // summed over KV heads
  double compress_ms = 0;               // every compression's wall time, compaction included
  // The last compression's entries per (layer, KV head), row-major, before and after it (the
  // server's cache view shows what it removed); empty until one runs.
  std::vector<int> last_before, last_after;
};

}  // namespace primekv
