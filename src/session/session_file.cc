// Session files: a base record, "PKVSESS1" magic, u32 version, u64 payload size, payload, u64
// FNV-1a of the payload; then (version 3) delta records, "PKVDELT1", u64 size, payload, u64
// FNV-1a, one per saved turn, until the file is rewritten whole. Base payload: u32 header length
// + JSON header, i32 tokens, then per (layer, KV head): u32 length, i32 positions, keys, values.
// Delta payload: u32 header length + JSON header (the record's fields, the tokens kept from
// before and the checksum of the record it follows), i32 tokens added, then per (layer, KV
// head): u32 count + u32 rows removed, u32 count + i32 positions, keys, values of the entries
// added. Rows are stored as the cache holds them ("kv_dtype": f32, f16, or q8_0 blocks); version
// 1 (still read) stored f32 rows whatever the cache's type, version 2 had no deltas.
#include "primekv/session/session_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "primekv/util/json_read.h"

namespace primekv {

namespace {

constexpr char kMagic[8] = {'P', 'K', 'V', 'S', 'E', 'S', 'S', '1'};
constexpr char kDeltaMagic[8] = {'P', 'K', 'V', 'D', 'E', 'L', 'T', '1'};
constexpr uint32_t kVersion = 3;
constexpr uint32_t kVersionNoDeltas = 2;
constexpr uint32_t kVersionF32Rows = 1;
constexpr uint64_t kMaxPayload = uint64_t{1} << 34;  // 16 GiB: rejects absurd sizes early

uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// 32 random bits in hex: a temporary file's name nobody can guess in advance.
Result<std::string> Nonce() {
  uint32_t bits = 0;
  while (::getrandom(&bits, sizeof(bits), 0) != static_cast<ssize_t>(sizeof(bits))) {
    if (errno != EINTR)
      return Status::Error(std::string("no random bytes: ") + std::strerror(errno));
  }
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", bits);
  return std::string(text);
}

template <typename T>
void Put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
void PutSpan(std::string& out, const std::vector<T>& v) {
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Bounded reader over the payload.
struct Reader {
  const uint8_t* p;
  size_t n;
  size_t at = 0;
  template <typename T>
  bool Get(T* v) {
    if (n - at < sizeof(T)) return false;
    std::memcpy(v, p + at, sizeof(T));
    at += sizeof(T);
    return true;
  }
  template <typename T>
  bool GetVec(size_t count, std::vector<T>* v) {
    if (count > (n - at) / sizeof(T)) return false;
    v->resize(count);
    if (count > 0) std::memcpy(v->data(), p + at, count * sizeof(T));  // (data() may be null)
    at += count * sizeof(T);
    return true;
  }
};

}  // namespace

bool ValidSessionId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

namespace {

// The record's fields both kinds of record carry.
nlohmann::json RecordHeader(const ConversationRecord& s) {
  const KvCache& c = *s.cache;
  return {{"id", s.id},
          {"tenant", s.tenant},
          {"cache_salt", s.cache_salt},
          {"press", s.press},
          {"ratio", s.schedule.ratio},
          {"mode", ScheduleModeName(s.schedule.mode)},
          {"budget", s.budget},
          {"last_prompt_len", s.last_prompt_len},
          {"turn", s.turn},
          {"n_tokens", s.tokens.size()},
          {"kv_dtype", KvDTypeName(c.dtype())},
          {"next_position", c.NextPosition()}};
}

// magic, (version,) payload size, payload, checksum.
std::string Frame(const char (&magic)[8], const uint32_t* version, const std::string& payload) {
  std::string out(magic, sizeof(magic));
  if (version != nullptr) Put(out, *version);
  Put(out, static_cast<uint64_t>(payload.size()));
  out += payload;
  Put(out, Fnv1a(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
  return out;
}

Status CheckSerializable(const ConversationRecord& s) {
  if (!ValidSessionId(s.id)) return Status::Error("invalid session id");
  if (!s.cache) return Status::Error("session " + s.id + " holds no cache");
  return Status::Ok();
}

size_t CommonPrefixLength(const std::vector<Token>& a, const std::vector<Token>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// One head's part of a delta: the stored rows gone (every one at or above `stable`, and those
// compression removed), then the entries added after the kept ones.
Status PutHeadDelta(const KvCache& c, int l, int kh, const std::vector<int32_t>& old, size_t stable,
                    std::string& payload) {
  std::vector<int32_t> now;
  c.ReadPositions(l, kh, &now);
  std::vector<uint32_t> removed;
  size_t i = 0, j = 0;
  for (; j < now.size() && static_cast<size_t>(now[j]) < stable; ++j) {
    while (i < old.size() && old[i] < now[j]) removed.push_back(static_cast<uint32_t>(i++));
    if (i == old.size() || old[i] != now[j])
      return Status::Error("an entry at position " + std::to_string(now[j]) +
                           " is not in the stored image");
    ++i;
  }
  while (i < old.size()) removed.push_back(static_cast<uint32_t>(i++));
  Put(payload, static_cast<uint32_t>(removed.size()));
  PutSpan(payload, removed);
  std::vector<uint8_t> keys, values;
  std::vector<int32_t> pos;
  c.ReadRowsRaw(l, kh, static_cast<int>(j), static_cast<int>(now.size() - j), &keys, &values, &pos);
  Put(payload, static_cast<uint32_t>(pos.size()));
  PutSpan(payload, pos);
  PutSpan(payload, keys);
  PutSpan(payload, values);
  return Status::Ok();
}

}  // namespace

Result<std::string> SerializeSession(const ConversationRecord& s) {
  PRIMEKV_RETURN_IF_ERROR(CheckSerializable(s));
  const KvCache& c = *s.cache;
  nlohmann::json h = RecordHeader(s);
  h["n_layers"] = c.n_layers();
  h["n_kv_heads"] = c.n_kv_heads();
  h["head_dim"] = c.head_dim();
  const std::string header = h.dump();
  std::string payload;
  Put(payload, static_cast<uint32_t>(header.size()));
  payload += header;
  PutSpan(payload, s.tokens);
  std::vector<uint8_t> keys, values;
  std::vector<int32_t> pos;
  for (int l = 0; l < c.n_layers(); ++l) {
    for (int kh = 0; kh < c.n_kv_heads(); ++kh) {
      c.ReadHeadRaw(l, kh, &keys, &values, &pos);
      Put(payload, static_cast<uint32_t>(pos.size()));
      PutSpan(payload, pos);
      PutSpan(payload, keys);
      PutSpan(payload, values);
    }
  }
  return Frame(kMagic, &kVersion, payload);
}

Result<std::string> SerializeSessionDelta(const ConversationRecord& s, const StoredImage& stored) {
  PRIMEKV_RETURN_IF_ERROR(CheckSerializable(s));
  const KvCache& c = *s.cache;
  const size_t heads = static_cast<size_t>(c.n_layers()) * c.n_kv_heads();
  if (c.dtype() != stored.dtype || stored.positions.size() != heads)
    return Status::Error("the stored image has another type or shape");
  const size_t stable = std::min(stored.stable, CommonPrefixLength(stored.tokens, s.tokens));
  nlohmann::json h = RecordHeader(s);
  h["stable_tokens"] = stable;
  h["after"] = stored.extent.last_sum;
  const std::string header = h.dump();
  std::string payload;
  Put(payload, static_cast<uint32_t>(header.size()));
  payload += header;
  payload.append(reinterpret_cast<const char*>(s.tokens.data() + stable),
                 (s.tokens.size() - stable) * sizeof(Token));
  for (int l = 0; l < c.n_layers(); ++l) {
    for (int kh = 0; kh < c.n_kv_heads(); ++kh) {
      const auto& old = stored.positions[static_cast<size_t>(l) * c.n_kv_heads() + kh];
      PRIMEKV_RETURN_IF_ERROR(PutHeadDelta(c, l, kh, old, stable, payload));
    }
  }
  return Frame(kDeltaMagic, nullptr, payload);
}

uint64_t RecordChecksum(std::string_view record) {
  uint64_t sum = 0;
  if (record.size() >= 8) std::memcpy(&sum, record.data() + record.size() - 8, 8);
  return sum;
}

StoredImage DescribeStored(const ConversationRecord& s, std::string where,
                           const ImageExtent& extent) {
  StoredImage out;
  out.where = std::move(where);
  out.turn = s.turn;
  out.tokens = s.tokens;
  out.stable = s.tokens.size();
  out.extent = extent;
  if (s.cache) {
    const KvCache& c = *s.cache;
    out.dtype = c.dtype();
    out.positions.resize(static_cast<size_t>(c.n_layers()) * c.n_kv_heads());
    for (int l = 0; l < c.n_layers(); ++l) {
      for (int kh = 0; kh < c.n_kv_heads(); ++kh)
        c.ReadPositions(l, kh, &out.positions[static_cast<size_t>(l) * c.n_kv_heads() + kh]);
    }
  }
  return out;
}

namespace {

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Writes all of `bytes` at `offset` (pwrite) or at the end (write).
bool WriteAll(int fd, std::string_view bytes, off_t offset, bool positioned) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = positioned ? ::pwrite(fd, bytes.data() + done, bytes.size() - done,
                                            offset + static_cast<off_t>(done))
                                 : ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

Status WriteSessionImage(const std::string& dir, const std::string& id, std::string_view image) {
  if (!ValidSessionId(id)) return Status::Error("invalid session id");
  const std::string final_path = dir + "/" + id + ".pkvs";
  // A new name, created exclusively and never through a link: whatever sits in the directory
  // under a guessable name (a link to another file, a FIFO) is neither written nor waited on.
  auto nonce = Nonce();
  if (!nonce.ok()) return nonce.status();
  const std::string tmp = final_path + "." + *nonce + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error("cannot write '" + tmp + "': " + std::strerror(errno));
  if (!WriteAll(fd, image, 0, false)) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::Error("cannot write '" + tmp + "': " + why);
  }
  // fsync before rename: after a crash the file is either the old one or the complete new one.
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return Status::Error("cannot sync '" + tmp + "'");
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return Status::Error("cannot rename '" + tmp + "': " + std::strerror(errno));
  }
  return Status::Ok();
}

Status WriteSessionFile(const std::string& dir, const ConversationRecord& s) {
  auto bytes = SerializeSession(s);
  if (!bytes.ok()) return bytes.status();
  return WriteSessionImage(dir, s.id, *bytes);
}

Status AppendSessionDelta(const std::string& dir, const std::string& id, std::string_view delta,
                          const StoredImage& stored) {
  if (!ValidSessionId(id)) return Status::Error("invalid session id");
  const std::string path = dir + "/" + id + ".pkvs";
  Fd f{::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) return Status::Error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  const uint64_t end = stored.extent.bytes;
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode) || end < 28 ||
      static_cast<uint64_t>(st.st_size) < end)
    return Status::Error("'" + path + "' is not the image this conversation stored");
  // The file must still end with the record the delta follows (another writer replaces the
  // file by a rename, never in place).
  uint64_t sum = 0;
  if (::pread(f.fd, &sum, 8, static_cast<off_t>(end - 8)) != 8 || sum != stored.extent.last_sum)
    return Status::Error("'" + path + "' is not the image this conversation stored");
  // A tail after the last complete record is a write cut short: the delta replaces it.
  if (static_cast<uint64_t>(st.st_size) > end && ::ftruncate(f.fd, static_cast<off_t>(end)) != 0)
    return Status::Error("cannot truncate '" + path + "': " + std::strerror(errno));
  if (!WriteAll(f.fd, delta, static_cast<off_t>(end), true) || ::fsync(f.fd) != 0)
    return Status::Error("cannot append to '" + path + "': " + std::strerror(errno));
  return Status::Ok();
}

namespace {

// Reads exactly n bytes (false at end of file or on an error).
bool ReadFully(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

struct Verified {
  std::string_view payload;
  uint32_t version = 0;
  uint64_t end = 0;  // the base record's length
  uint64_t sum = 0;
};

// The payload of a session image's base (magic, version, size and checksum verified), or why
// not. Only version 3 may have deltas after it.
Result<Verified> VerifyImage(std::string_view image) {
  if (image.size() < 20 || std::memcmp(image.data(), kMagic, 8) != 0)
    return Status::Error("bad magic");
  uint32_t version = 0;
  uint64_t size = 0;
  std::memcpy(&version, image.data() + 8, 4);
  std::memcpy(&size, image.data() + 12, 8);
  if (version != kVersion && version != kVersionNoDeltas && version != kVersionF32Rows)
    return Status::Error("unsupported version " + std::to_string(version) + " (this build reads " +
                         std::to_string(kVersionF32Rows) + " to " + std::to_string(kVersion) + ")");
  if (size > kMaxPayload) return Status::Error("bad payload size");
  const uint64_t end = 20 + size + 8;
  if (image.size() < end || (version != kVersion && image.size() != end))
    return Status::Error("truncated or oversized");
  const std::string_view payload = image.substr(20, size);
  uint64_t sum = 0;
  std::memcpy(&sum, image.data() + 20 + size, 8);
  if (Fnv1a(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()) != sum)
    return Status::Error("checksum mismatch");
  return Verified{payload, version, end, sum};
}

// The row type a header names (version 2's "kv_dtype").
Result<KvDType> ParseStoredType(const std::string& name, int head_dim) {
  for (KvDType t : {KvDType::kF32, KvDType::kF16, KvDType::kQ8_0}) {
    if (name != KvDTypeName(t)) continue;
    PRIMEKV_RETURN_IF_ERROR(CheckKvDType(t, head_dim));
    return t;
  }
  return Status::Error("unknown kv_dtype '" + name + "'");
}

// The bytes of a session file. Only a regular file is read: the open neither follows a link nor
// waits on a FIFO.
Result<std::string> ReadImage(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) return Status::Error(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) return Status::Error("not a regular file");
  const int flags = ::fcntl(f.fd, F_GETFL);
  if (flags < 0 || ::fcntl(f.fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    return Status::Error("cannot read");
  // The size is checked before anything is allocated for it.
  // (Deltas stay below their base's size: the file is then written whole again.)
  if (st.st_size < 20 || static_cast<uint64_t>(st.st_size) > 2 * (28 + kMaxPayload))
    return Status::Error("truncated or oversized");
  std::string image(static_cast<size_t>(st.st_size), '\0');
  if (!ReadFully(f.fd, image.data(), image.size())) return Status::Error("truncated");
  return image;
}

// What a header says besides the record: the counts, and how the rows are stored.
struct Layout {
  size_t n_tokens = 0;
  int32_t next_position = 0;
  KvDType stored = KvDType::kF32;
};

// An integer header field within [lo, hi]. Never nlohmann's get<int>: converting a float such as
// 1e80 to an integer type is undefined behaviour.
Result<int64_t> IntField(const nlohmann::json& h, std::string_view key, int64_t lo, int64_t hi) {
  PRIMEKV_ASSIGN_OR_RETURN(const JsonNode node, JsonNode(h, "header").Field(key));
  return node.Integer(lo, hi);
}

// An unsigned 64-bit header field (a checksum or a counter); `fallback` when absent.
Result<uint64_t> U64Field(const nlohmann::json& h, std::string_view key,
                          std::optional<uint64_t> fallback = std::nullopt) {
  const auto it = h.find(key);
  if (it == h.end() && fallback) return *fallback;
  if (it == h.end()) return Status::Error("header." + std::string(key) + ": missing");
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer() && it->get<int64_t>() >= 0)
    return static_cast<uint64_t>(it->get<int64_t>());
  return Status::Error("header." + std::string(key) + ": expected an integer >= 0");
}

// The record's fields of a header (base or delta) into `s` and `layout`.
Status ReadRecordFields(const nlohmann::json& h, int head_dim, bool has_dtype,
                        ConversationRecord& s, Layout& layout) {
  s.id = h.at("id").get<std::string>();
  s.tenant = h.value("tenant", std::string());
  s.cache_salt = h.value("cache_salt", std::string());
  s.press = h.at("press").get<std::string>();
  s.schedule.ratio = h.at("ratio").get<double>();
  // A file of the C API's question mode, which ran as context.
  const auto mode = h.at("mode").get<std::string>();
  const auto parsed = ParseScheduleMode(mode);
  if (!parsed && mode != "question" && mode != "first-question")
    return Status::Error("unknown mode '" + mode + "'");
  s.schedule.mode = parsed.value_or(ScheduleMode::kContext);
  PRIMEKV_ASSIGN_OR_RETURN(s.budget, IntField(h, "budget", 0, INT32_MAX));
  PRIMEKV_ASSIGN_OR_RETURN(s.last_prompt_len, IntField(h, "last_prompt_len", 0, INT32_MAX));
  // Absent in files written before the turn counter.
  PRIMEKV_ASSIGN_OR_RETURN(s.turn, U64Field(h, "turn", uint64_t{0}));
  PRIMEKV_ASSIGN_OR_RETURN(layout.n_tokens, IntField(h, "n_tokens", 0, INT32_MAX));
  PRIMEKV_ASSIGN_OR_RETURN(layout.next_position, IntField(h, "next_position", 0, INT32_MAX));
  if (has_dtype) {
    auto stored = ParseStoredType(h.at("kv_dtype").get<std::string>(), head_dim);
    if (!stored.ok()) return stored.status();
    layout.stored = *stored;
  }
  return Status::Ok();
}

// A header's JSON text.
Result<nlohmann::json> ReadJsonHeader(Reader& r) {
  uint32_t hlen = 0;
  std::vector<char> htext;
  if (!r.Get(&hlen) || !r.GetVec(hlen, &htext)) return Status::Error("bad header");
  try {
    return nlohmann::json::parse(htext.begin(), htext.end());
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(std::string("bad header: ") + e.what());
  }
}

// The base's JSON header into `s` and `layout`.
Status ReadHeader(Reader& r, const ModelConfig& mc, uint32_t version, ConversationRecord& s,
                  Layout& layout) {
  auto h = ReadJsonHeader(r);
  if (!h.ok()) return h.status();
  try {
    PRIMEKV_RETURN_IF_ERROR(
        ReadRecordFields(*h, mc.head_dim, version != kVersionF32Rows, s, layout));
    PRIMEKV_ASSIGN_OR_RETURN(const int64_t layers, IntField(*h, "n_layers", 0, INT32_MAX));
    PRIMEKV_ASSIGN_OR_RETURN(const int64_t heads, IntField(*h, "n_kv_heads", 0, INT32_MAX));
    PRIMEKV_ASSIGN_OR_RETURN(const int64_t dim, IntField(*h, "head_dim", 0, INT32_MAX));
    if (layers != mc.n_layers || heads != mc.n_kv_heads || dim != mc.head_dim)
      return Status::Error("written for a model of another shape");
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(std::string("bad header: ") + e.what());
  }
  return Status::Ok();
}

// Tokens read from a file: the vocabulary's ids, as many as the positions.
Status CheckTokens(const ConversationRecord& s, const Layout& layout, const ModelConfig& mc) {
  if (s.last_prompt_len < 0 || static_cast<size_t>(s.last_prompt_len) > s.tokens.size() ||
      layout.next_position != static_cast<int32_t>(s.tokens.size()))
    return Status::Error("inconsistent token counts");
  for (Token t : s.tokens) {
    if (t < 0 || t >= mc.vocab_size) return Status::Error("token id out of range");
  }
  return Status::Ok();
}

// One head's part of a delta onto `cache`: the rows removed, then the entries added.
Status ApplyHeadDelta(Reader& r, int l, int kh, size_t stable, const Layout& layout,
                      KvCache& cache) {
  const int len = cache.Length(l, kh);
  uint32_t n_removed = 0;
  std::vector<uint32_t> removed;
  if (!r.Get(&n_removed) || n_removed > static_cast<uint32_t>(len) ||
      !r.GetVec(n_removed, &removed))
    return Status::Error("truncated delta");
  std::vector<int32_t> kept;
  kept.reserve(static_cast<size_t>(len) - n_removed);
  size_t next = 0;
  for (int row = 0; row < len; ++row) {
    if (next < removed.size() && removed[next] == static_cast<uint32_t>(row)) {
      ++next;
    } else {
      kept.push_back(row);
    }
  }
  if (next != removed.size()) return Status::Error("removed rows not increasing or out of range");
  if (!kept.empty() && static_cast<size_t>(cache.PositionAt(l, kh, kept.back())) >= stable)
    return Status::Error("the delta keeps an entry whose token changed");
  if (kept.size() < static_cast<size_t>(len)) cache.Retain(l, kh, kept);
  const size_t row = KvRowBytes(cache.dtype(), cache.head_dim());
  uint32_t n_added = 0;
  std::vector<int32_t> pos;
  std::vector<uint8_t> keys, values;
  if (!r.Get(&n_added) || n_added > layout.n_tokens || !r.GetVec(n_added, &pos) ||
      !r.GetVec(n_added * row, &keys) || !r.GetVec(n_added * row, &values))
    return Status::Error("truncated delta");
  for (int32_t p : pos) {
    if (p < static_cast<int32_t>(stable) || p >= layout.next_position)
      return Status::Error("delta position out of range");
  }
  return cache.AppendHeadRaw(l, kh, keys, values, pos);
}

// A delta's record onto `s` (and its cache onto `cache`, unless null). False, with nothing
// changed, when the delta does not follow the record read so far (`after`).
Result<bool> ApplyDelta(std::string_view payload, const ModelConfig& mc, const ImageExtent& ext,
                        ConversationRecord& s, KvCache* cache) {
  Reader r{reinterpret_cast<const uint8_t*>(payload.data()), payload.size()};
  auto h = ReadJsonHeader(r);
  if (!h.ok()) return h.status();
  ConversationRecord next;
  Layout layout;
  size_t stable = 0;
  try {
    PRIMEKV_RETURN_IF_ERROR(ReadRecordFields(*h, mc.head_dim, true, next, layout));
    PRIMEKV_ASSIGN_OR_RETURN(stable, IntField(*h, "stable_tokens", 0, INT32_MAX));
    PRIMEKV_ASSIGN_OR_RETURN(const uint64_t after, U64Field(*h, "after"));
    if (after != ext.last_sum) return false;
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(std::string("bad delta header: ") + e.what());
  }
  if (next.id != s.id || next.tenant != s.tenant) return Status::Error("another session's delta");
  if (layout.stored != ext.stored) return Status::Error("a delta of another row type");
  if (stable > s.tokens.size() || layout.n_tokens < stable)
    return Status::Error("inconsistent token counts");
  next.tokens.assign(s.tokens.begin(), s.tokens.begin() + static_cast<std::ptrdiff_t>(stable));
  std::vector<Token> added;
  if (!r.GetVec(layout.n_tokens - stable, &added)) return Status::Error("truncated tokens");
  next.tokens.insert(next.tokens.end(), added.begin(), added.end());
  PRIMEKV_RETURN_IF_ERROR(CheckTokens(next, layout, mc));
  if (cache != nullptr) {
    for (int l = 0; l < mc.n_layers; ++l) {
      for (int kh = 0; kh < mc.n_kv_heads; ++kh)
        PRIMEKV_RETURN_IF_ERROR(ApplyHeadDelta(r, l, kh, stable, layout, *cache));
    }
    if (r.at != r.n) return Status::Error("trailing bytes");
    cache->SetNextPosition(layout.next_position);
  }
  s = std::move(next);
  return true;
}

// The deltas after the base, applied in order up to the last complete one that follows.
Status ReadDeltas(std::string_view image, const ModelConfig& mc, ConversationRecord& s,
                  KvCache* cache, ImageExtent& ext) {
  uint64_t at = ext.bytes;
  while (at < image.size()) {
    const std::string_view rest = image.substr(at);
    if (rest.size() < 24 || std::memcmp(rest.data(), kDeltaMagic, 8) != 0) break;
    uint64_t size = 0, sum = 0;
    std::memcpy(&size, rest.data() + 8, 8);
    if (size > rest.size() - 24) break;
    const std::string_view payload = rest.substr(16, size);
    std::memcpy(&sum, rest.data() + 16 + size, 8);
    if (Fnv1a(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()) != sum) break;
    auto applied = ApplyDelta(payload, mc, ext, s, cache);
    if (!applied.ok())
      return Status::Error("delta " + std::to_string(ext.deltas + 1) + ": " + applied.message());
    if (!*applied) break;
    at += 24 + size;
    ext.bytes = at;
    ext.last_sum = sum;
    ++ext.deltas;
  }
  ext.torn_bytes = image.size() - at;
  return Status::Ok();
}

// A cache of `to`'s type holding `from`'s entries (rows through float).
Result<KvCache> ConvertCache(const KvCache& from, const Model& model, const KvCacheOptions& to) {
  KvCache out = model.NewCache(to);
  std::vector<float> keys, values;
  std::vector<int32_t> pos;
  for (int l = 0; l < from.n_layers(); ++l) {
    for (int kh = 0; kh < from.n_kv_heads(); ++kh) {
      from.ReadHead(l, kh, &keys, &values, &pos);
      PRIMEKV_RETURN_IF_ERROR(out.AppendHead(l, kh, keys, values, pos));
    }
  }
  out.SetNextPosition(from.NextPosition());
  return out;
}

// The per-(layer, KV head) entries, bit for bit, into a fresh cache of the type the file stores.
Result<KvCache> ReadCache(Reader& r, const Model& model, const KvCacheOptions& kv,
                          const Layout& layout) {
  const ModelConfig& mc = model.config();
  KvCacheOptions stored_kv = kv;
  stored_kv.dtype = layout.stored;
  KvCache cache = model.NewCache(stored_kv);
  const size_t row = KvRowBytes(layout.stored, mc.head_dim);
  std::vector<uint8_t> keys, values;
  std::vector<int32_t> pos;
  for (int l = 0; l < mc.n_layers; ++l) {
    for (int kh = 0; kh < mc.n_kv_heads; ++kh) {
      uint32_t len = 0;
      if (!r.Get(&len) || len > layout.n_tokens || !r.GetVec(len, &pos) ||
          !r.GetVec(len * row, &keys) || !r.GetVec(len * row, &values))
        return Status::Error("truncated cache");
      for (int32_t p : pos) {
        if (p < 0 || p >= layout.next_position) return Status::Error("cache position out of range");
      }
      PRIMEKV_RETURN_IF_ERROR(cache.AppendHeadRaw(l, kh, keys, values, pos));
    }
  }
  if (r.at != r.n) return Status::Error("trailing bytes");
  cache.SetNextPosition(layout.next_position);
  return cache;
}

Result<ConversationRecord> ParseImage(std::string_view image, const Model& model,
                                      const KvCacheOptions& kv, bool header_only,
                                      ImageExtent* extent) {
  auto verified = VerifyImage(image);
  if (!verified.ok()) return verified.status();
  Reader r{reinterpret_cast<const uint8_t*>(verified->payload.data()), verified->payload.size()};
  ConversationRecord s;
  const ModelConfig& mc = model.config();
  Layout layout;
  PRIMEKV_RETURN_IF_ERROR(ReadHeader(r, mc, verified->version, s, layout));
  if (!ValidSessionId(s.id)) return Status::Error("bad session id");
  if (!r.GetVec(layout.n_tokens, &s.tokens)) return Status::Error("truncated tokens");
  PRIMEKV_RETURN_IF_ERROR(CheckTokens(s, layout, mc));
  std::optional<KvCache> cache;
  if (!header_only) {
    auto read = ReadCache(r, model, kv, layout);
    if (!read.ok()) return read.status();
    cache = std::move(read).value();
  }
  ImageExtent ext{.bytes = verified->end,
                  .base_bytes = verified->end,
                  .last_sum = verified->sum,
                  .stored = layout.stored,
                  .appendable = verified->version == kVersion};
  PRIMEKV_RETURN_IF_ERROR(ReadDeltas(image, mc, s, cache ? &*cache : nullptr, ext));
  if (extent != nullptr) *extent = ext;
  if (header_only) return s;
  if (layout.stored == kv.dtype) {
    s.cache = std::move(cache);
  } else {
    auto converted = ConvertCache(*cache, model, kv);
    if (!converted.ok()) return converted.status();
    s.cache = std::move(converted).value();
  }
  return s;
}

Result<ConversationRecord> ParseSessionFile(const std::string& path, const Model& model,
                                            const KvCacheOptions& kv, bool header_only,
                                            ImageExtent* extent) {
  auto image = ReadImage(path);
  if (!image.ok()) return image.status();
  auto s = ParseImage(*image, model, kv, header_only, extent);
  if (!s.ok()) return s.status();
  if (std::filesystem::path(path).filename().string() != s->id + ".pkvs")
    return Status::Error("id does not match the file name");
  return s;
}

}  // namespace

Result<ConversationRecord> ReadSessionFile(const std::string& path, const Model& model,
                                           const KvCacheOptions& kv, bool header_only,
                                           ImageExtent* extent) {
  auto s = ParseSessionFile(path, model, kv, header_only, extent);
  if (!s.ok()) return Status::Error("session file '" + path + "': " + s.message());
  return s;
}

Result<ConversationRecord> ParseSessionImage(std::string_view image, const Model& model,
                                             const KvCacheOptions& kv, ImageExtent* extent) {
  return ParseImage(image, model, kv, /*header_only=*/false, extent);
}

}  // namespace primekv
