// DIR/config.json of `primekv eval`: every setting that changes the rows of results.jsonl, so a
// resumed run is refused when it would mix rows made under other settings.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "primekv/util/status.h"

namespace primekv::eval_internal {

// A 64-bit content hash of a file, cheap for multi-gigabyte models. Files up to kFullHashBytes
// are hashed whole; larger ones by their size, first 16 MiB (the GGUF header, metadata and
// tensor table), last 1 MiB and 256 blocks of 64 KiB spread evenly between.
inline constexpr uint64_t kFullHashBytes = uint64_t{256} << 20;
struct FileFingerprint {
  uint64_t size = 0;
  std::string hash;    // 16 hex digits
  std::string scheme;  // "mix64-full" or "mix64-sampled"
};
Result<FileFingerprint> FingerprintFile(const std::filesystem::path& path);

// The mixing hash itself (exposed for tests): same bytes, same value, on every platform.
class Mix64 {
 public:
  void Update(const void* data, size_t n);
  uint64_t Digest() const;

 private:
  uint64_t lanes_[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull,
                        0x082EFA98EC4E6C89ull};
  uint64_t total_ = 0;
  unsigned char tail_[32] = {};
  size_t tail_len_ = 0;
  void Block(const unsigned char* p);
};

// DIR/config.json is read whole; a real one is a few KiB.
inline constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;

// Parses a recorded configuration and checks the types of every field CheckRunConfig and the
// report read ("model" an object with string "path", "hash" and "scheme" and an integer or null
// "size"; "settings" an object; "tasks" and "presses" objects, presses mapping to strings). The
// error names `name` (the file) and the field: "DIR/config.json: model: expected an object, got
// an integer".
Result<nlohmann::json> ParseRunConfig(std::string_view text, const std::string& name);
// ParseRunConfig of the file at `path` (a regular file of at most kMaxConfigBytes).
Result<nlohmann::json> ReadRunConfig(const std::filesystem::path& path);

// Compares the recorded configuration with this run's: every setting must be equal, except that
// "tasks" may gain new entries (a task already recorded must have the same fingerprint) and so
// may "presses" (press name as in the rows -> its resolved text, Press::resolved): a press
// already recorded must resolve to the same text, or a changed default would mix rows of two
// methods under one name. A press of this run that has rows (`row_presses`: the press names
// of results.jsonl) but no record, as in a folder from before presses were recorded, is
// refused too: its rows may come from another default. "none" is exempt (it has no
// parameters). The error names the first differing setting or press with both values.
Status CheckRunConfig(const nlohmann::json& recorded, const nlohmann::json& current,
                      const std::filesystem::path& dir, const std::set<std::string>& row_presses);
// The recorded configuration with this run's new tasks and presses added.
nlohmann::json MergeRunConfig(const nlohmann::json& recorded, const nlohmann::json& current);

}  // namespace primekv::eval_internal
