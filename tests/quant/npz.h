// Test helper: reads numpy .npz archives (a zip of .npy files, stored or deflated) as written by
// numpy.savez / savez_compressed. Only what the fixtures use: little-endian float32 arrays and
// unicode scalars ('<U*'), C order.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace primekv::test {

struct NpyArray {
  std::string descr;           // numpy dtype string, e.g. "<f4", "<U4"
  std::vector<int64_t> shape;  // empty for a scalar
  std::vector<uint8_t> data;   // raw element bytes

  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::vector<float> Floats() const {
    std::vector<float> out(data.size() / sizeof(float));
    if (!out.empty()) std::memcpy(out.data(), data.data(), out.size() * sizeof(float));
    return out;
  }
  // A '<U' scalar as ASCII (the fixtures' type names are ASCII).
  std::string Text() const {
    std::string s;
    for (size_t i = 0; i + 4 <= data.size(); i += 4) {
      if (data[i] == 0) break;
      s.push_back(static_cast<char>(data[i]));
    }
    return s;
  }
};

namespace npz_detail {

inline uint32_t U32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0] | (p[1] << 8) | (p[2] << 16)) |
         (static_cast<uint32_t>(p[3]) << 24);
}
inline uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Value of `key` in a .npy header dict, e.g. 'descr': '<f4' -> <f4; 'shape': (2, 3) -> (2, 3).
inline std::string HeaderField(const std::string& header, const std::string& key) {
  const size_t at = header.find("'" + key + "':");
  if (at == std::string::npos) return "";
  size_t i = at + key.size() + 3;
  while (i < header.size() && header[i] == ' ') ++i;
  if (i >= header.size()) return "";
  if (header[i] == '\'') {
    const size_t end = header.find('\'', i + 1);
    return header.substr(i + 1, end - i - 1);
  }
  if (header[i] == '(') {
    const size_t end = header.find(')', i);
    return header.substr(i, end - i + 1);
  }
  const size_t end = header.find_first_of(",}", i);
  return header.substr(i, end - i);
}

inline std::optional<NpyArray> ParseNpy(const std::vector<uint8_t>& bytes) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) return std::nullopt;
  const int major = bytes[6];
  size_t header_len, start;
  if (major == 1) {
    header_len = U16(bytes.data() + 8);
    start = 10;
  } else {
    header_len = U32(bytes.data() + 8);
    start = 12;
  }
  if (start + header_len > bytes.size()) return std::nullopt;
  const std::string header(bytes.begin() + static_cast<std::ptrdiff_t>(start),
                           bytes.begin() + static_cast<std::ptrdiff_t>(start + header_len));
  if (HeaderField(header, "fortran_order") != "False") return std::nullopt;
  NpyArray a;
  a.descr = HeaderField(header, "descr");
  const std::string shape = HeaderField(header, "shape");
  for (size_t i = 0; i < shape.size();) {
    if (shape[i] >= '0' && shape[i] <= '9') {
      size_t used = 0;
      a.shape.push_back(std::stoll(shape.substr(i), &used));
      i += used;
    } else {
      ++i;
    }
  }
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(start + header_len), bytes.end());
  return a;
}

inline std::optional<std::vector<uint8_t>> Inflate(const uint8_t* src, size_t size,
                                                   size_t out_size) {
  std::vector<uint8_t> out(out_size);
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return std::nullopt;
  zs.next_in = const_cast<Bytef*>(src);
  zs.avail_in = static_cast<uInt>(size);
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out_size);
  const int rc = inflate(&zs, Z_FINISH);
  inflateEnd(&zs);
  if (rc != Z_STREAM_END || zs.total_out != out_size) return std::nullopt;
  return out;
}

}  // namespace npz_detail

// Every array of an .npz, keyed by name without ".npy"; nullopt if the file is unreadable or
// not a zip of .npy files.
inline std::optional<std::map<std::string, NpyArray>> ReadNpz(const std::string& path) {
  using namespace npz_detail;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  // The end-of-central-directory record: the last "PK\5\6" (a comment may follow it).
  if (file.size() < 22) return std::nullopt;
  size_t eocd = file.size() - 22;
  while (eocd > 0 && U32(file.data() + eocd) != 0x06054b50u) --eocd;
  if (U32(file.data() + eocd) != 0x06054b50u) return std::nullopt;
  const size_t entries = U16(file.data() + eocd + 10);
  size_t at = U32(file.data() + eocd + 16);
  std::map<std::string, NpyArray> arrays;
  for (size_t e = 0; e < entries; ++e) {
    if (at + 46 > file.size() || U32(file.data() + at) != 0x02014b50u) return std::nullopt;
    const uint8_t* c = file.data() + at;
    const uint16_t method = U16(c + 10);
    const uint32_t compressed = U32(c + 20), uncompressed = U32(c + 24);
    const uint16_t name_len = U16(c + 28), extra_len = U16(c + 30), comment_len = U16(c + 32);
    const uint32_t local = U32(c + 42);
    std::string name(reinterpret_cast<const char*>(c + 46), name_len);
    at += 46u + name_len + extra_len + comment_len;
    if (local + 30 > file.size() || U32(file.data() + local) != 0x04034b50u) return std::nullopt;
    const size_t data_at =
        local + 30u + U16(file.data() + local + 26) + U16(file.data() + local + 28);
    if (data_at + compressed > file.size()) return std::nullopt;
    std::optional<std::vector<uint8_t>> bytes;
    if (method == 0) {
      bytes.emplace(file.begin() + static_cast<std::ptrdiff_t>(data_at),
                    file.begin() + static_cast<std::ptrdiff_t>(data_at + uncompressed));
    } else if (method == 8) {
      bytes = Inflate(file.data() + data_at, compressed, uncompressed);
    }
    if (!bytes) return std::nullopt;
    auto array = ParseNpy(*bytes);
    if (!array) return std::nullopt;
    if (name.size() > 4 && name.substr(name.size() - 4) == ".npy") name.resize(name.size() - 4);
    arrays.emplace(std::move(name), std::move(*array));
  }
  return arrays;
}

}  // namespace primekv::test
