// Byte-level helpers for GGUF tests: little-endian patching and locating fields by name.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace primekv::gguf_test {

// Position of the only occurrence of `needle`; fails the test if it is absent or repeated.
inline size_t FindUnique(const std::vector<uint8_t>& bytes, std::string_view needle) {
  size_t found = std::string_view::npos;
  int count = 0;
  const std::string_view hay(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  for (size_t p = hay.find(needle); p != std::string_view::npos; p = hay.find(needle, p + 1)) {
    found = p;
    ++count;
  }
  EXPECT_EQ(count, 1) << "'" << needle << "' should occur exactly once";
  return found;
}

template <typename T>
void PutAt(std::vector<uint8_t>& bytes, size_t pos, T v) {
  ASSERT_LE(pos + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + pos, &v, sizeof(T));
}

template <typename T>
T GetAt(const std::vector<uint8_t>& bytes, size_t pos) {
  T v{};
  EXPECT_LE(pos + sizeof(T), bytes.size());
  if (pos + sizeof(T) <= bytes.size()) std::memcpy(&v, bytes.data() + pos, sizeof(T));
  return v;
}

// Appends little-endian values, for building expected bytes by hand.
class ByteBuilder {
 public:
  template <typename T>
  ByteBuilder& Add(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
    return *this;
  }
  ByteBuilder& Str(std::string_view s) {
    Add<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  ByteBuilder& Raw(std::string_view s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  ByteBuilder& PadTo(size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// A fresh directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info->name();
    for (char& c : name) {
      if (c == '/') c = '_';  // parameterized test names contain '/'
    }
    path_ = std::filesystem::temp_directory_path() /
            ("primekv_gguf_" + std::to_string(::getpid()) + "_" + name);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace primekv::gguf_test
