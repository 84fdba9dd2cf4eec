// Session files (`<id>.pkvs`): a conversation's record (session/conversation.h), its tokens and its
// (compressed) KV cache, as `primekv serve --session-dir` and the C API's pk_session_save /
// pk_session_load write and restore them, so each continues what the other wrote. The same
// bytes are the Redis store's values. Format: docs/server.md.
#pragma once

#include <string>
#include <string_view>

#include "primekv/model/model.h"
#include "primekv/session/conversation.h"
#include "primekv/util/status.h"

namespace primekv {

// Session ids are tokens of [A-Za-z0-9_-], 1..64 chars: no request reaches a path otherwise.
bool ValidSessionId(const std::string& id);

// The bytes of a session file; the record needs an id and a cache.
Result<std::string> SerializeSession(const ConversationRecord& s);
// Writes `dir/<id>.pkvs` atomically (temp file, fsync, rename).
Status WriteSessionFile(const std::string& dir, const ConversationRecord& s);
// Reads and verifies (magic, version, checksum, bounds, shape against the model).
// With header_only the cache is skipped (checksum still verified).
Result<ConversationRecord> ReadSessionFile(const std::string& path, const Model& model,
                                           const KvCacheOptions& kv, bool header_only);
// Verifies and reads the bytes of a session file (a Redis value).
Result<ConversationRecord> ParseSessionImage(std::string_view image, const Model& model,
                                             const KvCacheOptions& kv);

}  // namespace primekv
