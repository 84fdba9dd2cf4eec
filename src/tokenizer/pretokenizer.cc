#include "tokenizer/pretokenizer.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <span>
#include <string_view>

#include "tokenizer/unicode.h"

namespace primekv {
namespace {

// The tokenizer.ggml.pre names of each family ("" pads), in the order messages list them: every
// name llama.cpp c392e509 maps, plus "gpt2" (this project's earlier spelling of "gpt-2").
struct KindNames {
  PreTokenizerKind kind;
  std::array<std::string_view, 12> names;
};
constexpr KindNames kNames[] = {
    {PreTokenizerKind::kDefault, {"default"}},
    {PreTokenizerKind::kGpt2,
     {"gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es",
      "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt"}},
    {PreTokenizerKind::kGpt2, {"olmo", "jais"}},
    {PreTokenizerKind::kLlama3,
     {"llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe", "chatglm-bpe"}},
    {PreTokenizerKind::kQwen2, {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"}},
    {PreTokenizerKind::kStarcoder,
     {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}},
    {PreTokenizerKind::kFalcon, {"falcon"}},
    {PreTokenizerKind::kDeepseekLlm, {"deepseek-llm"}},
    {PreTokenizerKind::kDeepseekCoder, {"deepseek-coder"}},
    {PreTokenizerKind::kDeepseekV3, {"deepseek-v3"}},
    {PreTokenizerKind::kBloom, {"bloom", "poro-chat", "gpt3-finnish"}},
    {PreTokenizerKind::kViking, {"viking"}},
    {PreTokenizerKind::kTekken, {"tekken"}},
    {PreTokenizerKind::kChameleon, {"chameleon"}},
};

// General category beyond CharClass, for characters of class kOther.
enum class Category : uint8_t { kNone, kPunctuation, kSymbol, kMark };

constexpr uint32_t kNoChar = 0xFFFFFFFFu;

struct Char {
  size_t offset;
  uint32_t cp;  // kNoChar for an invalid UTF-8 byte (classified kOther, category kNone)
  CharClass cls;
  Category cat;
};

// Classes as llama.cpp's expressions see them. Where it runs std::regex over its reduced text,
// ASCII characters keep their identity and the rest become one placeholder per category
// (whitespace first), so \p{S} there misses '~' (its ASCII list for symbols leaves it out).
bool IsLetter(const Char& c) { return c.cls == CharClass::kLetter; }
bool IsNumber(const Char& c) { return c.cls == CharClass::kNumber; }
bool IsSpace(const Char& c) { return c.cls == CharClass::kSpace; }
bool IsOther(const Char& c) { return c.cls == CharClass::kOther; }  // [^\s\p{L}\p{N}]
bool IsPunct(const Char& c) { return IsOther(c) && c.cat == Category::kPunctuation; }
bool IsSymbol(const Char& c) { return IsOther(c) && c.cat == Category::kSymbol && c.cp != '~'; }
bool IsMark(const Char& c) { return IsOther(c) && c.cat == Category::kMark; }
bool IsNewline(const Char& c) { return c.cp == '\r' || c.cp == '\n'; }
bool IsAsciiLetter(const Char& c) { return (c.cp | 0x20) >= 'a' && (c.cp | 0x20) <= 'z'; }
bool IsAsciiDigit(const Char& c) { return c.cp >= '0' && c.cp <= '9'; }
bool IsAsciiPunct(const Char& c) {
  return (c.cp >= 0x21 && c.cp <= 0x2F) || (c.cp >= 0x3A && c.cp <= 0x40) ||
         (c.cp >= 0x5B && c.cp <= 0x60) || (c.cp >= 0x7B && c.cp <= 0x7E);
}
// Where llama.cpp matches code point ranges with std::wregex, non-ASCII whitespace has become
// U+000B first, so it is in no range above U+007F.
bool InWide(const Char& c, uint32_t lo, uint32_t hi) {
  return c.cp >= lo && c.cp <= hi && !(c.cp > 0x7F && IsSpace(c));
}

// The text as characters.
std::vector<Char> Decode(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char u = DecodeUtf8(text, pos);
    Char c{pos, u.valid ? u.cp : kNoChar, ClassifyChar(u), Category::kNone};
    if (c.cls == CharClass::kOther && u.valid) {
      if (IsUnicodePunctuation(u.cp)) {
        c.cat = Category::kPunctuation;
      } else if (IsUnicodeSymbol(u.cp)) {
        c.cat = Category::kSymbol;
      } else if (IsUnicodeMark(u.cp)) {
        c.cat = Category::kMark;
      }
    }
    chars.push_back(c);
    pos += static_cast<size_t>(u.len);
  }
  chars.push_back({text.size(), kNoChar, CharClass::kOther, Category::kNone});
  return chars;
}

// One piece being split: characters [.., end) of the text; nothing past `end` is visible, as
// llama.cpp runs each expression on each piece alone.
class Span {
 public:
  Span(const std::vector<Char>& chars, size_t end) : chars_(chars), end_(end) {}
  size_t end() const { return end_; }
  uint32_t cp(size_t i) const { return i < end_ ? chars_[i].cp : kNoChar; }
  template <typename Pred>
  bool Is(size_t i, Pred pred) const {
    return i < end_ && pred(chars_[i]);
  }
  // End of the run of characters satisfying `pred` from i.
  template <typename Pred>
  size_t Run(size_t i, Pred pred) const {
    while (Is(i, pred)) ++i;
    return i;
  }

 private:
  const std::vector<Char>& chars_;
  size_t end_;
};

// An expression: the length in characters of its match at i (0: none there).
using Matcher = std::function<size_t(const Span&, size_t)>;

uint32_t AsciiLower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

// 's 't 're 've 'm 'll 'd
size_t MatchContraction(const Span& s, size_t i, bool ignore_case) {
  if (s.cp(i) != '\'') return 0;
  auto at = [&](size_t k) { return ignore_case ? AsciiLower(s.cp(i + k)) : s.cp(i + k); };
  const uint32_t c1 = at(1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  const uint32_t c2 = at(2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// \s+(?!\S) then \s+: a whitespace run, leaving its last character to the next piece when a
// non-space follows (unless the run is a single character).
size_t MatchSpaceRun(const Span& s, size_t i) {
  const size_t end = s.Run(i, IsSpace);
  if (end < s.end() && end - i > 1) return end - i - 1;
  return end - i;
}

// \s*[\r\n]+|\s+(?!\S)|\s+ at a whitespace character.
size_t MatchSpacesAndNewlines(const Span& s, size_t i) {
  const size_t end = s.Run(i, IsSpace);
  for (size_t k = end; k > i; --k) {
    if (s.Is(k - 1, IsNewline)) return k - i;
  }
  return MatchSpaceRun(s, i);
}

// GPT-2's expression as llama.cpp's hand-written version runs it: always matches.
size_t MatchGpt2(const Span& s, size_t i) {
  if (size_t n = MatchContraction(s, i, /*ignore_case=*/false)) return n;
  const size_t j = s.cp(i) == ' ' ? i + 1 : i;  // optional leading space
  if (s.Is(j, IsLetter)) return s.Run(j, IsLetter) - i;
  if (s.Is(j, IsNumber)) return s.Run(j, IsNumber) - i;
  if (s.Is(j, IsOther)) return s.Run(j, IsOther) - i;
  if (s.Is(i, IsSpace)) return MatchSpaceRun(s, i);
  return 1;
}

// Llama 3's expression (max_digits 3) and Qwen2's (1).
size_t MatchLlama3(const Span& s, size_t i, size_t max_digits) {
  if (size_t n = MatchContraction(s, i, /*ignore_case=*/true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (s.Is(i, IsLetter)) return s.Run(i, IsLetter) - i;
  if (!s.Is(i, IsNumber) && !s.Is(i, IsNewline) && s.Is(i + 1, IsLetter)) {
    return s.Run(i + 1, IsLetter) - i;
  }
  // \p{N}{1,max_digits}
  if (s.Is(i, IsNumber)) {
    size_t n = 0;
    while (n < max_digits && s.Is(i + n, IsNumber)) ++n;
    return n;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t j = s.cp(i) == ' ' ? i + 1 : i;
  if (s.Is(j, IsOther)) return s.Run(s.Run(j, IsOther), IsNewline) - i;
  if (s.Is(i, IsSpace)) return MatchSpacesAndNewlines(s, i);
  return 1;
}

// tekken: [^\r\n\p{L}\p{N}]?U*V+ | [^\r\n\p{L}\p{N}]?U+V* | \p{N} | ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
// | whitespace as Llama 3, where (as llama.cpp rewrote the expression for std::regex) U is a
// letter other than a-z and V a letter other than A-Z: a non-ASCII letter is both.
size_t MatchTekken(const Span& s, size_t i) {
  const auto upper = [](const Char& c) { return IsLetter(c) && !(c.cp >= 'a' && c.cp <= 'z'); };
  const auto lower = [](const Char& c) { return IsLetter(c) && !(c.cp >= 'A' && c.cp <= 'Z'); };
  const bool prefix = i < s.end() && !s.Is(i, IsNewline) && !s.Is(i, IsLetter) &&
                      !s.Is(i, IsNumber) && s.Is(i + 1, IsLetter);
  const size_t j = prefix ? i + 1 : i;
  if (s.Is(j, IsLetter)) {
    // U*V+: the longest run of U after which a V starts (backtracking into the run).
    const size_t r = s.Run(j, upper);
    if (s.Is(r, lower)) return s.Run(r, lower) - i;
    for (size_t t = r; t > j; --t) {
      if (s.Is(t - 1, lower)) return s.Run(t - 1, lower) - i;
    }
    // U+V*: the run of U was all ASCII capitals not followed by a V.
    return r - i;
  }
  if (s.Is(i, IsNumber)) return 1;
  const size_t k = s.cp(i) == ' ' ? i + 1 : i;
  if (s.Is(k, IsOther)) {
    return s.Run(s.Run(k, IsOther), [](const Char& c) { return IsNewline(c) || c.cp == '/'; }) - i;
  }
  if (s.Is(i, IsSpace)) return MatchSpacesAndNewlines(s, i);
  return 0;
}

// deepseek-v3's last expression.
size_t MatchDeepseekV3(const Span& s, size_t i) {
  // [!-/:-@[-`{-~][A-Za-z]+
  if (s.Is(i, IsAsciiPunct) && s.Is(i + 1, IsAsciiLetter)) return s.Run(i + 1, IsAsciiLetter) - i;
  // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
  const auto letter_or_mark = [](const Char& c) { return IsLetter(c) || IsMark(c); };
  const auto prefix = [](const Char& c) {
    return !IsNewline(c) && !IsLetter(c) && !IsPunct(c) && !IsSymbol(c);
  };
  if (s.Is(i, prefix) && s.Is(i + 1, letter_or_mark)) return s.Run(i + 1, letter_or_mark) - i;
  if (s.Is(i, letter_or_mark)) return s.Run(i, letter_or_mark) - i;
  // ' ?[\p{P}\p{S}]+[\r\n]*'
  const auto punct_or_symbol = [](const Char& c) { return IsPunct(c) || IsSymbol(c); };
  const size_t j = s.cp(i) == ' ' ? i + 1 : i;
  if (s.Is(j, punct_or_symbol)) return s.Run(s.Run(j, punct_or_symbol), IsNewline) - i;
  if (s.Is(i, IsSpace)) return MatchSpacesAndNewlines(s, i);
  return 0;
}

// X: one character of the class.
template <typename Pred>
Matcher One(Pred pred) {
  return [pred](const Span& s, size_t i) -> size_t { return s.Is(i, pred) ? 1 : 0; };
}
// X+
template <typename Pred>
Matcher Many(Pred pred) {
  return [pred](const Span& s, size_t i) -> size_t { return s.Run(i, pred) - i; };
}
// X{1,3}
template <typename Pred>
Matcher UpToThree(Pred pred) {
  return [pred](const Span& s, size_t i) -> size_t {
    size_t n = 0;
    while (n < 3 && s.Is(i + n, pred)) ++n;
    return n;
  };
}
// \s?X+
template <typename Pred>
Matcher SpaceThenMany(Pred pred) {
  return [pred](const Span& s, size_t i) -> size_t {
    const size_t j = s.Is(i, IsSpace) && s.Is(i + 1, pred) ? i + 1 : i;
    return s.Is(j, pred) ? s.Run(j, pred) - i : 0;
  };
}

bool InRanges(std::span<const unicode_internal::CodepointRange> ranges, const Char& c) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), c.cp,
                             [](uint32_t v, const auto& r) { return v < r.lo; });
  return it != ranges.begin() && c.cp <= std::prev(it)->hi && !(c.cp > 0x7F && IsSpace(c));
}

// deepseek-llm's letters: the class its expression spells out (A-Za-z, µ, Latin, IPA, Greek,
// Cyrillic, Armenian, Georgian, Cherokee, letterlike symbols, Glagolitic, Coptic, fullwidth,
// Deseret, Osage, Old Hungarian, Warang Citi, Adlam...).
constexpr unicode_internal::CodepointRange kDeepseekLlmLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
    {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},
    {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
// deepseek-llm's punctuation: !-/ :-~ (so also ASCII letters), fullwidth ！-／ ：-～, ‘-‟, 　-。
constexpr unicode_internal::CodepointRange kDeepseekLlmPunct[] = {
    {0x21, 0x2F},     {0x3A, 0x7E},     {0x2018, 0x201F},
    {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};
// CJK, Hangul (deepseek-coder and deepseek-llm): U+4E00-U+9FA5, U+0800-U+4E00, U+AC00-U+D7FF.
bool IsDeepseekCjk(const Char& c) { return InWide(c, 0x800, 0x9FA5) || InWide(c, 0xAC00, 0xD7FF); }
// CJK and kana (deepseek-v3): U+4E00-U+9FA5, U+3040-U+309F, U+30A0-U+30FF.
bool IsDeepseekV3Cjk(const Char& c) {
  return InWide(c, 0x4E00, 0x9FA5) || InWide(c, 0x3040, 0x30FF);
}
// [\p{P}$+<=>^~|] (the default list).
bool IsDefaultPunct(const Char& c) {
  switch (c.cp) {
    case '$':
    case '+':
    case '<':
    case '=':
    case '>':
    case '^':
    case '~':
    case '|':
      return true;
    default:
      return IsPunct(c);
  }
}
// [\p{P}$+<=>^~|`] (falcon).
bool IsFalconPunct(const Char& c) { return c.cp == '`' || IsDefaultPunct(c); }
// [^(\s|.,!?…。，、।۔،)] (bloom, viking).
bool IsBloomWordChar(const Char& c) {
  if (IsSpace(c)) return false;
  switch (c.cp) {
    case '(':
    case '|':
    case '.':
    case ',':
    case '!':
    case '?':
    case ')':
    case 0x2026:
    case 0x3002:
    case 0xFF0C:
    case 0x3001:
    case 0x0964:
    case 0x06D4:
    case 0x060C:
      return false;
    default:
      return true;
  }
}

// ' ?[^(\s|.,!?…。，、।۔،)]+'
size_t MatchBloom(const Span& s, size_t i) {
  const size_t j = s.cp(i) == ' ' && s.Is(i + 1, IsBloomWordChar) ? i + 1 : i;
  return s.Run(j, IsBloomWordChar) - i;
}

// [0-9][0-9][0-9]
size_t ThreeAsciiDigits(const Span& s, size_t i) {
  return s.Is(i, IsAsciiDigit) && s.Is(i + 1, IsAsciiDigit) && s.Is(i + 2, IsAsciiDigit) ? 3 : 0;
}

// `literal` at i (ASCII).
bool StartsWith(const Span& s, size_t i, std::string_view literal) {
  for (size_t k = 0; k < literal.size(); ++k) {
    if (s.cp(i + k) != static_cast<unsigned char>(literal[k])) return false;
  }
  return true;
}

// <sentinel:[0-9]+>
size_t MatchSentinel(const Span& s, size_t i) {
  constexpr std::string_view kOpen = "<sentinel:";
  if (!StartsWith(s, i, kOpen)) return 0;
  const size_t digits = s.Run(i + kOpen.size(), IsAsciiDigit);
  if (digits == i + kOpen.size() || s.cp(digits) != '>') return 0;
  return digits + 1 - i;
}

// (IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z
size_t MatchImageToken(const Span& s, size_t i) {
  if (!StartsWith(s, i, "IMGIMG")) return 0;
  size_t n = 0;
  while (n < 4 && s.cp(i + 6 + n) >= 'A' && s.cp(i + 6 + n) <= 'I') ++n;
  return n > 0 && s.cp(i + 6 + n) == 'Z' ? 6 + n + 1 : 0;
}

// ([\t\n]|    |  )
size_t MatchChameleonSpaces(const Span& s, size_t i) {
  if (s.cp(i) == '\t' || s.cp(i) == '\n') return 1;
  if (StartsWith(s, i, "    ")) return 4;
  return StartsWith(s, i, "  ") ? 2 : 0;
}

// [\p{P}!-/:-@\[-`{-~]
bool IsChameleonPunct(const Char& c) { return IsPunct(c) || IsAsciiPunct(c); }

// \s+$ : the whitespace that ends the piece. Remembers the run it scanned last, so a long run
// of whitespace inside a piece costs one scan.
class TrailingSpace {
 public:
  size_t operator()(const Span& s, size_t i) {
    if (!s.Is(i, IsSpace)) return 0;
    if (!(i >= from_ && i < to_ && s.end() == end_)) {
      from_ = i;
      to_ = s.Run(i, IsSpace);
      end_ = s.end();
    }
    return to_ == s.end() ? to_ - i : 0;
  }

 private:
  size_t from_ = 0, to_ = 0, end_ = 0;
};

struct Piece {
  size_t begin, end;  // characters
};

// Splits each piece at the matches of `match` (searched left to right, each search starting
// where the last match ended); the text between two matches stays one piece.
std::vector<Piece> SplitByMatches(const std::vector<Char>& chars, const std::vector<Piece>& pieces,
                                  const Matcher& match) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (const Piece& p : pieces) {
    const Span s(chars, p.end);
    size_t gap = p.begin;
    for (size_t i = p.begin; i < p.end;) {
      const size_t n = std::min(match(s, i), p.end - i);
      if (n == 0) {
        ++i;
        continue;
      }
      if (i > gap) out.push_back({gap, i});
      out.push_back({i, i + n});
      i += n;
      gap = i;
    }
    if (gap < p.end) out.push_back({gap, p.end});
  }
  return out;
}

// Each family's expressions, in the order llama.cpp applies them.
std::vector<Matcher> Expressions(PreTokenizerKind kind) {
  const Matcher gpt2 = MatchGpt2;
  const Matcher newline = One(IsNewline);
  switch (kind) {
    case PreTokenizerKind::kGpt2:
      return {gpt2};
    case PreTokenizerKind::kLlama3:
      return {[](const Span& s, size_t i) { return MatchLlama3(s, i, 3); }};
    case PreTokenizerKind::kQwen2:
      return {[](const Span& s, size_t i) { return MatchLlama3(s, i, 1); }};
    case PreTokenizerKind::kDeepseekCoder:
      return {newline, SpaceThenMany(IsLetter), SpaceThenMany(IsPunct), Many(IsDeepseekCjk),
              One(IsNumber)};
    case PreTokenizerKind::kDeepseekLlm:
      return {newline,
              SpaceThenMany([](const Char& c) { return InRanges(kDeepseekLlmLetters, c); }),
              SpaceThenMany([](const Char& c) { return InRanges(kDeepseekLlmPunct, c); }),
              TrailingSpace(),
              Many(IsDeepseekCjk),
              Many(IsNumber)};
    case PreTokenizerKind::kDeepseekV3:
      return {UpToThree(IsNumber), Many(IsDeepseekV3Cjk), MatchDeepseekV3};
    case PreTokenizerKind::kFalcon:
      return {Many(IsFalconPunct), gpt2, ThreeAsciiDigits};
    case PreTokenizerKind::kStarcoder:
      return {One(IsNumber), gpt2};
    case PreTokenizerKind::kDefault:
      return {Many(IsDefaultPunct), gpt2, Many(IsNumber), ThreeAsciiDigits};
    case PreTokenizerKind::kBloom:
      return {MatchBloom};
    case PreTokenizerKind::kViking:
      return {MatchBloom, One(IsNumber)};
    case PreTokenizerKind::kTekken:
      return {MatchTekken};
    case PreTokenizerKind::kChameleon:
      return {MatchSentinel, MatchImageToken,       MatchChameleonSpaces,
              One(IsNumber), One(IsChameleonPunct), gpt2};
  }
  return {gpt2};
}

}  // namespace

Result<PreTokenizerKind> PreTokenizerFromName(std::string_view pre) {
  for (const KindNames& k : kNames) {
    for (std::string_view name : k.names) {
      if (!name.empty() && name == pre) return k.kind;
    }
  }
  return Status::Error("unsupported tokenizer.ggml.pre \"" + std::string(pre) +
                       "\"; supported: " + SupportedPreTokenizerNames());
}

std::string SupportedPreTokenizerNames() {
  std::string out;
  for (const KindNames& k : kNames) {
    for (std::string_view name : k.names) {
      if (name.empty()) continue;
      if (!out.empty()) out += ", ";
      out += name;
    }
  }
  return out;
}

bool PreTokenizerIgnoresMerges(std::string_view pre) {
  return pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3" || pre == "falcon3" ||
         pre == "tekken";
}

bool PreTokenizerAddsBos(std::string_view pre) {
  return PreTokenizerIgnoresMerges(pre) || pre == "chameleon";
}

bool PreTokenizerNormalizesNfc(std::string_view pre) {
  return pre == "qwen2" || pre == "deepseek-r1-qwen";
}

std::vector<std::string_view> PreTokenize(PreTokenizerKind kind, std::string_view text) {
  const std::vector<Char> chars = Decode(text);
  const size_t n = chars.size() - 1;
  std::vector<Piece> pieces;
  if (n > 0) pieces.push_back({0, n});
  for (const Matcher& m : Expressions(kind)) pieces = SplitByMatches(chars, pieces, m);
  std::vector<std::string_view> out;
  out.reserve(pieces.size());
  for (const Piece& p : pieces) {
    const size_t begin = chars[p.begin].offset;
    out.push_back(text.substr(begin, chars[p.end].offset - begin));
  }
  return out;
}

}  // namespace primekv
