// The C API's handles and its error plumbing: every entry point runs its body through Guard,
// which turns a Status or an exception into a pk_status and this thread's message.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "primekv.h"
#include "primekv/model/model.h"
#include "primekv/press/compressor.h"
#include "primekv/session/conversation.h"
#include "primekv/util/status.h"
#include "primekv/util/thread_pool.h"

// Reference-counted: the caller's pk_model_free drops one reference and every session holds
// one, so a session can outlive the caller's handle without reaching a freed model.
struct pk_model {
  primekv::Model model;  // loaded for the trained context
  // Phi-3 LongRoPE: the same file with the other factor set, for sessions whose ctx_size
  // chooses it (UsesLongRopeFactors), since the factors are fixed when a Model is loaded; null
  // for other models. The weights are mapped, so the two share their pages.
  std::unique_ptr<primekv::Model> other_rope;
  std::string arch;
  std::atomic<int> refs{1};
};

namespace primekv::capi {
// Drops one reference to `model`, deleting it with the last.
void Release(pk_model* model);
struct ReleaseModel {
  void operator()(pk_model* m) const { Release(m); }
};
// A session's reference to its model; declared first in pk_session, so it is released last,
// after every member that reads the model.
using ModelRef = std::unique_ptr<pk_model, ReleaseModel>;
// A new reference to `model`.
ModelRef Retain(pk_model* model);
// The model a session of `ctx_size` positions runs: `model`'s own, or its other LongRoPE factors.
const Model& ModelForContext(const pk_model& model, int ctx_size);
}  // namespace primekv::capi

// A conversation handle: the engine's Conversation (which owns the cache, tokens, turns and
// schedule) with the compressor and thread pool it runs on. The handle is never moved, so the
// Conversation's references into it stay valid.
struct pk_session {
  primekv::capi::ModelRef owner;
  int ctx_size = 0;
  std::unique_ptr<primekv::Compressor> compressor;
  std::unique_ptr<primekv::ThreadPool> pool;
  std::unique_ptr<primekv::Conversation> conv;
  bool has_logits = false;  // a token was fed since the session was made or loaded
  pk_timings timings{};
  // Set while a call runs on the session: a second concurrent call is refused, never let
  // into a cache the first one is writing.
  mutable std::atomic<bool> busy{false};
};

namespace primekv::capi {

// Records `message` as this thread's last error and returns `code`.
pk_status Fail(pk_status code, std::string message);

// Runs `body` (returning pk_status), mapping exceptions to PK_ERR_INTERNAL with a message.
template <typename F>
pk_status Guard(const char* where, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(PK_ERR_INTERNAL, std::string(where) + ": out of memory");
  } catch (const std::exception& e) {
    return Fail(PK_ERR_INTERNAL, std::string(where) + ": " + e.what());
  } catch (...) {
    return Fail(PK_ERR_INTERNAL, std::string(where) + ": unknown error");
  }
}

// Holds a session for one call. A call that finds the session held by another thread fails at
// once with PK_ERR_STATE (the header's one-thread-at-a-time rule, enforced).
class SessionUse {
 public:
  explicit SessionUse(const pk_session* s)
      : s_(s), held_(s != nullptr && !s->busy.exchange(true, std::memory_order_acquire)) {}
  ~SessionUse() {
    if (held_) s_->busy.store(false, std::memory_order_release);
  }
  SessionUse(const SessionUse&) = delete;
  SessionUse& operator=(const SessionUse&) = delete;
  // PK_OK when held; otherwise the error for a NULL or busy session.
  pk_status Check(const char* where) const;

 private:
  const pk_session* s_;
  bool held_;
};

// A Status as a pk_status (`code` when it is an error), prefixed by the function's name.
pk_status FromStatus(const char* where, const Status& s, pk_status code = PK_ERR_ARGUMENT);

#define PK_REQUIRE(cond, where, what)                                                    \
  do {                                                                                   \
    if (!(cond))                                                                         \
      return ::primekv::capi::Fail(PK_ERR_ARGUMENT, std::string(where) + ": " + (what)); \
  } while (0)

}  // namespace primekv::capi
