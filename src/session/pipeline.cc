#include "primekv/session/pipeline.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace primekv {

namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One conversation under the protocol, and what the run reports of it.
struct Runner {
  const Model& model;
  const PipelineOptions& opt;
  Conversation conv;
  PipelineReport report;

  Runner(const Model& m, const Compressor& c, const PipelineOptions& o, ThreadPool& p,
         std::span<const Token> context, const PrefilledContext* pre)
      : model(m), opt(o), conv(m, c, p, RecordOf(o, context, pre), o.kv) {
    if (pre) {
      conv.AdoptCapture(pre->capture);
      conv.SetLogits(pre->last_logits);
    }
  }

  static Schedule ScheduleOf(const PipelineOptions& o) {
    Schedule s = o.schedule;
    s.mode = ScheduleModeOf(o.mode);
    return s;
  }

  // A fresh conversation, or one over a share of the prefilled context.
  static ConversationRecord RecordOf(const PipelineOptions& o, std::span<const Token> context,
                                     const PrefilledContext* pre) {
    ConversationRecord r{.schedule = ScheduleOf(o)};
    if (pre) {
      r.tokens.assign(context.begin(), context.end());
      r.cache = pre->cache.Share();  // each press's compression copies only the pages it changes
    }
    return r;
  }

  Status Context(std::span<const Token> context) {
    const auto t0 = std::chrono::steady_clock::now();
    PRIMEKV_RETURN_IF_ERROR(conv.PrefillContext(context));
    report.context_prefill_ms += MsSince(t0);
    return Status::Ok();
  }

  // The cache as the run leaves it: bytes, entries per layer, the peak and the compressions.
  void Finish() {
    const ConversationStats& st = conv.stats();
    const KvCache& cache = conv.cache();
    report.compressions = st.compressions;
    report.score_ms = st.score_ms;
    report.kept_per_layer = st.kept_per_layer;
    report.kv_bytes_compressed = st.kv_bytes_compressed;
    report.kv_bytes_peak = std::max(st.kv_bytes_peak, cache.PeakBytesInUse());
    report.kv_bytes_final = cache.BytesInUse();
    report.kv_bytes_reserved = cache.BytesReserved();
    report.entries_per_layer_final.assign(static_cast<size_t>(cache.n_layers()), 0);
    for (int l = 0; l < cache.n_layers(); ++l)
      for (int h = 0; h < cache.n_kv_heads(); ++h)
        report.entries_per_layer_final[static_cast<size_t>(l)] += cache.Length(l, h);
    // No compression after the context: the cache kept all of it (a compression that left a
    // windowed cache 0 bytes reports 0).
    if (st.kept_per_layer.empty()) report.kv_bytes_compressed = report.kv_bytes_full;
  }

  // Prefills the question (if any) and decodes an answer.
  Result<TurnResult> Answer(int turn, std::span<const Token> question) {
    TurnResult r;
    auto t0 = std::chrono::steady_clock::now();
    if (!question.empty()) PRIMEKV_RETURN_IF_ERROR(conv.Prefill(question));
    r.prefill_ms = MsSince(t0);
    t0 = std::chrono::steady_clock::now();
    DecodeOptions d;
    d.max_new_tokens = opt.max_new_tokens;
    d.sampler = opt.sampler;
    // In multi-turn mode the whole answer, end token included, stays in the cache.
    d.feed_last = opt.mode == CompressionMode::kMultiTurn;
    if (opt.on_token) d.on_token = [&](Token t) { return opt.on_token(turn, t); };
    // The decode loop then allocates nothing. Bounded by the room left in the trained context,
    // so a huge max_new_tokens never reserves memory blindly (past it the cache grows per page).
    const int64_t room = model.config().max_context > 0
                             ? int64_t{model.config().max_context} - conv.cache().NextPosition()
                             : int64_t{opt.max_new_tokens};
    d.reserve = static_cast<int>(
        std::clamp<int64_t>(std::min<int64_t>(opt.max_new_tokens, room), 0, kMaxContextSize));
    d.label = "turn " + std::to_string(turn + 1) + ", ";
    PRIMEKV_ASSIGN_OR_RETURN(DecodeResult decoded, conv.Decode(d));
    r.tokens = std::move(decoded.tokens);
    r.stopped_at_end = decoded.stopped_at_end;
    r.decode_ms = MsSince(t0);
    return r;
  }
};

}  // namespace

