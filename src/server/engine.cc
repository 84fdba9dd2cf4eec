// The session store and the turn engine of `primekv serve`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <sstream>

#include "server/server_internal.h"

namespace primekv::server {

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
size_t Utf8SafeLength(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

size_t CommonPrefix(const std::vector<Token>& a, const std::vector<Token>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

Engine::Engine(const ServerOptions& options) : options_(options) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::Create(const ServerOptions& options) {
  if (Status s = ValidateServerOptions(options); !s.ok()) return s;
  std::unique_ptr<Engine> e(new Engine(options));
  auto model = Model::Load(options.model_path);
  if (!model.ok()) return model.status();
  e->model_ = std::make_unique<Model>(std::move(model).value());
  std::string ctx_note;
  auto ctx = ResolveContextSize(e->model_->config(), options.ctx_size, options.allow_ctx_overflow,
                                &ctx_note);
  if (!ctx.ok()) return ctx.status();
  if (!ctx_note.empty()) std::fprintf(stderr, "primekv serve: warning: %s\n", ctx_note.c_str());
  e->ctx_size_ = *ctx;
  e->pool_ = std::make_unique<ThreadPool>(options.threads);
  // The model's template must be one whose rendering is built in (or named by
  // --chat-template): a template that only resembles one would be answered without what it adds.
  auto chat = ResolveChatFormat(e->model_->tokenizer(), options.chat_template);
  if (!chat.ok()) return Status::Error(options.model_path + ": " + chat.message());
  e->chat_format_ = *chat;
  e->slots_free_ = options.slots;
  e->id_salt_ = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  if (auto err = e->CheckPress(options.press, options.ratio, "--press")) {
    return Status::Error(err->message);
  }
  if (!options.session_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.session_dir, ec);
    if (ec) return Status::Error("cannot create --session-dir '" + options.session_dir + "'");
    e->IndexSessionDir();
  }
  return e;
}

std::optional<HttpError> Engine::CheckPress(const std::string& press, double ratio,
                                            const std::string& param) const {
  auto spec = ParsePressSpec(press);
  if (!spec.ok()) return HttpError{400, spec.message(), param};
  auto made = MakePress(*spec);
  if (!made.ok()) return HttpError{400, made.message(), param};
  if (!(ratio >= 0 && ratio < 1)) return HttpError{400, "ratio must be in [0, 1)", param};
  if (made->scorer && !made->query_free && made->name == "oracle")
    return HttpError{400, "press " + made->name + " is for the fidelity protocol only", param};
  // Sessions compress after each request's tokens; a pass over the whole context each time is
  // not what KVzip is for, and its scores cover only the context the pass repeated.
  if (made->scorer && made->scorer->Needs().reconstruction)
    return HttpError{400,
                     "press " + made->name +
                         " is not served (it runs in primekv generate, eval "
                         "and fidelity)",
                     param};
  return std::nullopt;
}

const Compressor& Engine::CompressorFor(const std::string& press) {
  auto& c = compressors_[press];
  if (!c) {
    // CheckPress ran on every press that reaches here.
    c = std::make_unique<Compressor>(*model_, std::move(MakePress(*ParsePressSpec(press))).value());
  }
  return *c;
}

void Engine::IndexSessionDir() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.session_dir, ec)) {
    const std::string path = entry.path().string();
    if (entry.path().extension() == ".tmp") {
      // A write the process did not finish (crash): never renamed, never valid.
      std::filesystem::remove(entry.path(), ec);
      continue;
    }
    if (entry.path().extension() != ".pkvs") continue;
    auto snap = ReadSessionFile(path, *model_, kv_, /*header_only=*/true);
    if (!snap.ok()) {
      std::fprintf(stderr, "primekv serve: skipping %s\n", snap.message().c_str());
      ++counters_.session_files_rejected;
      continue;
    }
    auto s = std::make_unique<Session>();
    s->id = snap->id;
    s->press = snap->press;
    s->ratio = snap->ratio;
    s->budget = snap->budget;
    s->last_prompt_len = snap->last_prompt_len;
    s->tokens = std::move(snap->tokens);
    s->persisted = true;
    sessions_[s->id] = std::move(s);
  }
  std::fprintf(stderr, "primekv serve: %zu session(s) indexed from %s\n", sessions_.size(),
               options_.session_dir.c_str());
}

