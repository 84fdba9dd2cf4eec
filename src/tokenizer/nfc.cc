// Unicode Normalization Form C: canonical decomposition, canonical ordering of combining marks,
// then canonical composition (UAX #15), over the tables in nfc_table.cc.
#include <algorithm>
#include <vector>

#include "tokenizer/unicode.h"

namespace primekv {
namespace {

using unicode_internal::CccRange;
using unicode_internal::Composite;
using unicode_internal::Decomposition;

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;
constexpr uint32_t kInvalidByte = 0x80000000u;  // marks a raw invalid byte in the work buffer

uint32_t CombiningClass(uint32_t cp) {
  if (cp < 0x300 || (cp & kInvalidByte)) return 0;
  const auto ranges = unicode_internal::CombiningClassRanges();
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const CccRange& r) { return v < r.lo; });
  if (it == ranges.begin()) return 0;
  --it;
  return cp <= it->hi ? it->ccc : 0;
}

const Decomposition* FindDecomposition(uint32_t cp) {
  const auto table = unicode_internal::CanonicalDecompositions();
  auto it = std::lower_bound(table.begin(), table.end(), cp,
                             [](const Decomposition& d, uint32_t v) { return d.cp < v; });
  return it != table.end() && it->cp == cp ? &*it : nullptr;
}

void Decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const Decomposition* d = cp < 0xC0 ? nullptr : FindDecomposition(cp)) {
    Decompose(d->first, out);
    if (d->second != 0) Decompose(d->second, out);
    return;
  }
  out.push_back(cp);
}

// The primary composite of (a, b), or 0.
uint32_t Compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto table = unicode_internal::PrimaryComposites();
  auto it =
      std::lower_bound(table.begin(), table.end(), std::pair{a, b},
                       [](const Composite& c, std::pair<uint32_t, uint32_t> v) {
                         return c.first < v.first || (c.first == v.first && c.second < v.second);
                       });
  return it != table.end() && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

std::string NormalizeNfc(std::string_view text) {
  // Below U+0300 every character is its own NFC form and cannot start a composition with
  // another character below U+0300, so such text is already normalized.
  const bool simple = std::all_of(text.begin(), text.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0xCC;  // lead bytes < 0xCC encode code points < U+0300
  });
  if (simple) return std::string(text);

  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    if (c.valid) {
      Decompose(c.cp, cps);
    } else {
      cps.push_back(kInvalidByte | c.cp);
    }
    pos += static_cast<size_t>(c.len);
  }
  // Canonical ordering: stable-sort each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (CombiningClass(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && CombiningClass(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i),
                     cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return CombiningClass(a) < CombiningClass(b); });
    i = j;
  }
  // Canonical composition: each character joins the last starter unless a character between
  // them has a class >= its own (blocked) or is a starter.
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;
  uint32_t last_ccc = 0;
  for (uint32_t cp : cps) {
    const uint32_t ccc = CombiningClass(cp);
    if (starter != SIZE_MAX && !(cp & kInvalidByte)) {
      const bool blocked = out.size() - 1 != starter && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        if (uint32_t composite = Compose(out[starter], cp)) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (ccc == 0) starter = (cp & kInvalidByte) ? SIZE_MAX : out.size();
    last_ccc = ccc;
    out.push_back(cp);
  }
  std::string result;
  result.reserve(text.size());
  for (uint32_t cp : out) {
    if (cp & kInvalidByte) {
      result.push_back(static_cast<char>(cp & 0xFF));
    } else {
      AppendUtf8(cp, result);
    }
  }
  return result;
}

}  // namespace primekv
