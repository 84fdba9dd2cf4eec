// The evaluation protocol around one conversation (docs/design.md §4): a context, then one or
// more questions, run under one of six modes (context, question, multiturn, chunked, decode,
// first-question) on a Conversation, whose schedule compresses the KV cache.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/model/sampler.h"
#include "primekv/press/compressor.h"
#include "primekv/session/conversation.h"
#include "primekv/session/session.h"

namespace primekv {

struct PipelineOptions {
  CompressionMode mode = CompressionMode::kContext;
  // Ratio, chunk, interval, ubatch and window (its --ctx-size; bounds KVzip's second pass); the
  // run sets its mode from `mode`.
  Schedule schedule;
  int max_new_tokens = 64;
  SamplerOptions sampler{0.0f, 0, 1.0f, 0};  // greedy unless told otherwise
  KvCacheOptions kv;
  // Called after each generated token of a turn; return false to stop that turn.
  std::function<bool(int turn, Token)> on_token;
};

struct TurnResult {
  std::vector<Token> tokens;  // generated ids, without the end-of-generation token
  bool stopped_at_end = false;
  double prefill_ms = 0;  // question prefill
  double decode_ms = 0;
};

struct PipelineReport {
  std::vector<TurnResult> turns;
  int context_tokens = 0;
  size_t kv_bytes_full = 0;        // bytes the uncompressed context would take
  size_t kv_bytes_compressed = 0;  // after the first compression
  size_t kv_bytes_peak = 0;
  size_t kv_bytes_final = 0;            // when the last turn ends
  size_t kv_bytes_reserved = 0;         // pages held from the pool at the end (reservations too)
  std::vector<int64_t> kept_per_layer;  // after the first compression, summed over KV heads
  std::vector<int64_t> entries_per_layer_final;  // when the last turn ends, summed over KV heads
  double context_prefill_ms = 0;
  double score_ms = 0;   // all scoring and selection
  int compressions = 0;  // every compression: after the context, chunks, turns, decode steps
};

// A context prefilled once with full cache, to be compressed by several presses in turn (the
// evaluation harness shares one prefill across every press and ratio of a sample).
struct PrefilledContext {
  KvCache cache;
  PressCapture capture;
  std::vector<float> last_logits;  // [vocab] after the context's last token
  double prefill_ms = 0;           // the forward pass over the context
  // KVzip's second pass over the context (ReconstructContext), when `needs` asked for it: a cost
  // of the presses that read it, not of the prefill the others share.
  double second_pass_ms = 0;
};
// `needs` should cover every press that will compress this context (UnionNeeds); `window` as
// the schedule's.
Result<PrefilledContext> PrefillForPresses(const Model& model, const PressNeeds& needs,
                                           const KvCacheOptions& kv, std::span<const Token> context,
                                           ThreadPool& pool, int window = 0);

// Context size (docs/reliability.md): the most positions a run may use.
inline constexpr int kMaxContextSize = 1 << 24;
// `requested` tokens, or the model's trained context when 0. Above the trained context only with
// allow_overflow, and then *warning (when given) says so. Errors name --ctx-size.
Result<int> ResolveContextSize(const ModelConfig& config, int64_t requested, bool allow_overflow,
                               std::string* warning = nullptr);
// Positions a conversation occupies: the context, then each turn's question and max_new_tokens
// answer tokens, summed over turns in kMultiTurn (answers stay in the cache), else the largest
// turn (turns are answered independently; in kFirstQuestion after the first question, which
// stays). No questions: one answer after the context.
int64_t ConversationPositions(CompressionMode mode, int64_t context_tokens,
                              const std::vector<std::vector<Token>>& questions,
                              int64_t max_new_tokens);

// Runs one conversation: `context` (with BOS if wanted) then each question in order.
// kContext and kChunked answer questions independently from the same compressed context;
// kMultiTurn keeps each question and answer in the cache for the next turn.
Result<PipelineReport> RunPipeline(const Model& model, const Compressor& compressor,
                                   const PipelineOptions& options, std::span<const Token> context,
                                   const std::vector<std::vector<Token>>& questions,
                                   ThreadPool& pool, const PrefilledContext* prefilled = nullptr);
// With `prefilled` (modes context, multiturn, decode), the context is not prefilled again: a
// clone of the prefilled cache is compressed instead; `context` must be the same tokens.

}  // namespace primekv