bool Engine::EvictOneLocked(const Session* except) {
  Session* victim = nullptr;
  for (auto& [id, s] : sessions_) {
    if (s.get() == except || s->busy || !s->cache) continue;
    if (!victim || s->last_used < victim->last_used) victim = s.get();
  }
  if (!victim) return false;
  bytes_used_ -= victim->bytes;
  ++counters_.evictions;
  if (!victim->persisted) {
    const std::string id = victim->id;
    sessions_.erase(id);  // nowhere to keep it: the conversation is forgotten
  } else {
    // Its file is current (written after every completed turn): dropping the cache loses
    // nothing.
    victim->cache.reset();
    victim->capture.reset();
    victim->bytes = 0;
  }
  return true;
}

std::optional<HttpError> Engine::CheckFits(const TurnRequest& req) const {
  const int n_prompt = static_cast<int>(req.prompt.size());
  if (n_prompt == 0) return HttpError{400, "the prompt encodes to no tokens", "messages"};
  if (n_prompt >= ctx_size_) {
    return HttpError{400,
                     "the prompt has " + std::to_string(n_prompt) + " tokens; the context holds " +
                         std::to_string(ctx_size_),
                     "messages", "context_length_exceeded"};
  }
  if (req.max_tokens > ctx_size_ - n_prompt) {
    return HttpError{400,
                     "max_tokens " + std::to_string(req.max_tokens) + " exceeds the " +
                         std::to_string(ctx_size_ - n_prompt) + " tokens left in the context",
                     "max_tokens", "context_length_exceeded"};
  }
  return std::nullopt;
}

void Engine::TakeSlot() {
  std::unique_lock lock(slot_mu_);
  slot_cv_.wait(lock, [&] { return slots_free_ > 0; });
  --slots_free_;
}

void Engine::GiveSlot() {
  std::lock_guard lock(slot_mu_);
  ++slots_free_;
  slot_cv_.notify_one();
}

std::string Engine::NewSessionIdLocked() {
  // splitmix64 of a salted counter: unique in this run, unlikely to collide across runs.
  uint64_t z = id_salt_ + 0x9E3779B97F4A7C15ull * ++id_counter_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(z));
  return std::string("s") + hex;
}

std::variant<Session*, HttpError> Engine::FindSessionLocked(const TurnRequest& req, size_t& keep) {
  Session* s = nullptr;
  keep = 0;
  if (!req.session_id.empty()) {
    auto it = sessions_.find(req.session_id);
    if (it == sessions_.end()) {
      return HttpError{404, "unknown session '" + req.session_id + "'", "session",
                       "not_found_error"};
    }
    s = it->second.get();
    if (s->busy) {
      return HttpError{409, "session '" + req.session_id + "' is answering another request",
                       "session"};
    }
    if (s->press != req.press || s->ratio != req.ratio) {
      return HttpError{400,
                       "session '" + req.session_id + "' was created with press " + s->press +
                           " ratio " + std::to_string(s->ratio),
                       "primekv"};
    }
    keep = CommonPrefix(s->tokens, req.prompt);
  } else {
    // Token-prefix match: the request must contain the session's whole last prompt (its
    // answer may be re-tokenised differently; the cache is cut where the tokens diverge).
    for (auto& [id, cand] : sessions_) {
      if (cand->busy || cand->press != req.press || cand->ratio != req.ratio) continue;
      const size_t lcp = CommonPrefix(cand->tokens, req.prompt);
      if (lcp == 0 || lcp < static_cast<size_t>(cand->last_prompt_len)) continue;
      if (!s || lcp > keep) {
        s = cand.get();
        keep = lcp;
      }
    }
  }
  if (!s) {
    auto fresh = std::make_unique<Session>();
    fresh->id = NewSessionIdLocked();
    if (sessions_.count(fresh->id))
      return HttpError{500, "session id collision; retry", "", "server_error"};
    fresh->press = req.press;
    fresh->ratio = req.ratio;
    s = fresh.get();
    sessions_[fresh->id] = std::move(fresh);
  }
  s->busy = true;
  s->last_used = ++clock_;
  return s;
}

