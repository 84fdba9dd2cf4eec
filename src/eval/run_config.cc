#include "eval/run_config.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "primekv/util/file_io.h"
#include "primekv/util/json_read.h"

namespace primekv::eval_internal {
namespace {

using nlohmann::json;

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t Load64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];  // little-endian on every host
  return v;
}

uint64_t Avalanche(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Appends `n` bytes at `offset` of `in` to the hash.
bool HashRange(std::ifstream& in, uint64_t offset, uint64_t n, Mix64& h) {
  std::vector<char> buf(1 << 20);
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset));
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
    in.read(buf.data(), static_cast<std::streamsize>(want));
    if (static_cast<size_t>(in.gcount()) != want) return false;
    h.Update(buf.data(), want);
    n -= want;
  }
  return true;
}

std::string Show(const json& v) {
  return v.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
}

}  // namespace

void Mix64::Block(const unsigned char* p) {
  for (int i = 0; i < 4; ++i) {
    lanes_[i] =
        Rotl(lanes_[i] + Load64(p + 8 * i) * 0x9E3779B97F4A7C15ull, 31) * 0xC2B2AE3D27D4EB4Full;
  }
}

void Mix64::Update(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += n;
  if (tail_len_ > 0) {
    const size_t take = std::min(n, sizeof(tail_) - tail_len_);
    std::memcpy(tail_ + tail_len_, p, take);
    tail_len_ += take;
    p += take;
    n -= take;
    if (tail_len_ < sizeof(tail_)) return;
    Block(tail_);
    tail_len_ = 0;
  }
  for (; n >= sizeof(tail_); p += sizeof(tail_), n -= sizeof(tail_)) Block(p);
  std::memcpy(tail_, p, n);
  tail_len_ = n;
}

uint64_t Mix64::Digest() const {
  uint64_t h = total_ * 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 4; ++i) h = Avalanche(h ^ Rotl(lanes_[i], 7 * i + 1));
  for (size_t i = 0; i < tail_len_; ++i) h = Avalanche(h ^ (uint64_t{tail_[i]} << (8 * (i % 8))));
  return Avalanche(h ^ tail_len_);
}

