#include "tokenizer/unicode.h"

#include <algorithm>

namespace primekv {
namespace {

bool InRanges(std::span<const unicode_internal::CodepointRange> ranges, uint32_t cp) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const auto& r) { return v < r.lo; });
  if (it == ranges.begin()) return false;
  --it;
  return cp <= it->hi;
}

bool IsContinuation(unsigned char b) { return (b & 0xC0) == 0x80; }

}  // namespace

Utf8Char DecodeUtf8(std::string_view text, size_t pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  const Utf8Char invalid{b0, 1, false};
  if (b0 < 0x80) return {b0, 1, true};
  int len = 0;
  uint32_t cp = 0;
  uint32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return invalid;
  }
  if (pos + static_cast<size_t>(len) > text.size()) return invalid;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(text[pos + static_cast<size_t>(k)]);
    if (!IsContinuation(b)) return invalid;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return invalid;
  return {cp, len, true};
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsUnicodeLetter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return InRanges(unicode_internal::LetterRanges(), cp);
}

bool IsUnicodeNumber(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return InRanges(unicode_internal::NumberRanges(), cp);
}

bool IsUnicodePunctuation(uint32_t cp) {
  return InRanges(unicode_internal::PunctuationRanges(), cp);
}

bool IsUnicodeSymbol(uint32_t cp) { return InRanges(unicode_internal::SymbolRanges(), cp); }

bool IsUnicodeMark(uint32_t cp) { return InRanges(unicode_internal::MarkRanges(), cp); }

bool IsUnicodeSpace(uint32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

CharClass ClassifyChar(const Utf8Char& c) {
  if (!c.valid) return CharClass::kOther;
  if (IsUnicodeLetter(c.cp)) return CharClass::kLetter;
  if (IsUnicodeNumber(c.cp)) return CharClass::kNumber;
  if (IsUnicodeSpace(c.cp)) return CharClass::kSpace;
  return CharClass::kOther;
}

}  // namespace primekv