Result<PrefilledContext> PrefillForPresses(const Model& model, const PressNeeds& needs,
                                           const KvCacheOptions& kv, std::span<const Token> context,
                                           ThreadPool& pool, int window) {
  if (context.empty()) return Status::Error("prefill: empty context");
  PrefilledContext p{model.NewCache(kv), PressCapture(model, needs),
                     std::vector<float>(static_cast<size_t>(model.config().vocab_size)), 0};
  ForwardWorkspace ws;
  const auto t0 = std::chrono::steady_clock::now();
  MatView<float> out(p.last_logits.data(), 1, model.config().vocab_size);
  PRIMEKV_RETURN_IF_ERROR(model.Forward(context, p.cache, {}, out, pool, ws, &p.capture));
  p.prefill_ms = MsSince(t0);
  if (needs.reconstruction) {
    const auto t1 = std::chrono::steady_clock::now();
    PRIMEKV_RETURN_IF_ERROR(ReconstructContext(model, p.cache, context, window, pool, p.capture));
    p.second_pass_ms = MsSince(t1);
  }
  return p;
}

Result<int> ResolveContextSize(const ModelConfig& config, int64_t requested, bool allow_overflow,
                               std::string* warning) {
  const int trained = config.max_context;
  if (requested < 0) return Status::Error("--ctx-size must be >= 0 (0 = the trained context)");
  if (requested > kMaxContextSize) {
    return Status::Error("--ctx-size " + std::to_string(requested) + " exceeds the limit of " +
                         std::to_string(kMaxContextSize) + " tokens");
  }
  if (requested == 0 && allow_overflow) {
    return Status::Error(
        "--allow-ctx-overflow needs --ctx-size N (a context size above the "
        "model's trained context of " +
        std::to_string(trained) + " tokens)");
  }
  if (requested == 0) {
    if (trained <= 0)
      return Status::Error("the model states no trained context length: give --ctx-size");
    return std::min(trained, kMaxContextSize);
  }
  if (trained > 0 && requested > trained) {
    if (!allow_overflow) {
      return Status::Error("--ctx-size " + std::to_string(requested) +
                           " exceeds the model's trained context of " + std::to_string(trained) +
                           " tokens (add --allow-ctx-overflow to run past it)");
    }
    if (warning != nullptr) {
      *warning = "--ctx-size " + std::to_string(requested) +
                 " runs past the model's trained "
                 "context of " +
                 std::to_string(trained) +
                 " tokens (--allow-ctx-overflow): output beyond it may degrade";
    }
  }
  return static_cast<int>(requested);
}

int64_t ConversationPositions(CompressionMode mode, int64_t context_tokens,
                              const std::vector<std::vector<Token>>& questions,
                              int64_t max_new_tokens) {
  const int64_t answer = std::max<int64_t>(0, max_new_tokens);
  if (questions.empty()) return context_tokens + answer;
  int64_t sum = 0, largest = 0;
  for (const auto& q : questions) {
    const int64_t turn = static_cast<int64_t>(q.size()) + answer;
    sum += turn;
    largest = std::max(largest, turn);
  }
  if (mode == CompressionMode::kFirstQuestion)
    return context_tokens + static_cast<int64_t>(questions.front().size()) + largest;
  return context_tokens + (mode == CompressionMode::kMultiTurn ? sum : largest);
}