std::optional<HttpError> Engine::RestoreIfEvicted(Session& s, bool& restored) {
  restored = false;
  if (!s.cache && !s.tokens.empty()) {
    // File I/O outside the store lock; the session is busy, so no one else touches it.
    auto snap = ReadSessionFile(options_.session_dir + "/" + s.id + ".pkvs", *model_, kv_, false);
    std::lock_guard lock(store_mu_);
    if (!snap.ok()) {
      std::fprintf(stderr, "primekv serve: %s\n", snap.message().c_str());
      ++counters_.session_files_rejected;
      const std::string id = s.id;
      sessions_.erase(id);
      return HttpError{404, "session '" + id + "' could not be restored: " + snap.message(),
                       "session", "not_found_error"};
    }
    s.cache = std::make_unique<KvCache>(std::move(*snap->cache));
    s.tokens = std::move(snap->tokens);
    s.budget = snap->budget;
    s.last_prompt_len = snap->last_prompt_len;
    restored = true;
    ++counters_.restores;
  }
  if (!s.capture || !s.cache) {
    std::lock_guard lock(store_mu_);
    if (!s.cache) s.cache = std::make_unique<KvCache>(model_->NewCache(kv_));
    if (!s.capture)
      s.capture = std::make_unique<PressCapture>(*model_, CompressorFor(s.press).Needs());
  }
  return std::nullopt;
}

std::optional<HttpError> Engine::ReserveMemory(Session& s, size_t reserve, bool restored) {
  std::unique_lock lock(store_mu_);
  const size_t now = s.cache->BytesAllocated();
  if (restored) s.bytes = 0;
  bytes_used_ = bytes_used_ - s.bytes + now;
  s.bytes = now;
  // Evict idle sessions; while running turns hold the rest, wait for one to finish (bounded).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    while (bytes_used_ + reserve > options_.kv_budget_bytes && EvictOneLocked(&s)) {
    }
    if (bytes_used_ + reserve <= options_.kv_budget_bytes || running_turns_ == 0) break;
    if (store_cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
  }
  if (bytes_used_ + reserve > options_.kv_budget_bytes) {
    ++counters_.rejected_memory;
    s.busy = false;
    const size_t need = s.bytes + reserve;
    if (s.tokens.empty()) {
      bytes_used_ -= s.bytes;
      const std::string id = s.id;
      sessions_.erase(id);
    } else if (restored && s.persisted) {
      bytes_used_ -= s.bytes;  // back to disk: it was only read for this request
      s.bytes = 0;
      s.cache.reset();
      s.capture.reset();
    }
    return HttpError{503,
                     "the KV budget (" + std::to_string(options_.kv_budget_bytes) +
                         " bytes) cannot hold this request (" + std::to_string(need) + " bytes)",
                     "", "server_overloaded"};
  }
  bytes_used_ += reserve;
  ++running_turns_;
  return std::nullopt;
}

std::variant<std::unique_ptr<Turn>, HttpError> Engine::Begin(TurnRequest req) {
  if (auto err = CheckFits(req)) return *err;
  TakeSlot();  // waits while --slots requests are running
  Session* s = nullptr;
  size_t keep = 0;
  {
    std::lock_guard lock(store_mu_);
    auto found = FindSessionLocked(req, keep);
    if (auto* err = std::get_if<HttpError>(&found)) {
      GiveSlot();
      return *err;
    }
    s = std::get<Session*>(found);
  }
  // The prompt's last token is always run again, so its logits start the answer.
  keep = std::min(keep, req.prompt.size() - 1);
  bool restored = false;
  if (auto err = RestoreIfEvicted(*s, restored)) {
    GiveSlot();
    return *err;
  }
  keep = std::min(keep, CommonPrefix(s->tokens, req.prompt));
  // Memory: what this turn may add (prefill + answer + page slack), then make room.
  // (Exact for the pool's page and chunk sizes: the decode loop calls Reserve the same way.)
  const size_t new_tokens = req.prompt.size() - keep + static_cast<size_t>(req.max_tokens) + 1;
  const size_t reserve = s->cache->BytesAllocatedAfterReserve(static_cast<int>(new_tokens)) -
                         s->cache->BytesAllocated();
  if (auto err = ReserveMemory(*s, reserve, restored)) {
    GiveSlot();
    return *err;
  }
  return std::make_unique<Turn>(this, s, reserve, std::move(req), static_cast<int>(keep));
}

