// UTF-8 decoding and the few Unicode classes the pre-tokenizers need (letter, number, space,
// punctuation, symbol, mark).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace primekv {

namespace unicode_internal {
struct CodepointRange {
  uint32_t lo, hi;  // inclusive
};
std::span<const CodepointRange> LetterRanges();
std::span<const CodepointRange> NumberRanges();
std::span<const CodepointRange> PunctuationRanges();
std::span<const CodepointRange> SymbolRanges();
std::span<const CodepointRange> MarkRanges();

// NFC data (nfc_table.cc): runs of equal non-zero canonical combining class, canonical
// decompositions (second == 0: a singleton), and primary composites sorted by (first, second).
struct CccRange {
  uint32_t lo, hi, ccc;
};
struct Decomposition {
  uint32_t cp, first, second;
};
struct Composite {
  uint32_t first, second, composite;
};
std::span<const CccRange> CombiningClassRanges();
std::span<const Decomposition> CanonicalDecompositions();
std::span<const Composite> PrimaryComposites();
}  // namespace unicode_internal

// One decoded character. Invalid UTF-8 decodes byte by byte: `valid` is false, `len` is 1 and
// `cp` is the raw byte, so every input splits into characters that cover it exactly.
struct Utf8Char {
  uint32_t cp = 0;
  int len = 1;
  bool valid = true;
};

// Decodes the character starting at text[pos] (pos < text.size()). Rejects overlong forms,
// surrogates, truncated sequences and values above U+10FFFF.
Utf8Char DecodeUtf8(std::string_view text, size_t pos);
// Appends the UTF-8 encoding of `cp` (which must be a valid scalar value).
void AppendUtf8(uint32_t cp, std::string& out);

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

bool IsUnicodeLetter(uint32_t cp);       // general category L*
bool IsUnicodeNumber(uint32_t cp);       // general category N*
bool IsUnicodeSpace(uint32_t cp);        // White_Space property (regex \s)
bool IsUnicodePunctuation(uint32_t cp);  // general category P*
bool IsUnicodeSymbol(uint32_t cp);       // general category S*
bool IsUnicodeMark(uint32_t cp);         // general category M*
// Class of a decoded character; invalid bytes are kOther.
CharClass ClassifyChar(const Utf8Char& c);

// Unicode Normalization Form C (what Hugging Face's "NFC" normalizer applies). Invalid UTF-8
// bytes are copied through unchanged and block composition across them.
std::string NormalizeNfc(std::string_view text);

}  // namespace primekv
