#include "primekv/session/conversation.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "primekv/session/session_file.h"

namespace primekv {

Conversation::Conversation(const Model& model, const Compressor& compressor, ThreadPool& pool,
                           ConversationRecord record, const KvCacheOptions& kv,
                           ConversationParts parts)
    : model_(&model),
      compressor_(&compressor),
      pool_(&pool),
      retention_(model.Retention()),
      kv_(kv),
      record_(std::move(record)),
      capture_(parts.capture),
      model_mutex_(parts.model_mutex),
      ws_(parts.workspace != nullptr ? parts.workspace : &own_ws_) {
  if (record_.cache) {
    retention_.NoteHeld(*record_.cache);
  } else {
    record_.cache = model.NewCache(kv);
  }
  if (capture_ == nullptr) capture_ = &own_capture_.emplace(model, compressor.Needs());
}

KvCache Conversation::TakeCache() {
  KvCache c = std::move(*record_.cache);
  record_.cache.reset();
  stored_.reset();
  rewind_cache_.reset();
  return c;
}

void Conversation::AdoptCapture(const PressCapture& capture) {
  capture_ = &own_capture_.emplace(capture);
}

void Conversation::Restore(ConversationRecord image, std::optional<StoredImage> stored) {
  record_.cache = image.cache ? std::move(image.cache) : model_->NewCache(kv_);
  record_.cache_salt = std::move(image.cache_salt);
  record_.tokens = std::move(image.tokens);
  record_.budget = image.budget;
  record_.last_prompt_len = image.last_prompt_len;
  record_.turn = image.turn;
  retention_.NoteHeld(*record_.cache);
  rewind_cache_.reset();
  stored_ = std::move(stored);
  capture_->Clear();
}

void Conversation::EnsureCache() {
  if (!record_.cache) record_.cache = model_->NewCache(kv_);
}

size_t Conversation::ForkFrom(KvCache shared, std::span<const Token> tokens,
                              const PressCapture& capture, int budget, size_t keep) {
  record_.cache = std::move(shared);
  record_.tokens.assign(tokens.begin(), tokens.end());
  rewind_cache_.reset();
  stored_.reset();
  const size_t kept = TruncateTo(keep);
  if (kept > 0) {
    record_.budget = budget;
    AdoptCapture(capture);
  }
  return kept;
}

bool Conversation::RewindPointAt(size_t n) const {
  // The point is of this cache's pool unless the record's cache was replaced since.
  const auto same_pool = [](const KvCache& a, const KvCache& b) {
    const auto pa = a.PoolHandle(), pb = b.PoolHandle();
    return !pa.owner_before(pb) && !pb.owner_before(pa);
  };
  return rewind_cache_ && rewind_tokens_ == n && same_pool(*rewind_cache_, *record_.cache);
}

size_t Conversation::Keepable(size_t n) const {
  if (n >= record_.tokens.size()) return record_.tokens.size();
  if (n == 0 || (!RewindPointAt(n) && !retention_.Reaches(*record_.cache, static_cast<int64_t>(n))))
    return 0;
  return n;
}

size_t Conversation::TruncateTo(size_t n) {
  if (n >= record_.tokens.size()) return record_.tokens.size();
  const bool rewind_point = RewindPointAt(n);
  if (Keepable(n) == 0) {
    Reset();
    return 0;
  }
  // A cut before the point may be followed by other tokens: the point no longer describes them.
  if (n < rewind_tokens_) rewind_cache_.reset();
  record_.tokens.resize(n);
  record_.cache->TruncateFrom(static_cast<int32_t>(n));
  if (rewind_point) retention_.RestoreWindowed(*record_.cache, *rewind_cache_);
  if (stored_) stored_->stable = std::min(stored_->stable, n);
  return n;
}

void Conversation::SetRewindPoint() {
  if (!retention_.Windowed()) return;
  rewind_cache_ = retention_.WindowedShare(*record_.cache);
  rewind_tokens_ = record_.tokens.size();
}

void Conversation::Reset() {
  record_.tokens.clear();
  record_.cache->Clear();
  rewind_cache_.reset();
  if (stored_) stored_->stable = 0;
  capture_->Clear();
}

void Conversation::SetLogits(std::span<const float> logits) {
  logits_.assign(logits.begin(), logits.end());
  Check(logits_.size() == static_cast<size_t>(model_->config().vocab_size),
        "Conversation::SetLogits: not one row of the vocabulary");
}

void Conversation::NotePeak() {
  stats_.kv_bytes_peak = std::max(stats_.kv_bytes_peak, record_.cache->BytesInUse());
}

void Conversation::ReleaseWorkspace() { *ws_ = ForwardWorkspace{}; }

void Conversation::ReleaseBuffers() {
  ReleaseWorkspace();
  logits_ = {};
}

std::unique_lock<std::mutex> Conversation::LockModel() {
  return model_mutex_ != nullptr ? std::unique_lock<std::mutex>(*model_mutex_)
                                 : std::unique_lock<std::mutex>();
}

Status Conversation::Forward(std::span<const Token> tokens, bool drop_expired) {
  logits_.resize(static_cast<size_t>(model_->config().vocab_size));
  MatView<float> out(logits_.data(), 1, model_->config().vocab_size);
  const auto lock = LockModel();
  Status s = model_->Forward(tokens, *record_.cache, {.drop_expired = drop_expired}, out, *pool_,
                             *ws_, capture_);
  NotePeak();
  if (s.ok()) record_.tokens.insert(record_.tokens.end(), tokens.begin(), tokens.end());
  return s;
}

Status Conversation::Prefill(std::span<const Token> tokens) { return Prefill(tokens, true); }

Status Conversation::Prefill(std::span<const Token> tokens, bool drop_expired) {
  const Schedule& sc = record_.schedule;
  const size_t ub = sc.ubatch > 0 ? static_cast<size_t>(sc.ubatch) : tokens.size();
  for (size_t b = 0; b < tokens.size(); b += ub) {
    PRIMEKV_RETURN_IF_ERROR(
        Forward(tokens.subspan(b, std::min(ub, tokens.size() - b)), drop_expired));
  }
  return Status::Ok();
}

Status Conversation::FeedToken(Token token) { return Forward(std::span<const Token>(&token, 1)); }

std::vector<int> Conversation::HeadLengths() const {
  const KvCache& c = *record_.cache;
  std::vector<int> lengths;
  lengths.reserve(static_cast<size_t>(c.n_layers() * c.n_kv_heads()));
  for (int l = 0; l < c.n_layers(); ++l)
    for (int h = 0; h < c.n_kv_heads(); ++h) lengths.push_back(c.Length(l, h));
  return lengths;
}

Status Conversation::Account(const Status& s, const CompressStats& st, bool context) {
  stats_.score_ms += st.score_ms;
  ++stats_.compressions;
  if (context) {
    stats_.kv_bytes_compressed = st.bytes_after;
    stats_.kept_per_layer = st.kept_per_layer;
  }
  return s;
}

Status Conversation::RunCompression(const std::function<Status(CompressStats*)>& compress,
                                    bool context) {
  CompressStats st;
  const auto lock = LockModel();
  std::vector<int> before = HeadLengths();
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = compress(&st);
  stats_.compress_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  stats_.last_before = std::move(before);
  stats_.last_after = HeadLengths();
  return Account(s, st, context);
}

Status Conversation::CompressTo(int target, bool context) {
  return RunCompression(
      [&](CompressStats* st) {
        return compressor_->CompressTo(*record_.cache, target, capture_, *pool_, st);
      },
      context);
}

std::vector<int> Conversation::TurnWindowRows() const {
  if (Compressing() && compressor_->Needs().reconstruction) return {};  // PrefillContext keeps all
  return retention_.TurnRows(record_.cache->page_tokens());
}

Status Conversation::PrefillContext(std::span<const Token> context) {
  const Schedule& sc = record_.schedule;
  if (sc.mode != ScheduleMode::kChunked) {
    // The second pass re-reads the whole context, windowed layers included: they drop what
    // they no longer see only after it (CompressContext).
    const bool reconstruct = Compressing() && compressor_->Needs().reconstruction;
    PRIMEKV_RETURN_IF_ERROR(Prefill(context, !reconstruct));
    if (reconstruct) {
      const auto lock = LockModel();
      PRIMEKV_RETURN_IF_ERROR(
          ReconstructContext(*model_, *record_.cache, context, sc.window, *pool_, *capture_));
    }
    return CompressContext(static_cast<int>(context.size()));
  }
  const size_t chunk = static_cast<size_t>(std::max(1, sc.chunk));
  for (size_t b = 0; b < context.size(); b += chunk) {
    PRIMEKV_RETURN_IF_ERROR(Prefill(context.subspan(b, std::min(chunk, context.size() - b))));
    PRIMEKV_RETURN_IF_ERROR(AfterChunk());
  }
  record_.budget = KeepCount(static_cast<int>(context.size()), sc.ratio);
  return Status::Ok();
}

Status Conversation::AfterChunk() {
  if (record_.schedule.mode == ScheduleMode::kChunked) DropExpired();
  if (record_.schedule.mode != ScheduleMode::kChunked || !Compressing()) return Status::Ok();
  // The forward buffers (sized by the chunk) go before the press allocates its scratch, so
  // peak memory holds the larger of the two, not both (docs/performance.md).
  ReleaseWorkspace();
  // Each chunk's compression overwrites the context figures: they describe the last chunk's.
  return CompressTo(KeepCount(record_.cache->NextPosition(), record_.schedule.ratio),
                    /*context=*/true);
}

Status Conversation::CompressContext(int context_tokens) {
  record_.budget = KeepCount(context_tokens, record_.schedule.ratio);
  // Expired pages go first, so a press scores only what a window still holds.
  DropExpired();
  if (!Compressing()) return Status::Ok();
  return RunCompression(
      [&](CompressStats* st) {
        return compressor_->Compress(*record_.cache, record_.schedule.ratio, capture_, *pool_, st);
      },
      true);
}

void Conversation::DropExpired() {
  const auto lock = LockModel();
  retention_.DropExpired(*record_.cache);
}

Status Conversation::CompressNow(double ratio) {
  if (!(ratio >= 0 && ratio < 1)) return Status::Error("ratio must be in [0, 1)");
  if (!compressor_->enabled() || ratio == 0) return Status::Ok();
  PRIMEKV_RETURN_IF_ERROR(RunCompression(
      [&](CompressStats* st) {
        return compressor_->Compress(*record_.cache, ratio, capture_, *pool_, st);
      },
      false));
  record_.budget = KeepCount(static_cast<int>(record_.tokens.size()), ratio);
  return Status::Ok();
}

Status Conversation::AfterToken(int generated) {
  const Schedule& sc = record_.schedule;
  if (sc.mode != ScheduleMode::kDecode || !Compressing() ||
      generated % std::max(1, sc.interval) != 0)
    return Status::Ok();
  return CompressTo(KeepCount(record_.cache->NextPosition(), sc.ratio), false);
}

Status Conversation::EndTurn() {
  DropExpired();
  if (record_.schedule.mode == ScheduleMode::kMultiTurn && Compressing() &&
      record_.cache->MaxLength() > record_.budget)
    PRIMEKV_RETURN_IF_ERROR(CompressTo(record_.budget, false));
  ++record_.turn;
  return Status::Ok();
}

Result<DecodeResult> Conversation::Decode(const DecodeOptions& options,
                                          const std::function<Status(Token)>& feed) {
  DecodeResult r;
  r.tokens.reserve(static_cast<size_t>(std::max(0, options.reserve)));
  // Its forward passes drop expired entries (FeedToken), so sliding-window layers stay bounded.
  record_.cache->Reserve(options.reserve + 1, retention_.TurnRows(record_.cache->page_tokens()));
  record_.tokens.reserve(record_.tokens.size() + static_cast<size_t>(options.reserve) + 1);
  Sampler sampler(options.sampler);
  for (int i = 0; i < options.max_new_tokens; ++i) {
    auto sampled = sampler.Sample(logits_);
    if (!sampled.ok())
      return Status::Error(options.label + "token " + std::to_string(i + 1) + ": " +
                           sampled.message());
    const Token next = *sampled;
    const bool end = model_->tokenizer().IsEndOfGeneration(next);
    if (!end) r.tokens.push_back(next);
    bool go = end || !options.on_token || options.on_token(next);
    if (options.keep_going && !options.keep_going()) go = false;
    const bool stop = end || !go || i + 1 == options.max_new_tokens;
    r.stopped_at_end = end;
    if (stop && !options.feed_last) break;
    if (feed) {
      PRIMEKV_RETURN_IF_ERROR(feed(next));
      record_.tokens.push_back(next);
    } else {
      PRIMEKV_RETURN_IF_ERROR(FeedToken(next));
    }
    if (stop) break;
    PRIMEKV_RETURN_IF_ERROR(AfterToken(i + 1));
  }
  return r;
}

Result<std::string> Conversation::Image() const { return SerializeSession(record_); }

Result<Conversation::StoreWrite> Conversation::NextWrite(const std::string& where) const {
  StoreWrite w;
  if (stored_ && stored_->where == where && stored_->extent.appendable) {
    auto delta = SerializeSessionDelta(record_, *stored_);
    const ImageExtent& e = stored_->extent;
    // Deltas past the base's size cost a load more than the base: write the whole image.
    if (delta.ok() && e.bytes - e.base_bytes + delta->size() <= e.base_bytes) {
      w.delta = true;
      w.after_turn = stored_->turn;
      w.bytes = std::move(delta).value();
      return w;
    }
  }
  auto image = Image();
  if (!image.ok()) return image.status();
  w.bytes = std::move(image).value();
  return w;
}

void Conversation::Stored(const StoreWrite& w, const std::string& where) {
  ImageExtent e;
  if (w.delta && stored_) {
    e = stored_->extent;
    e.bytes += w.bytes.size();
    ++e.deltas;
  } else {
    e.bytes = e.base_bytes = w.bytes.size();
    e.appendable = true;
  }
  e.last_sum = RecordChecksum(w.bytes);
  e.torn_bytes = 0;
  if (record_.cache) e.stored = record_.cache->dtype();
  stored_ = DescribeStored(record_, where, e);
}

Status Conversation::SaveAs(const std::string& dir, const std::string& id) {
  if (id == record_.id) return Save(dir);
  // The whole image under the other name; the record's id is restored before anything can fail.
  const std::string own = std::exchange(record_.id, id);
  auto image = Image();
  record_.id = own;
  if (!image.ok()) return image.status();
  return WriteSessionImage(dir, id, *image);
}

Status Conversation::Save(const std::string& dir) {
  const std::string path = dir + "/" + record_.id + ".pkvs";
  auto w = NextWrite(path);
  if (!w.ok()) return w.status();
  if (w->delta && AppendSessionDelta(dir, record_.id, w->bytes, *stored_).ok()) {
    Stored(*w, path);
    return Status::Ok();
  }
  if (w->delta) {
    // The file is not what this conversation stored (replaced, or gone): write it whole.
    stored_.reset();
    w = NextWrite(path);
    if (!w.ok()) return w.status();
  }
  PRIMEKV_RETURN_IF_ERROR(WriteSessionImage(dir, record_.id, w->bytes));
  Stored(*w, path);
  return Status::Ok();
}

}  // namespace primekv