Turn::Turn(Engine* engine, Session* session, size_t reserved, TurnRequest request, int keep)
    : engine_(engine),
      session_(session),
      reserved_(reserved),
      req_(std::move(request)),
      keep_(keep) {}

Turn::~Turn() { engine_->Finish(session_, reserved_, ran_, modified_); }

const std::string& Turn::session_id() const { return session_->id; }

void Engine::Finish(Session* s, size_t reserved, bool ok, bool modified) {
  {
    std::lock_guard lock(store_mu_);
    bytes_used_ -= reserved;
    const size_t now = s->cache ? s->cache->BytesAllocated() : 0;
    bytes_used_ = bytes_used_ - s->bytes + now;
    s->bytes = now;
    s->busy = false;
    s->last_used = ++clock_;
    if (!ok && modified && s->persisted) {
      // A failed turn leaves the cache suspect: fall back to the last completed turn's file.
      s->cache.reset();
      s->capture.reset();
      bytes_used_ -= s->bytes;
      s->bytes = 0;
    } else if (!ok && (modified || s->tokens.empty())) {
      bytes_used_ -= s->bytes;
      const std::string id = s->id;
      sessions_.erase(id);
    }
    --running_turns_;
  }
  store_cv_.notify_all();
  std::lock_guard lock(slot_mu_);
  ++slots_free_;
  slot_cv_.notify_one();
}

Status Engine::Persist(Session& s) {
  if (options_.session_dir.empty()) return Status::Ok();
  SessionSnapshot snap;
  snap.id = s.id;
  snap.press = s.press;
  snap.ratio = s.ratio;
  snap.mode = std::string(CompressionModeName(options_.mode));
  snap.budget = s.budget;
  snap.last_prompt_len = s.last_prompt_len;
  snap.tokens = s.tokens;
  return WriteSessionFile(options_.session_dir, snap, *s.cache);
}

struct Engine::DecodeJob {
  DecodeSlot slot;
  std::span<float> logits;
  std::chrono::steady_clock::time_point since;
  Status status = Status::Ok();
  bool done = false;
};

void Engine::EnterDecode() {
  std::lock_guard lock(batch_mu_);
  ++decoders_;
}

void Engine::LeaveDecode() {
  std::lock_guard lock(batch_mu_);
  --decoders_;
  batch_cv_.notify_all();  // the waiting turns may now all be in
}

Status Engine::DecodeStep(const DecodeSlot& slot, std::span<float> logits) {
  DecodeJob job{slot, logits, std::chrono::steady_clock::now()};
  std::unique_lock lock(batch_mu_);
  pending_.push_back(&job);
  // No wake-up here: the turn whose token completes the batch runs it itself (below), and the
  // others wait with the deadline of the oldest pending token, which a push does not move.
  // Waking every waiter on every push cost more than the step's sampling on a small model.
  while (!job.done) {
    if (batch_running_ || pending_.empty()) {
      batch_cv_.wait(lock);
      continue;
    }
    // Wait for the other decoding turns (their sampling and output take far less than a
    // step), but at most about one step: a turn that is slow to come back (a slow streaming
    // client) costs the others little. The wait starts when the last batch ended at the
    // earliest, so that its turns can come back before a token that came in during it runs.
    const auto wait = std::chrono::duration<double>(std::clamp(last_batch_seconds_, 5e-5, 5e-3));
    const auto deadline = std::max(pending_.front()->since, last_batch_end_) +
                          std::chrono::duration_cast<std::chrono::nanoseconds>(wait);
    if (static_cast<int>(pending_.size()) >= decoders_ ||
        std::chrono::steady_clock::now() >= deadline) {
      RunBatchLocked(lock);
    } else {
      batch_cv_.wait_until(lock, deadline);
    }
  }
  return job.status;
}

