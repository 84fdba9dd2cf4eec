// Session files (`<id>.pkvs`): a conversation's record (session/conversation.h), its tokens and its
// (compressed) KV cache, as `primekv serve --session-dir` and the C API's pk_session_save /
// pk_session_load write and restore them, so each continues what the other wrote. The same
// bytes are the Redis store's values. Format: docs/server.md.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/session/record.h"
#include "primekv/util/status.h"

namespace primekv {

// Session ids are tokens of [A-Za-z0-9_-], 1..64 chars: no request reaches a path otherwise.
bool ValidSessionId(const std::string& id);

// How much of a stored image a read took: its base and the complete deltas after it. A torn
// tail (a write cut short) is left out, and the next append overwrites it.
struct ImageExtent {
  uint64_t bytes = 0;       // base and complete deltas
  uint64_t base_bytes = 0;  // the base (a whole image) alone
  uint64_t last_sum = 0;    // the checksum of the last complete record: the next delta names it
  int deltas = 0;           // deltas applied
  uint64_t torn_bytes = 0;  // bytes after the last complete record, ignored
  KvDType stored = KvDType::kF32;  // the rows' type in the image
  bool appendable = false;         // its base's version takes deltas after it
};

// What a store holds of a conversation after a save or a load, so that the next turn writes
// only what changed: a delta appended to the image, not the whole image again.
struct StoredImage {
  std::string where;          // the directory holding <id>.pkvs, or a store's name
  uint64_t turn = 0;          // the stored record's turn
  std::vector<Token> tokens;  // the stored record's tokens
  // Tokens below this, and the entries at their positions, are unchanged since: a truncation
  // lowers it (a position at or above it may now hold an entry computed again).
  size_t stable = 0;
  std::vector<std::vector<int32_t>> positions;  // per (layer, KV head): the stored entries
  KvDType dtype = KvDType::kF32;
  ImageExtent extent;
};

// `s` (with its cache) as what a store holding `extent` of its image has.
StoredImage DescribeStored(const ConversationRecord& s, std::string where,
                           const ImageExtent& extent);

// The bytes of a session file (a base, with no delta); the record needs an id and a cache.
Result<std::string> SerializeSession(const ConversationRecord& s);
// A delta: what turns `stored` into `s` (the entries compression removed, the entries and tokens
// added, the record's fields), with its own checksum and the checksum of the record it follows.
// An error when `s` does not continue `stored` (another id, type or shape, or an entry below
// the stable positions that the stored image lacks): write the whole image then.
Result<std::string> SerializeSessionDelta(const ConversationRecord& s, const StoredImage& stored);
// The checksum a record (base or delta) ends with.
uint64_t RecordChecksum(std::string_view record);

// Writes `dir/<id>.pkvs` atomically (temp file, fsync, rename).
Status WriteSessionFile(const std::string& dir, const ConversationRecord& s);
Status WriteSessionImage(const std::string& dir, const std::string& id, std::string_view image);
// Appends a delta to `dir/<id>.pkvs` when the file still ends where `stored` says (its length
// and last checksum; a torn tail after that is cut), then fsyncs. An error leaves the last
// complete turn loadable; the caller then writes the whole image.
Status AppendSessionDelta(const std::string& dir, const std::string& id, std::string_view delta,
                          const StoredImage& stored);

// Reads and verifies (magic, version, checksums, bounds, shape against the model), applying
// the deltas after the base up to the last complete one. With header_only the cache is skipped
// (checksums still verified).
Result<ConversationRecord> ReadSessionFile(const std::string& path, const Model& model,
                                           const KvCacheOptions& kv, bool header_only,
                                           ImageExtent* extent = nullptr);
// Verifies and reads the bytes of a session image (a Redis value: base and deltas).
Result<ConversationRecord> ParseSessionImage(std::string_view image, const Model& model,
                                             const KvCacheOptions& kv,
                                             ImageExtent* extent = nullptr);

}  // namespace primekv
