#include "primekv/session/session.h"

#include <algorithm>
#include <string>

namespace primekv {

namespace {

constexpr std::pair<CompressionMode, std::string_view> kModeNames[] = {
    {CompressionMode::kContext, "context"},     {CompressionMode::kQuestion, "question"},
    {CompressionMode::kMultiTurn, "multiturn"}, {CompressionMode::kChunked, "chunked"},
    {CompressionMode::kDecode, "decode"},       {CompressionMode::kFirstQuestion, "first-question"},
};

}  // namespace

std::optional<CompressionMode> ParseCompressionMode(std::string_view s) {
  if (s == "multi-turn") return CompressionMode::kMultiTurn;
  for (const auto& [mode, name] : kModeNames) {
    if (s == name) return mode;
  }
  return std::nullopt;
}

std::string_view CompressionModeName(CompressionMode m) {
  for (const auto& [mode, name] : kModeNames) {
    if (m == mode) return name;
  }
  return "?";
}

Status CheckPipelinePress(const Press& press) {
  if (press.scorer && press.scorer->Needs().future_queries) {
    return Status::Error("press " + press.name +
                         " reads the true future queries, so it runs only under the fidelity "
                         "protocol (primekv fidelity)");
  }
  return Status::Ok();
}

Status CheckSchedule(const Press& press, const Schedule& schedule) {
  PRIMEKV_RETURN_IF_ERROR(CheckPipelinePress(press));
  const CompressionMode mode = schedule.mode;
  if (press.scorer && press.scorer->Needs().reconstruction && schedule.ratio > 0 &&
      (mode == CompressionMode::kChunked || mode == CompressionMode::kDecode ||
       mode == CompressionMode::kMultiTurn)) {
    return Status::Error("press " + press.name +
                         " scores the whole context by a pass that repeats it, so it compresses "
                         "once after the prefill: use --mode context, question or "
                         "first-question, not " +
                         std::string(CompressionModeName(mode)));
  }
  if (mode == CompressionMode::kChunked && !press.query_free) {
    return Status::Error(
        "press " + press.name +
        " reads queries, so it cannot compress during chunked prefill; use a query-free press");
  }
  return Status::Ok();
}

Session::Session(const Model& model, const Compressor& compressor, const Schedule& schedule,
                 ThreadPool& pool, SessionParts parts)
    : model_(model),
      compressor_(compressor),
      schedule_(schedule),
      pool_(pool),
      cache_(parts.cache),
      capture_(parts.capture),
      model_mutex_(parts.model_mutex),
      ws_(parts.workspace != nullptr ? parts.workspace : &own_ws_),
      logits_(static_cast<size_t>(model.config().vocab_size)) {}

void Session::SetLogits(std::span<const float> logits) {
  Check(logits.size() == logits_.size(), "Session::SetLogits: not one row of the vocabulary");
  std::copy(logits.begin(), logits.end(), logits_.begin());
}

void Session::NotePeak() {
  stats_.kv_bytes_peak = std::max(stats_.kv_bytes_peak, cache_.BytesInUse());
}

void Session::ReleaseWorkspace() { *ws_ = ForwardWorkspace{}; }

std::unique_lock<std::mutex> Session::LockModel() {
  return model_mutex_ != nullptr ? std::unique_lock<std::mutex>(*model_mutex_)
                                 : std::unique_lock<std::mutex>();
}

Status Session::Forward(std::span<const Token> tokens) {
  MatView<float> out(logits_.data(), 1, model_.config().vocab_size);
  const auto lock = LockModel();
  Status s = model_.Forward(tokens, cache_, {}, out, pool_, *ws_, capture_);
  NotePeak();
  return s;
}

Status Session::Prefill(std::span<const Token> tokens) {
  const size_t ub = schedule_.ubatch > 0 ? static_cast<size_t>(schedule_.ubatch) : tokens.size();
  for (size_t b = 0; b < tokens.size(); b += ub)
    PRIMEKV_RETURN_IF_ERROR(Forward(tokens.subspan(b, std::min(ub, tokens.size() - b))));
  return Status::Ok();
}

Status Session::FeedToken(Token token) { return Forward(std::span<const Token>(&token, 1)); }

Status Session::Account(const Status& s, const CompressStats& st, bool context) {
  stats_.score_ms += st.score_ms;
  ++stats_.compressions;
  if (context) {
    stats_.kv_bytes_compressed = st.bytes_after;
    stats_.kept_per_layer = st.kept_per_layer;
  }
  return s;
}

Status Session::CompressTo(int target, bool context) {
  CompressStats st;
  const auto lock = LockModel();
  return Account(compressor_.CompressTo(cache_, target, capture_, pool_, &st), st, context);
}

Status Session::PrefillContext(std::span<const Token> context) {
  if (schedule_.mode != CompressionMode::kChunked) {
    PRIMEKV_RETURN_IF_ERROR(Prefill(context));
    if (Compressing() && compressor_.Needs().reconstruction) {
      if (capture_ == nullptr) return Status::Error("session: KVzip's pass needs a capture");
      const auto lock = LockModel();
      PRIMEKV_RETURN_IF_ERROR(
          ReconstructContext(model_, cache_, context, schedule_.window, pool_, *capture_));
    }
    return CompressContext(static_cast<int>(context.size()));
  }
  const size_t chunk = static_cast<size_t>(std::max(1, schedule_.chunk));
  for (size_t b = 0; b < context.size(); b += chunk) {
    PRIMEKV_RETURN_IF_ERROR(Prefill(context.subspan(b, std::min(chunk, context.size() - b))));
    PRIMEKV_RETURN_IF_ERROR(AfterChunk());
  }
  budget_ = KeepCount(static_cast<int>(context.size()), schedule_.ratio);
  return Status::Ok();
}

Status Session::AfterChunk() {
  if (schedule_.mode != CompressionMode::kChunked || !Compressing()) return Status::Ok();
  // The forward buffers (sized by the chunk) go before the press allocates its scratch, so
  // peak memory holds the larger of the two, not both (docs/performance.md).
  ReleaseWorkspace();
  // Each chunk's compression overwrites the context figures: they describe the last chunk's.
  return CompressTo(KeepCount(cache_.NextPosition(), schedule_.ratio), /*context=*/true);
}

Status Session::CompressContext(int context_tokens) {
  budget_ = KeepCount(context_tokens, schedule_.ratio);
  if (!Compressing()) return Status::Ok();
  CompressStats st;
  const auto lock = LockModel();
  return Account(compressor_.Compress(cache_, schedule_.ratio, capture_, pool_, &st), st, true);
}

Status Session::AfterToken(int generated) {
  if (schedule_.mode != CompressionMode::kDecode || !Compressing() ||
      generated % std::max(1, schedule_.interval) != 0)
    return Status::Ok();
  return CompressTo(KeepCount(cache_.NextPosition(), schedule_.ratio), false);
}

Status Session::EndTurn() {
  if (schedule_.mode != CompressionMode::kMultiTurn || !Compressing() ||
      cache_.MaxLength() <= budget_)
    return Status::Ok();
  return CompressTo(budget_, false);
}

Result<DecodeResult> Session::Decode(const DecodeOptions& options,
                                     const std::function<Status(Token)>& feed) {
  DecodeResult r;
  r.tokens.reserve(static_cast<size_t>(std::max(0, options.reserve)));
  cache_.Reserve(options.reserve + 1);
  Sampler sampler(options.sampler);
  for (int i = 0; i < options.max_new_tokens; ++i) {
    auto sampled = sampler.Sample(logits_);
    if (!sampled.ok())
      return Status::Error(options.label + "token " + std::to_string(i + 1) + ": " +
                           sampled.message());
    const Token next = *sampled;
    const bool end = model_.tokenizer().IsEndOfGeneration(next);
    if (!end) r.tokens.push_back(next);
    bool go = end || !options.on_token || options.on_token(next);
    if (options.keep_going && !options.keep_going()) go = false;
    const bool stop = end || !go || i + 1 == options.max_new_tokens;
    r.stopped_at_end = end;
    if (stop && !options.feed_last) break;
    PRIMEKV_RETURN_IF_ERROR(feed ? feed(next) : FeedToken(next));
    if (stop) break;
    PRIMEKV_RETURN_IF_ERROR(AfterToken(i + 1));
  }
  return r;
}

}  // namespace primekv