void Engine::RunBatchLocked(std::unique_lock<std::mutex>& lock) {
  // One batch runs at a time, so its buffers are reused (pending_ keeps the other one's).
  std::vector<DecodeJob*>& batch = batch_jobs_;
  batch.clear();
  batch.swap(pending_);
  batch_running_ = true;
  lock.unlock();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = Status::Ok();
  {
    std::lock_guard model_lock(model_mu_);
    const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
    if (batch_logits_.size() < batch.size() * vocab) batch_logits_.resize(batch.size() * vocab);
    batch_slots_.clear();
    for (const DecodeJob* j : batch) batch_slots_.push_back(j->slot);
    st = model_->ForwardDecodeBatch(
        batch_slots_,
        MatView<float>(batch_logits_.data(), static_cast<int64_t>(batch.size()),
                       static_cast<int64_t>(vocab)),
        *pool_, decode_ws_);
    for (size_t i = 0; st.ok() && i < batch.size(); ++i)
      std::copy_n(batch_logits_.data() + i * vocab, vocab, batch[i]->logits.data());
  }
  const double seconds = SecondsSince(t0);
  lock.lock();
  batch_running_ = false;
  last_batch_seconds_ = seconds;
  last_batch_end_ = std::chrono::steady_clock::now();
  ++decode_batches_;
  decode_batch_rows_ += batch.size();
  for (DecodeJob* j : batch) {
    j->status = st;
    j->done = true;
  }
  batch_cv_.notify_all();
}

struct Turn::State {
  TurnOutcome out;
  const Compressor* compressor = nullptr;
  bool compress = false;
  std::vector<float> logits;
  uint64_t compressions = 0;
  double prefill_s = 0, decode_s = 0;
  size_t emitted = 0;  // bytes of out.text sent to the sink
  bool client_gone = false;
};

Status Turn::Prefill(State& st) {
  Engine& e = *engine_;
  Session& s = *session_;
  const Model& model = e.model();
  KvCache& cache = *s.cache;
  const bool first_turn = s.tokens.empty();
  modified_ = true;
  // Cut the cache where the request departs from the session, then prefill the rest.
  if (static_cast<size_t>(keep_) < s.tokens.size()) {
    cache.TruncateFrom(keep_);
    s.tokens.resize(static_cast<size_t>(keep_));
  }
  const std::span<const Token> fresh =
      std::span<const Token>(req_.prompt).subspan(static_cast<size_t>(keep_));
  st.out.prefilled_tokens = static_cast<int>(fresh.size());
  st.logits.assign(static_cast<size_t>(model.config().vocab_size), 0.0f);
  MatView<float> lv(st.logits.data(), 1, model.config().vocab_size);
  const auto t0 = std::chrono::steady_clock::now();
  {
    ForwardWorkspace ws;
    std::lock_guard lock(e.model_mu_);
    if (Status r = model.Forward(fresh, cache, {}, lv, *e.pool_, ws, s.capture.get()); !r.ok())
      return r;
    if (first_turn && st.compress) {
      if (Status r = st.compressor->Compress(cache, s.ratio, s.capture.get(), *e.pool_); !r.ok())
        return r;
      ++st.compressions;
    }
  }
  s.tokens.insert(s.tokens.end(), fresh.begin(), fresh.end());
  if (first_turn) s.budget = KeepCount(static_cast<int>(req_.prompt.size()), s.ratio);
  s.last_prompt_len = static_cast<int>(s.tokens.size());
  st.prefill_s = SecondsSince(t0);
  return Status::Ok();
}

void Turn::Emit(State& st, const TextSink& sink, bool all) {
  if (!sink || st.client_gone) return;
  size_t hold = 0;  // bytes held back while they could start a stop string
  for (const auto& stop : req_.stop) hold = std::max(hold, stop.size() - 1);
  size_t ready = Utf8SafeLength(st.out.text);
  ready = all ? st.out.text.size() : (ready > hold ? ready - hold : 0);
  if (ready > st.emitted) {
    st.client_gone = !sink(st.out.text.substr(st.emitted, ready - st.emitted));
    st.emitted = ready;
  }
}

