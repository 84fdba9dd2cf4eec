// Seeded RNG, Python-compatible text helpers and file reading for the eval module.
#include <string>
#include <string_view>
#include <vector>

#include "eval/eval_internal.h"
#include "primekv/util/file_io.h"

namespace primekv::eval_internal {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Byte length of the Python whitespace character starting at s[i], or 0.
size_t WhitespaceLen(std::string_view s, size_t i) {
  const auto b = [&](size_t k) {
    return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0;
  };
  const unsigned c = b(0);
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return 1;
  if (c == 0xC2 && (b(1) == 0x85 || b(1) == 0xA0)) return 2;
  if (c == 0xE1 && b(1) == 0x9A && b(2) == 0x80) return 3;  // U+1680
  if (c == 0xE2 && b(1) == 0x80 &&
      ((b(2) >= 0x80 && b(2) <= 0x8A) || b(2) == 0xA8 || b(2) == 0xA9 || b(2) == 0xAF)) {
    return 3;  // U+2000..U+200A, U+2028, U+2029, U+202F
  }
  if (c == 0xE2 && b(1) == 0x81 && b(2) == 0x9F) return 3;  // U+205F
  if (c == 0xE3 && b(1) == 0x80 && b(2) == 0x80) return 3;  // U+3000
  return 0;
}

}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t state = seed;
  for (uint64_t& s : s_) s = SplitMix64(state);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Rng::Below(uint64_t n) {
  Check(n > 0, "Rng::Below needs n > 0");
  // Rejection keeps the draw unbiased: accept only values below the largest multiple of n.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = Next();
  } while (x >= limit);
  return x % n;
}

int64_t Rng::Between(int64_t lo, int64_t hi) {
  Check(lo <= hi, "Rng::Between needs lo <= hi");
  return lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo) + 1));
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

uint64_t DeriveSeed(uint64_t seed, std::string_view task, uint64_t index, uint64_t stream) {
  uint64_t state = seed ^ Fnv1a(task);
  uint64_t h = SplitMix64(state);
  state = h ^ (index * 0xD6E8FEB86659FD93ull);
  h = SplitMix64(state);
  state = h ^ (stream * 0xA0761D6478BD642Full);
  return SplitMix64(state);
}

std::vector<std::string_view> PySplit(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t w;
    while (i < s.size() && (w = WhitespaceLen(s, i)) > 0) i += w;
    if (i >= s.size()) break;
    const size_t start = i;
    while (i < s.size() && WhitespaceLen(s, i) == 0) ++i;
    out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::string_view PyStrip(std::string_view s) {
  size_t begin = 0, w;
  while (begin < s.size() && (w = WhitespaceLen(s, begin)) > 0) begin += w;
  // Scan forward for the end of the last non-whitespace character (multi-byte aware).
  size_t end = begin;
  size_t i = begin;
  while (i < s.size()) {
    w = WhitespaceLen(s, i);
    if (w > 0) {
      i += w;
    } else {
      ++i;
      end = i;
    }
  }
  return s.substr(begin, end - begin);
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string_view FirstLine(std::string_view s) {
  const size_t start = s.find_first_not_of('\n');
  if (start == std::string_view::npos) return {};
  s.remove_prefix(start);
  return s.substr(0, s.find('\n'));
}

std::vector<std::string_view> DigitRuns(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] >= '0' && s[i] <= '9') {
      const size_t start = i;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
      out.push_back(s.substr(start, i - start));
    } else {
      ++i;
    }
  }
  return out;
}

std::string Join(std::span<const std::string> parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

std::string JoinEnglishList(std::span<const std::string> items) {
  if (items.empty()) return "";
  if (items.size() == 1) return items[0];
  if (items.size() == 2) return items[0] + " and " + items[1];
  std::string out;
  for (size_t i = 0; i + 1 < items.size(); ++i) out += items[i] + ", ";
  return out + "and " + items.back();
}

Result<std::string> ReadTextFile(const std::string& path) {
  // Regular files only: a device (/dev/zero) or FIFO would never end or block the run.
  return ReadFileCapped(path, "task file", FileSource::kRegular, kMaxTaskFileBytes);
}

int EffectiveMaxNewTokens(const TaskOptions& options, int task_default) {
  return options.max_new_tokens > 0 ? options.max_new_tokens : task_default;
}

}  // namespace primekv::eval_internal
