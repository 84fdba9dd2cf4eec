// The C API's handles and its error plumbing: every entry point runs its body through Guard,
// which turns a Status or an exception into a pk_status and this thread's message.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "primekv.h"
#include "primekv/model/model.h"
#include "primekv/press/compressor.h"
#include "primekv/session/session.h"
#include "primekv/util/status.h"
#include "primekv/util/thread_pool.h"

struct pk_model {
  primekv::Model model;
  std::string arch;
};

// A conversation: the engine's Session over a cache, capture and compressor of its own. The
// handle is never moved, so the Session's references into it stay valid.
struct pk_session {
  pk_model* owner = nullptr;
  std::string press;
  primekv::Schedule schedule;  // the ratio and mode the session was made with
  int ctx_size = 0;
  std::unique_ptr<primekv::Compressor> compressor;
  std::unique_ptr<primekv::ThreadPool> pool;
  std::unique_ptr<primekv::KvCache> cache;
  std::unique_ptr<primekv::PressCapture> capture;
  std::unique_ptr<primekv::Session> session;
  std::vector<primekv::Token> tokens;  // every token in the cache's positions, in order
  int last_prompt_len = 0;             // tokens before the last generation
  // A loaded server session's owner and isolation salt, written back unchanged by a save.
  std::string tenant, cache_salt;
  uint64_t turn = 0;        // completed turns (end_turn calls, and those of a loaded session)
  bool has_logits = false;  // a token was fed since the session was made or loaded
  pk_timings timings{};
  int extra_compressions = 0;  // pk_session_compress calls, which bypass the Session's count
  double extra_score_ms = 0;
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

// A Status as a pk_status (`code` when it is an error), prefixed by the function's name.
pk_status FromStatus(const char* where, const Status& s, pk_status code = PK_ERR_ARGUMENT);

#define PK_REQUIRE(cond, where, what)                                                    \
  do {                                                                                   \
    if (!(cond))                                                                         \
      return ::primekv::capi::Fail(PK_ERR_ARGUMENT, std::string(where) + ": " + (what)); \
  } while (0)

}  // namespace primekv::capi