Status Turn::Decode(State& st, const TextSink& sink, const AliveCheck& alive) {
  Engine& e = *engine_;
  Session& s = *session_;
  const Tokenizer& tok = e.model().tokenizer();
  KvCache& cache = *s.cache;
  const auto t0 = std::chrono::steady_clock::now();
  Sampler sampler(req_.sampler);
  cache.Reserve(req_.max_tokens + 1);
  TurnOutcome& out = st.out;
  out.finish_reason = "length";
  for (int i = 0; i < req_.max_tokens; ++i) {
    auto sampled = sampler.Sample(st.logits);
    if (!sampled.ok()) return sampled.status();
    const Token next = *sampled;
    const bool end = tok.IsEndOfGeneration(next);
    bool stop_hit = false;
    if (!end) {
      out.tokens.push_back(next);
      out.text = tok.Decode(out.tokens, false);
      for (const auto& stop : req_.stop) {
        const size_t at = out.text.find(stop);
        if (at != std::string::npos) {
          out.text.resize(at);
          stop_hit = true;
        }
      }
      Emit(st, sink, stop_hit);
    }
    if (alive && !alive()) st.client_gone = true;
    if (end || stop_hit) out.finish_reason = "stop";
    if (st.client_gone) out.finish_reason = "cancelled";
    const bool stop = end || stop_hit || st.client_gone || i + 1 == req_.max_tokens;
    // The answer (its end token included) stays in the cache for the next turn.
    if (Status r = e.DecodeStep({next, &cache, s.capture.get()}, st.logits); !r.ok()) return r;
    s.tokens.push_back(next);
    out.appended.push_back(next);
    if (!stop && e.options_.mode == CompressionMode::kDecode && st.compress &&
        (i + 1) % std::max(1, e.options_.interval) == 0) {
      std::lock_guard lock(e.model_mu_);
      const int target = KeepCount(cache.NextPosition(), s.ratio);
      if (Status r = st.compressor->CompressTo(cache, target, s.capture.get(), *e.pool_); !r.ok())
        return r;
      ++st.compressions;
    }
    if (stop) break;
  }
  if (sink && !st.client_gone && st.out.text.size() > st.emitted)
    sink(st.out.text.substr(st.emitted));
  st.decode_s = SecondsSince(t0);
  return Status::Ok();
}

Status Turn::EndTurn(State& st) {
  Engine& e = *engine_;
  Session& s = *session_;
  KvCache& cache = *s.cache;
  if (e.options_.mode == CompressionMode::kMultiTurn && st.compress &&
      cache.MaxLength() > s.budget) {
    std::lock_guard lock(e.model_mu_);
    if (Status r = st.compressor->CompressTo(cache, s.budget, s.capture.get(), *e.pool_); !r.ok())
      return r;
    ++st.compressions;
  }
  // Compression returns pages to the cache's own pool; a copy gives the memory back.
  if (cache.BytesAllocated() > 2 * cache.BytesReserved() + (size_t{1} << 20)) {
    *s.cache = cache.Clone();
  }
  if (!e.options_.session_dir.empty()) {
    const Status r = e.Persist(s);
    if (!r.ok()) std::fprintf(stderr, "primekv serve: %s\n", r.message().c_str());
    std::lock_guard lock(e.store_mu_);
    s.persisted = r.ok();
  }
  return Status::Ok();
}

Result<TurnOutcome> Turn::Run(const TextSink& sink, const AliveCheck& alive) {
  Engine& e = *engine_;
  Session& s = *session_;
  State st;
  {
    std::lock_guard lock(e.store_mu_);
    st.compressor = &e.CompressorFor(s.press);
  }
  st.compress = st.compressor->enabled() && s.ratio > 0;
  st.out.session_id = s.id;
  st.out.prompt_tokens = static_cast<int>(req_.prompt.size());
  st.out.cached_tokens = keep_;
  if (Status r = Prefill(st); !r.ok()) return r;
  {
    e.EnterDecode();
    const Status r = Decode(st, sink, alive);
    e.LeaveDecode();
    if (!r.ok()) return r;
  }
  if (Status r = EndTurn(st); !r.ok()) return r;
  ran_ = true;
  std::lock_guard lock(e.store_mu_);
  auto& c = e.counters_;
  const TurnOutcome& out = st.out;
  c.prompt_tokens += static_cast<uint64_t>(out.prompt_tokens);
  c.cached_tokens += static_cast<uint64_t>(out.cached_tokens);
  c.prefill_tokens += static_cast<uint64_t>(out.prefilled_tokens);
  c.completion_tokens += out.tokens.size();
  c.prefill_seconds += st.prefill_s;
  c.decode_seconds += st.decode_s;
  c.compressions += st.compressions;
  if (st.client_gone) ++c.cancelled;
  return std::move(st.out);
}