Result<FileFingerprint> FingerprintFile(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return Status::Error("'" + path.string() + "' is not a regular file");
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return Status::Error("cannot stat '" + path.string() + "': " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read '" + path.string() + "'");
  FileFingerprint fp;
  fp.size = size;
  Mix64 h;
  bool ok = true;
  if (size <= kFullHashBytes) {
    fp.scheme = "mix64-full";
    ok = HashRange(in, 0, size, h);
  } else {
    fp.scheme = "mix64-sampled";
    constexpr uint64_t kHead = 16 << 20, kTail = 1 << 20, kBlock = 64 << 10;
    constexpr int kBlocks = 256;
    ok = HashRange(in, 0, kHead, h);
    for (int b = 0; ok && b < kBlocks; ++b) {
      const uint64_t offset = kHead + (size - kHead - kTail - kBlock) * b / (kBlocks - 1);
      ok = HashRange(in, offset, kBlock, h);
    }
    ok = ok && HashRange(in, size - kTail, kTail, h);
    const unsigned char size_bytes[8] = {
        static_cast<unsigned char>(size),       static_cast<unsigned char>(size >> 8),
        static_cast<unsigned char>(size >> 16), static_cast<unsigned char>(size >> 24),
        static_cast<unsigned char>(size >> 32), static_cast<unsigned char>(size >> 40),
        static_cast<unsigned char>(size >> 48), static_cast<unsigned char>(size >> 56)};
    h.Update(size_bytes, sizeof(size_bytes));
  }
  if (!ok) return Status::Error("error reading '" + path.string() + "'");
  fp.hash = Hex(h.Digest());
  return fp;
}

Result<json> ParseRunConfig(std::string_view text, const std::string& name) {
  PRIMEKV_ASSIGN_OR_RETURN(const json doc, ParseJson(text, name));
  // Paths read "DIR/config.json:model.size: expected an integer, got a string".
  if (!doc.is_object())
    return Status::Error(name + ": expected an object, got " + JsonKindName(doc));
  const JsonNode root(doc, name + ":");
  PRIMEKV_ASSIGN_OR_RETURN(const JsonNode model, root.Field("model"));
  PRIMEKV_RETURN_IF_ERROR(model.Members().status());
  for (const char* key : {"path", "hash", "scheme"}) {
    PRIMEKV_ASSIGN_OR_RETURN(const JsonNode v, model.Field(key));
    PRIMEKV_RETURN_IF_ERROR(v.String().status());
  }
  PRIMEKV_ASSIGN_OR_RETURN(const auto size, model.Optional("size"));
  if (size) PRIMEKV_RETURN_IF_ERROR(size->Integer(0, INT64_MAX).status());
  PRIMEKV_ASSIGN_OR_RETURN(const JsonNode settings, root.Field("settings"));
  PRIMEKV_RETURN_IF_ERROR(settings.Members().status());
  PRIMEKV_ASSIGN_OR_RETURN(const auto format, root.Optional("format"));
  if (format) PRIMEKV_RETURN_IF_ERROR(format->String().status());
  PRIMEKV_ASSIGN_OR_RETURN(const auto tasks, root.Optional("tasks"));
  if (tasks) PRIMEKV_RETURN_IF_ERROR(tasks->Members().status());
  PRIMEKV_ASSIGN_OR_RETURN(const auto presses, root.Optional("presses"));
  if (presses) {
    PRIMEKV_ASSIGN_OR_RETURN(const auto members, presses->Members());
    for (const auto& member : members) PRIMEKV_RETURN_IF_ERROR(member.second.String().status());
  }
  return doc;
}

Result<json> ReadRunConfig(const std::filesystem::path& path) {
  PRIMEKV_ASSIGN_OR_RETURN(
      const std::string text,
      ReadFileCapped(path.string(), "eval configuration", FileSource::kRegular, kMaxConfigBytes));
  return ParseRunConfig(text, path.string());
}

Status CheckRunConfig(const json& recorded, const json& current, const std::filesystem::path& dir,
                      const std::set<std::string>& row_presses) {
  const std::string where = "--out " + dir.string() + " holds results made with ";
  const std::string fix = "; use another --out folder or the same settings";
  if (!recorded.is_object() || !recorded.contains("settings") || !recorded.contains("model")) {
    return Status::Error(dir.string() + "/config.json is not a primekv eval configuration" + fix);
  }
  const json& rm = recorded["model"];
  const json& cm = current["model"];
  if (rm.value("size", json()) != cm["size"] || rm.value("hash", json()) != cm["hash"] ||
      rm.value("scheme", json()) != cm["scheme"]) {
    return Status::Error(where + "another model file (" + Show(rm.value("path", json())) + ", " +
                         Show(rm.value("size", json())) + " bytes, hash " +
                         Show(rm.value("hash", json())) + "; now " + Show(cm["path"]) + ", " +
                         Show(cm["size"]) + " bytes, hash " + Show(cm["hash"]) + ")" + fix);
  }
  const json& rs = recorded["settings"];
  // The mode first: it decides which of the other settings apply.
  std::vector<std::string> keys{"mode"};
  for (const auto& [key, value] : current["settings"].items()) {
    if (key != "mode") keys.push_back(key);
  }
  for (const std::string& key : keys) {
    const json value = current["settings"].value(key, json());
    const json old = rs.is_object() ? rs.value(key, json()) : json();
    if (old != value) {
      return Status::Error(where + "another --" + key + " (" + Show(old) + "; now " + Show(value) +
                           ")" + fix);
    }
  }
  const json& rt = recorded.value("tasks", json::object());
  for (const auto& [task, fingerprint] : current["tasks"].items()) {
    if (rt.is_object() && rt.contains(task) && rt[task] != fingerprint) {
      return Status::Error(where + "another version of task " + task + " (file " + Show(rt[task]) +
                           "; now " + Show(fingerprint) + ")" + fix);
    }
  }
  // Rows are keyed by the press's name, so the name must keep its meaning.
  const json& rp = recorded.value("presses", json());
  const std::string new_out = "; use a new --out folder";
  const json cp = current.value("presses", json::object());
  for (const auto& [press, resolved] : cp.items()) {
    if (rp.is_object() && rp.contains(press)) {
      if (rp[press] != resolved) {
        return Status::Error(where + "press " + press + " resolved as " + Show(rp[press]) +
                             ", and it now resolves as " + Show(resolved) +
                             " (a default changed), so its rows would mix two methods" + new_out);
      }
    } else if (press != "none" && row_presses.count(press) > 0) {
      return Status::Error(
          "--out " + dir.string() + " has rows of press " + press +
          " but no record of what that press resolved to (made by a primekv from before "
          "config.json recorded presses), so they may come from another default; it now "
          "resolves as " +
          Show(resolved) + new_out +
          " (or check the rows with scripts/verify_eval_rows.py DIR --record, which records "
          "the presses it reproduces)");
    }
  }
  return Status::Ok();
}

json MergeRunConfig(const json& recorded, const json& current) {
  json merged = current;
  for (const char* part : {"tasks", "presses"}) {
    if (recorded.is_object() && recorded.contains(part) && recorded[part].is_object()) {
      for (const auto& [name, value] : recorded[part].items()) merged[part][name] = value;
    }
  }
  return merged;
}

}  // namespace primekv::eval_internal
