// Session files (`<id>.pkvs`): a conversation's tokens, its compression settings and its
// (compressed) KV cache, as `primekv serve --session-dir` writes and restores them. Public so
// that programs using the engine (the C API's pk_session_save / pk_session_load) write files a
// server continues, and read the files a server wrote. Format: docs/server.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "primekv/kv/kv_cache.h"
#include "primekv/model/model.h"
#include "primekv/util/status.h"

namespace primekv::server {

// What a session file holds: the conversation's tokens and its (compressed) cache.
struct SessionSnapshot {
  std::string id;
  std::string tenant;      // the API key's tenant id (TenantId), empty without keys
  std::string cache_salt;  // the requests' isolation field: prefix matching stays inside it
  std::string press;
  double ratio = 0;
  std::string mode;
  int budget = 0;           // entries per head kept after each turn (multiturn), 0 = none yet
  int last_prompt_len = 0;  // tokens before the last answer: a request must contain them
  uint64_t turn = 0;        // completed turns: a shared store keeps only the newest
  std::vector<Token> tokens;
  std::optional<KvCache> cache;  // filled by ReadSessionFile
};

// Session ids are tokens of [A-Za-z0-9_-], 1..64 chars: no request reaches a path otherwise.
bool ValidSessionId(const std::string& id);

// Writes `dir/<id>.pkvs` atomically (temp file, fsync, rename).
Status WriteSessionFile(const std::string& dir, const SessionSnapshot& s, const KvCache& c);
// Reads and verifies (magic, version, checksum, bounds, shape against the model).
// With header_only the cache is skipped (checksum still verified).
Result<SessionSnapshot> ReadSessionFile(const std::string& path, const Model& model,
                                        const KvCacheOptions& kv, bool header_only);

}  // namespace primekv::server