void Engine::CountRequest(int status) {
  std::lock_guard lock(store_mu_);
  ++counters_.requests[status];
}

std::string Engine::MetricsText() {
  std::lock_guard lock(store_mu_);
  const Counters& c = counters_;
  std::ostringstream o;
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    o << "# HELP primekv_" << name << " " << help << "\n# TYPE primekv_" << name << " " << type
      << "\nprimekv_" << name << " " << value << "\n";
  };
  o << "# HELP primekv_requests_total HTTP requests answered, by status\n"
       "# TYPE primekv_requests_total counter\n";
  for (const auto& [status, n] : c.requests)
    o << "primekv_requests_total{status=\"" << status << "\"} " << n << "\n";
  metric("prompt_tokens_total", "counter", "Prompt tokens of completed turns", c.prompt_tokens);
  metric("cached_prompt_tokens_total", "counter",
         "Prompt tokens reused from a session's cache (not prefilled)", c.cached_tokens);
  metric("prefill_tokens_total", "counter", "Prompt tokens run through the model",
         c.prefill_tokens);
  metric("completion_tokens_total", "counter", "Generated tokens", c.completion_tokens);
  metric("prefill_seconds_total", "counter", "Time spent prefilling", c.prefill_seconds);
  metric("decode_seconds_total", "counter", "Time spent decoding", c.decode_seconds);
  metric("prefill_tokens_per_second", "gauge", "Prefill throughput over the server's life",
         c.prefill_seconds > 0 ? static_cast<double>(c.prefill_tokens) / c.prefill_seconds : 0.0);
  metric("decode_tokens_per_second", "gauge", "Decode throughput over the server's life",
         c.decode_seconds > 0 ? static_cast<double>(c.completion_tokens) / c.decode_seconds : 0.0);
  size_t held = 0, live = 0, on_disk = 0;
  for (const auto& [id, s] : sessions_) {
    if (s->cache) {
      held += s->bytes;
      ++live;
    } else {
      ++on_disk;
    }
  }
  metric("kv_bytes_held", "gauge", "KV cache bytes held by sessions in memory", held);
  metric("kv_bytes_accounted", "gauge", "KV bytes held plus reservations of running turns",
         bytes_used_);
  metric("kv_budget_bytes", "gauge", "The --kv-budget-mib budget", options_.kv_budget_bytes);
  metric("compressions_total", "counter", "Cache compressions", c.compressions);
  metric("sessions_in_memory", "gauge", "Sessions whose cache is in memory", live);
  metric("sessions_on_disk", "gauge", "Sessions evicted to --session-dir", on_disk);
  metric("evictions_total", "counter", "Sessions evicted (least recently used)", c.evictions);
  metric("restores_total", "counter", "Sessions restored from --session-dir", c.restores);
  metric("session_files_rejected_total", "counter", "Corrupt or truncated session files skipped",
         c.session_files_rejected);
  metric("requests_cancelled_total", "counter", "Streams whose client went away", c.cancelled);
  metric("requests_rejected_memory_total", "counter", "Requests refused with 503 (KV budget)",
         c.rejected_memory);
  std::lock_guard batch_lock(batch_mu_);
  metric("decode_batches_total", "counter", "Batched decode forward passes", decode_batches_);
  metric("decode_batch_rows_total", "counter",
         "Tokens decoded in batched forward passes (over decode_batches_total: the mean batch)",
         decode_batch_rows_);
  return o.str();
}

}  // namespace primekv::server