namespace {

// kQuestion: each question is prefilled after the context, then the whole is compressed. With
// `pre`, the context's prefill is shared: each question goes after a share of its cache and a
// copy of its capture (a causal forward pass gives the context the same entries either way).
Status RunQuestionMode(Runner& run, std::span<const Token> context,
                       const std::vector<std::vector<Token>>& turns, const PrefilledContext* pre) {
  for (size_t t = 0; t < turns.size(); ++t) {
    std::vector<Token> joined(context.begin(), context.end());
    joined.insert(joined.end(), turns[t].begin(), turns[t].end());
    if (pre && !turns[t].empty()) {
      run.conv.ForkFrom(pre->cache.Share(), context, pre->capture, run.conv.budget(),
                        context.size());
      const auto t0 = std::chrono::steady_clock::now();
      PRIMEKV_RETURN_IF_ERROR(run.conv.Prefill(turns[t]));
      run.report.context_prefill_ms += MsSince(t0);
      PRIMEKV_RETURN_IF_ERROR(run.conv.CompressContext(static_cast<int>(joined.size())));
    } else {
      run.conv.Reset();
      PRIMEKV_RETURN_IF_ERROR(run.Context(joined));
    }
    PRIMEKV_ASSIGN_OR_RETURN(TurnResult r, run.Answer(static_cast<int>(t), {}));
    run.report.turns.push_back(std::move(r));
  }
  return Status::Ok();
}

// kFirstQuestion: compressed once, after the first question (the paper's multi-turn protocol);
// the first question stays in the cache, each later question and every answer is dropped after
// its turn.
Status RunFirstQuestionMode(Runner& run, std::span<const Token> context,
                            const std::vector<std::vector<Token>>& turns) {
  std::vector<Token> joined(context.begin(), context.end());
  joined.insert(joined.end(), turns[0].begin(), turns[0].end());
  PRIMEKV_RETURN_IF_ERROR(run.Context(joined));
  const size_t first_end = run.conv.tokens().size();
  run.conv.SetRewindPoint();
  for (size_t t = 0; t < turns.size(); ++t) {
    PRIMEKV_ASSIGN_OR_RETURN(
        TurnResult r,
        run.Answer(static_cast<int>(t), t == 0 ? std::span<const Token>() : turns[t]));
    run.report.turns.push_back(std::move(r));
    if (t + 1 < turns.size() && run.conv.TruncateTo(first_end) != first_end)
      return Status::Error("first-question mode: the sliding-window layers cannot rewind");
  }
  return Status::Ok();
}

// kContext, kChunked, kDecode, kMultiTurn: one compressed context (prefilled now, or a clone of
// `reuse`'s), then the turns.
Status RunSharedContextModes(Runner& run, std::span<const Token> context,
                             const std::vector<std::vector<Token>>& turns, bool reuse) {
  if (reuse) {
    run.conv.NotePeak();
    PRIMEKV_RETURN_IF_ERROR(run.conv.CompressContext(static_cast<int>(context.size())));
  } else {
    PRIMEKV_RETURN_IF_ERROR(run.Context(context));
  }
  const size_t context_end = run.conv.tokens().size();
  if (run.opt.mode != CompressionMode::kMultiTurn) run.conv.SetRewindPoint();
  for (size_t t = 0; t < turns.size(); ++t) {
    PRIMEKV_ASSIGN_OR_RETURN(TurnResult r, run.Answer(static_cast<int>(t), turns[t]));
    run.report.turns.push_back(std::move(r));
    PRIMEKV_RETURN_IF_ERROR(run.conv.EndTurn());
    // Independent questions share the compressed context: drop this turn's entries.
    if (run.opt.mode != CompressionMode::kMultiTurn && t + 1 < turns.size() &&
        run.conv.TruncateTo(context_end) != context_end)
      return Status::Error("the sliding-window layers cannot rewind to the context's end");
  }
  return Status::Ok();
}

Status CheckPipeline(const Compressor& compressor, const PipelineOptions& options,
                     std::span<const Token> context) {
  if (context.empty()) return Status::Error("pipeline: empty context");
  if (!(options.schedule.ratio >= 0 && options.schedule.ratio < 1))
    return Status::Error("pipeline: ratio must be in [0, 1)");
  // Before the prefill, not at the first sampled token.
  PRIMEKV_RETURN_IF_ERROR(ValidateSamplerOptions(options.sampler));
  return CheckSchedule(compressor.press(), Runner::ScheduleOf(options));
}

}  // namespace

Result<PipelineReport> RunPipeline(const Model& model, const Compressor& compressor,
                                   const PipelineOptions& options, std::span<const Token> context,
                                   const std::vector<std::vector<Token>>& questions,
                                   ThreadPool& pool, const PrefilledContext* prefilled) {
  PRIMEKV_RETURN_IF_ERROR(CheckPipeline(compressor, options, context));
  const bool reuse = prefilled != nullptr && options.mode != CompressionMode::kQuestion &&
                     options.mode != CompressionMode::kChunked &&
                     options.mode != CompressionMode::kFirstQuestion;
  // Question mode prefills each question after the shared context, unless the press reads a
  // second pass over the context and question together (KVzip).
  const PrefilledContext* question_pre =
      options.mode == CompressionMode::kQuestion && !compressor.Needs().reconstruction ? prefilled
                                                                                       : nullptr;
  Runner run(model, compressor, options, pool, context, reuse ? prefilled : nullptr);
  const ModelConfig& c = model.config();
  run.report.context_tokens = static_cast<int>(context.size());
  run.report.kv_bytes_full = context.size() * static_cast<size_t>(c.n_layers) * c.n_kv_heads *
                             run.conv.cache().BytesPerEntry();
  std::vector<std::vector<Token>> turns = questions;
  if (turns.empty()) turns.emplace_back();
  if (options.mode == CompressionMode::kQuestion) {
    PRIMEKV_RETURN_IF_ERROR(RunQuestionMode(run, context, turns, question_pre));
  } else if (options.mode == CompressionMode::kFirstQuestion) {
    PRIMEKV_RETURN_IF_ERROR(RunFirstQuestionMode(run, context, turns));
  } else {
    PRIMEKV_RETURN_IF_ERROR(RunSharedContextModes(run, context, turns, reuse));
  }
  run.Finish();
  return run.report;
}

}  // namespace primekv
