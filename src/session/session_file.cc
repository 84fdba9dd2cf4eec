// Session files: "PKVSESS1" magic, u32 version, u64 payload size, payload, u64 FNV-1a of the
// payload. Payload: u32 header length + JSON header, i32 tokens, then per (layer, KV head):
// u32 length, i32 positions, keys, values. Version 2 stores the rows as the cache holds them
// (header "kv_dtype": f32, f16, or q8_0 blocks), so a file costs what the cache does; version 1
// (still read) stored f32 rows whatever the cache's type.
#include "primekv/session/session_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

namespace primekv {

namespace {

constexpr char kMagic[8] = {'P', 'K', 'V', 'S', 'E', 'S', 'S', '1'};
constexpr uint32_t kVersion = 2;
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

Result<std::string> SerializeSession(const ConversationRecord& s) {
  if (!ValidSessionId(s.id)) return Status::Error("invalid session id");
  if (!s.cache) return Status::Error("session " + s.id + " holds no cache");
  const KvCache& c = *s.cache;
  nlohmann::json h = {{"id", s.id},
                      {"tenant", s.tenant},
                      {"cache_salt", s.cache_salt},
                      {"press", s.press},
                      {"ratio", s.schedule.ratio},
                      {"mode", ScheduleModeName(s.schedule.mode)},
                      {"budget", s.budget},
                      {"last_prompt_len", s.last_prompt_len},
                      {"turn", s.turn},
                      {"n_tokens", s.tokens.size()},
                      {"n_layers", c.n_layers()},
                      {"n_kv_heads", c.n_kv_heads()},
                      {"head_dim", c.head_dim()},
                      {"kv_dtype", KvDTypeName(c.dtype())},
                      {"next_position", c.NextPosition()}};
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
  std::string file(kMagic, sizeof(kMagic));
  Put(file, kVersion);
  Put(file, static_cast<uint64_t>(payload.size()));
  file += payload;
  Put(file, Fnv1a(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
  return file;
}

Status WriteSessionFile(const std::string& dir, const ConversationRecord& s) {
  auto bytes = SerializeSession(s);
  if (!bytes.ok()) return bytes.status();
  const std::string& file = *bytes;
  const std::string final_path = dir + "/" + s.id + ".pkvs";
  // A new name, created exclusively and never through a link: whatever sits in the directory
  // under a guessable name (a link to another file, a FIFO) is neither written nor waited on.
  auto nonce = Nonce();
  if (!nonce.ok()) return nonce.status();
  const std::string tmp = final_path + "." + *nonce + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error("cannot write '" + tmp + "': " + std::strerror(errno));
  size_t done = 0;
  while (done < file.size()) {
    const ssize_t w = ::write(fd, file.data() + done, file.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::Error("cannot write '" + tmp + "': " + why);
    }
    done += static_cast<size_t>(w);
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

namespace {

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

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
};

// The payload of a session image (magic, version, size and checksum verified), or why not.
Result<Verified> VerifyImage(std::string_view image) {
  if (image.size() < 20 || std::memcmp(image.data(), kMagic, 8) != 0)
    return Status::Error("bad magic");
  uint32_t version = 0;
  uint64_t size = 0;
  std::memcpy(&version, image.data() + 8, 4);
  std::memcpy(&size, image.data() + 12, 8);
  if (version != kVersion && version != kVersionF32Rows)
    return Status::Error("unsupported version " + std::to_string(version) + " (this build reads " +
                         std::to_string(kVersionF32Rows) + " and " + std::to_string(kVersion) +
                         ")");
  if (size > kMaxPayload) return Status::Error("bad payload size");
  if (image.size() != 20 + size + 8) return Status::Error("truncated or oversized");
  const std::string_view payload = image.substr(20, size);
  uint64_t sum = 0;
  std::memcpy(&sum, image.data() + 20 + size, 8);
  if (Fnv1a(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()) != sum)
    return Status::Error("checksum mismatch");
  return Verified{payload, version};
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
  if (st.st_size < 20 || static_cast<uint64_t>(st.st_size) > 28 + kMaxPayload)
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

// The JSON header into `s` and `layout`.
Status ReadHeader(Reader& r, const ModelConfig& mc, uint32_t version, ConversationRecord& s,
                  Layout& layout) {
  uint32_t hlen = 0;
  std::vector<char> htext;
  if (!r.Get(&hlen) || !r.GetVec(hlen, &htext)) return Status::Error("bad header");
  try {
    const auto h = nlohmann::json::parse(htext.begin(), htext.end());
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
    s.budget = h.at("budget").get<int>();
    s.last_prompt_len = h.at("last_prompt_len").get<int>();
    s.turn = h.value("turn", uint64_t{0});  // absent in files written before the turn counter
    layout.n_tokens = h.at("n_tokens").get<size_t>();
    layout.next_position = h.at("next_position").get<int32_t>();
    if (h.at("n_layers").get<int>() != mc.n_layers ||
        h.at("n_kv_heads").get<int>() != mc.n_kv_heads ||
        h.at("head_dim").get<int>() != mc.head_dim)
      return Status::Error("written for a model of another shape");
    if (version != kVersionF32Rows) {
      auto stored = ParseStoredType(h.at("kv_dtype").get<std::string>(), mc.head_dim);
      if (!stored.ok()) return stored.status();
      layout.stored = *stored;
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(std::string("bad header: ") + e.what());
  }
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

// The per-(layer, KV head) entries into a fresh cache of `kv`'s type: bit for bit when the file
// stores that type, else converted.
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
  if (layout.stored == kv.dtype) return cache;
  return ConvertCache(cache, model, kv);
}

Result<ConversationRecord> ParseImage(std::string_view image, const Model& model,
                                      const KvCacheOptions& kv, bool header_only) {
  auto verified = VerifyImage(image);
  if (!verified.ok()) return verified.status();
  Reader r{reinterpret_cast<const uint8_t*>(verified->payload.data()), verified->payload.size()};
  ConversationRecord s;
  const ModelConfig& mc = model.config();
  Layout layout;
  PRIMEKV_RETURN_IF_ERROR(ReadHeader(r, mc, verified->version, s, layout));
  if (!ValidSessionId(s.id)) return Status::Error("bad session id");
  if (!r.GetVec(layout.n_tokens, &s.tokens)) return Status::Error("truncated tokens");
  if (s.last_prompt_len < 0 || static_cast<size_t>(s.last_prompt_len) > s.tokens.size() ||
      layout.next_position != static_cast<int32_t>(s.tokens.size()))
    return Status::Error("inconsistent token counts");
  for (Token t : s.tokens) {
    if (t < 0 || t >= mc.vocab_size) return Status::Error("token id out of range");
  }
  if (header_only) return s;
  auto cache = ReadCache(r, model, kv, layout);
  if (!cache.ok()) return cache.status();
  s.cache = std::move(cache).value();
  return s;
}

Result<ConversationRecord> ParseSessionFile(const std::string& path, const Model& model,
                                            const KvCacheOptions& kv, bool header_only) {
  auto image = ReadImage(path);
  if (!image.ok()) return image.status();
  auto s = ParseImage(*image, model, kv, header_only);
  if (!s.ok()) return s.status();
  if (std::filesystem::path(path).filename().string() != s->id + ".pkvs")
    return Status::Error("id does not match the file name");
  return s;
}

}  // namespace

Result<ConversationRecord> ReadSessionFile(const std::string& path, const Model& model,
                                           const KvCacheOptions& kv, bool header_only) {
  auto s = ParseSessionFile(path, model, kv, header_only);
  if (!s.ok()) return Status::Error("session file '" + path + "': " + s.message());
  return s;
}

Result<ConversationRecord> ParseSessionImage(std::string_view image, const Model& model,
                                             const KvCacheOptions& kv) {
  return ParseImage(image, model, kv, /*header_only=*/false);
}

}  // namespace primekv
