// The engine of `primekv serve`: loading, press checks, and a request's way in (a slot, its
// session, its memory) and out.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "server/request.h"
#include "server/server_internal.h"
#include "server/session_backend.h"

namespace primekv::server {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

size_t CommonPrefix(const std::vector<Token>& a, const std::vector<Token>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

namespace {

// Whether a session file can be created in `dir` (permissions, a read-only or full file
// system): the server would otherwise answer every turn and save none.
Status ProbeWritable(const std::string& dir) {
  std::string probe = dir + "/.primekv-probe-XXXXXX";
  const int fd = mkstemp(probe.data());
  const auto fail = [&](int err) {
    return Status::Error("--session-dir '" + dir + "' is not writable: " + std::strerror(err));
  };
  if (fd < 0) return fail(errno);
  const char byte = 0;
  const bool ok = write(fd, &byte, 1) == 1 && fsync(fd) == 0;
  const int err = errno;
  close(fd);
  unlink(probe.c_str());
  return ok ? Status::Ok() : fail(err);
}

}  // namespace

Engine::Engine(const ServerOptions& options) : options_(options) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::Create(const ServerOptions& options) {
  if (Status s = ValidateServerOptions(options); !s.ok()) return s;
  std::unique_ptr<Engine> e(new Engine(options));
  auto model = Model::Load(options.model_path, options.weight_memory);
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
  if (auto err = e->CheckPress(options.press, options.ratio, "--press")) {
    return Status::Error(err->message);
  }
  if (!options.session_store.empty()) {
    auto address = ParseRedisUrl(options.session_store);
    if (!address.ok()) return Status::Error("--session-store " + address.message());
    e->backend_ = MakeRedisBackend(*address, options.store_ttl_s, options.store_max_bytes,
                                   *e->model_, e->kv_);
    // A store that cannot be reached at start is refused: no turn could be saved. Replicas
    // started beside it (deploy/cluster.sh) get kStoreWaitS for it to come up.
    constexpr int kStoreWaitS = 10;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(kStoreWaitS);
    for (;;) {
      auto probe = e->backend_->StoredTurn("", "probe");
      if (probe.ok()) break;
      if (std::chrono::steady_clock::now() >= give_up)
        return Status::Error("cannot reach --session-store " + options.session_store + " (" +
                             probe.message() + ") within " + std::to_string(kStoreWaitS) + " s");
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  } else if (!options.session_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.session_dir, ec);
    if (ec) return Status::Error("cannot create --session-dir '" + options.session_dir + "'");
    if (Status s = ProbeWritable(options.session_dir); !s.ok()) return s;
    e->backend_ = MakeDirBackend(options.session_dir, *e->model_, e->kv_);
    e->IndexSessionDir();
  }
  return e;
}

std::optional<HttpError> Engine::CheckPress(const std::string& press, double ratio,
                                            const std::string& param) const {
  return CheckServedPress(press, ratio, param);
}

RequestContext Engine::request_context() const {
  return {.options = options_,
          .tokenizer = model_->tokenizer(),
          .chat_format = chat_format_,
          .ctx_size = ctx_size_,
          .vocab_size = model_->config().vocab_size};
}

const Compressor& Engine::CompressorFor(const std::string& press) {
  auto& c = compressors_[press];
  if (!c) {
    // CheckPress ran on every press that reaches here.
    c = std::make_unique<Compressor>(*model_, std::move(MakePress(*ParsePressSpec(press))).value());
  }
  return *c;
}

HttpError BusySession(const std::string& id) {
  return HttpError{409, "session '" + id + "' is answering another request", "session"};
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
                     req.max_tokens_param + " " + std::to_string(req.max_tokens) + " exceeds the " +
                         std::to_string(ctx_size_ - n_prompt) + " tokens left in the context",
                     req.max_tokens_param, "context_length_exceeded"};
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

std::variant<std::unique_ptr<Turn>, HttpError> Engine::Begin(TurnRequest req) {
  if (auto err = CheckFits(req)) return *err;
  // A named session that answers (or waits to answer) another request is refused before this
  // one waits for a slot: queued behind it, it would run next and cut that turn out.
  bool claimed = false;
  if (!req.session_id.empty()) {
    std::lock_guard lock(store_mu_);
    auto it = sessions_.find(req.session_id);
    if (it != sessions_.end() && it->second->tenant == req.tenant) {
      if (it->second->busy || it->second->claimed) return BusySession(req.session_id);
      it->second->claimed = true;
      claimed = true;
    }
  }
  TakeSlot();  // waits while --slots requests are running
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(options_.memory_wait_s);
  for (;;) {
    Found found;
    {
      std::lock_guard lock(store_mu_);
      if (claimed) {  // (the session may have been forgotten meanwhile: looked up again)
        if (auto it = sessions_.find(req.session_id); it != sessions_.end())
          it->second->claimed = false;
        claimed = false;
      }
      auto f = FindSessionLocked(req);
      if (auto* err = std::get_if<HttpError>(&f)) {
        GiveSlot();
        return *err;
      }
      found = std::get<Found>(f);
      ++beginning_;
    }
    Session* s = found.session;
    // A named session is continued as far as its (possibly reloaded) tokens match the prompt.
    if (!req.session_id.empty()) {
      DropIfBehind(*s);
      found.keep = req.prompt.size();
    }
    // The prompt's last token is always run again, so its logits start the answer.
    size_t keep = std::min(found.keep, req.prompt.size() - 1);
    if (found.source) CopyPrefix(*s, *found.source, req.prompt, keep);
    bool restored = false;
    if (auto err = RestoreIfEvicted(*s, restored)) {
      {
        std::lock_guard lock(store_mu_);
        --beginning_;
      }
      store_cv_.notify_all();
      GiveSlot();
      return *err;
    }
    keep = std::min(keep, CommonPrefix(s->tokens, req.prompt));
    // Memory: what this turn may add (prefill + answer + page slack), then make room.
    // (Exact for the pool's page and chunk sizes: the decode loop calls Reserve the same way.)
    const size_t new_tokens = req.prompt.size() - keep + static_cast<size_t>(req.max_tokens) + 1;
    const size_t reserve = s->cache->BytesAllocatedAfterReserve(static_cast<int>(new_tokens)) -
                           s->cache->BytesAllocated();
    // How it can give way (ReserveMemory): a new session can be made again, a stored one's
    // file holds all its cache does.
    const GiveWay give_way = req.session_id.empty() ? GiveWay::kForget
                             : s->persisted         ? GiveWay::kDropCache
                                                    : GiveWay::kNo;
    auto reserved = ReserveMemory(*s, reserve, restored, give_way, deadline);
    if (std::holds_alternative<Retry>(reserved)) continue;
    if (auto* err = std::get_if<HttpError>(&reserved)) {
      GiveSlot();
      return *err;
    }
    return std::make_unique<Turn>(this, s, reserve, std::move(req), static_cast<int>(keep));
  }
}

void Engine::Finish(Session* s, size_t reserved, bool ok, bool modified) {
  {
    std::lock_guard lock(store_mu_);
    bytes_used_ -= reserved;
    s->reserved = 0;
    const size_t now = s->cache ? s->cache->BytesAllocated() : 0;
    bytes_used_ = bytes_used_ - s->bytes + now;
    s->bytes = now;
    s->busy = false;
    s->last_used = ++clock_;
    if (s->load && s->cache) {
      // The shared store refused this turn (another replica wrote a newer one): the next
      // turn reads that one.
      DropCacheLocked(*s);
    }
    if (!ok && modified && s->persisted) {
      // A failed turn leaves the cache suspect: fall back to the last completed turn's file.
      DropCacheLocked(*s);
    } else if (!ok && (modified || s->tokens.empty())) {
      ForgetLocked(*s);
    }
    --running_turns_;
    ++turns_finished_;
  }
  store_cv_.notify_all();
  std::lock_guard lock(slot_mu_);
  ++slots_free_;
  slot_cv_.notify_one();
}

}  // namespace primekv::server
