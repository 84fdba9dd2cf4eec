#include "tokenizer/pretokenizer.h"

#include <array>
#include <cstddef>

#include "tokenizer/unicode.h"

namespace primekv {
namespace {

// The tokenizer.ggml.pre names of each split ("" pads), in the order messages list them.
struct KindNames {
  PreTokenizerKind kind;
  std::array<std::string_view, 4> names;
};
constexpr KindNames kNames[] = {
    {PreTokenizerKind::kGpt2, {"default", "gpt2", "gpt-2"}},
    {PreTokenizerKind::kLlama3, {"llama3", "llama-bpe", "llama-v3", "smaug-bpe"}},
    {PreTokenizerKind::kQwen2, {"qwen2", "deepseek-r1-qwen"}},
    {PreTokenizerKind::kDeepseekCoder, {"deepseek-coder"}},
};

struct Char {
  size_t offset;
  uint32_t cp;  // raw byte for invalid UTF-8 (classified kOther, so never matched as a letter)
  CharClass cls;
};

// The text as characters, with a sentinel at the end so look-ahead needs no bounds checks.
class CharSeq {
 public:
  explicit CharSeq(std::string_view text) {
    for (size_t pos = 0; pos < text.size();) {
      const Utf8Char c = DecodeUtf8(text, pos);
      chars_.push_back({pos, c.valid ? c.cp : 0xFFFFFFFFu, ClassifyChar(c)});
      pos += static_cast<size_t>(c.len);
    }
    size_ = chars_.size();
    chars_.push_back({text.size(), 0xFFFFFFFFu, CharClass::kOther});
  }
  size_t size() const { return size_; }
  const Char& operator[](size_t i) const { return chars_[i < size_ ? i : size_]; }
  bool Is(size_t i, CharClass cls) const { return i < size_ && chars_[i].cls == cls; }
  bool IsCp(size_t i, uint32_t cp) const { return i < size_ && chars_[i].cp == cp; }
  bool IsNewline(size_t i) const { return IsCp(i, '\r') || IsCp(i, '\n'); }
  // End of the run of `cls` characters starting at i.
  size_t RunEnd(size_t i, CharClass cls) const {
    while (Is(i, cls)) ++i;
    return i;
  }

 private:
  std::vector<Char> chars_;
  size_t size_ = 0;
};

uint32_t AsciiLower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

// 's 't 're 've 'm 'll 'd; returns the match length in characters or 0.
size_t MatchContraction(const CharSeq& s, size_t i, bool ignore_case) {
  if (!s.IsCp(i, '\'')) return 0;
  auto at = [&](size_t k) {
    const uint32_t cp = s[i + k].cp;
    return ignore_case ? AsciiLower(cp) : cp;
  };
  if (i + 1 >= s.size()) return 0;
  const uint32_t c1 = at(1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (i + 2 >= s.size()) return 0;
  const uint32_t c2 = at(2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// \s+(?!\S) then \s+: a whitespace run, leaving its last character to the next piece when a
// non-space follows (unless the run is a single character).
size_t MatchSpaceRun(const CharSeq& s, size_t i) {
  const size_t end = s.RunEnd(i, CharClass::kSpace);
  if (end < s.size() && end - i > 1) return end - i - 1;
  return end - i;
}

size_t MatchGpt2(const CharSeq& s, size_t i) {
  if (size_t n = MatchContraction(s, i, /*ignore_case=*/false)) return n;
  const size_t j = s.IsCp(i, ' ') ? i + 1 : i;  // optional leading space
  if (s.Is(j, CharClass::kLetter)) return s.RunEnd(j, CharClass::kLetter) - i;
  if (s.Is(j, CharClass::kNumber)) return s.RunEnd(j, CharClass::kNumber) - i;
  if (s.Is(j, CharClass::kOther)) return s.RunEnd(j, CharClass::kOther) - i;
  if (s.Is(i, CharClass::kSpace)) return MatchSpaceRun(s, i);
  return 1;
}

size_t MatchLlama3(const CharSeq& s, size_t i, size_t max_digits) {
  if (size_t n = MatchContraction(s, i, /*ignore_case=*/true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  const Char& c = s[i];
  if (c.cls == CharClass::kLetter) return s.RunEnd(i, CharClass::kLetter) - i;
  if (c.cls != CharClass::kNumber && !s.IsNewline(i) && s.Is(i + 1, CharClass::kLetter)) {
    return s.RunEnd(i + 1, CharClass::kLetter) - i;
  }
  // \p{N}{1,max_digits}
  if (c.cls == CharClass::kNumber) {
    size_t n = 0;
    while (n < max_digits && s.Is(i + n, CharClass::kNumber)) ++n;
    return n;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t j = s.IsCp(i, ' ') ? i + 1 : i;
  if (s.Is(j, CharClass::kOther)) {
    size_t end = s.RunEnd(j, CharClass::kOther);
    while (s.IsNewline(end)) ++end;
    return end - i;
  }
  if (c.cls == CharClass::kSpace) {
    // \s*[\r\n]+ : through the last newline of the whitespace run.
    const size_t end = s.RunEnd(i, CharClass::kSpace);
    for (size_t k = end; k > i; --k) {
      if (s.IsNewline(k - 1)) return k - i;
    }
    return MatchSpaceRun(s, i);
  }
  return 1;
}

// deepseek-coder, as llama.cpp splits it: five expressions applied in turn, each splitting the
// pieces the previous one left ([\r\n], \s?\p{L}+, \s?\p{P}+, [\u4E00-\u9FA5\u0800-\u4E00
// \uAC00-\uD7FF]+, \p{N}); the text between two matches stays one piece.
struct Piece {
  size_t begin, end;  // characters
};

// The end of the run from i (< end) of characters that satisfy `is`.
template <typename Is>
size_t RunWithin(const CharSeq& s, size_t i, size_t end, Is is) {
  while (i < end && is(s[i])) ++i;
  return i;
}

// `match(i, end)` is the length of the leftmost match at i within the piece (0: none).
template <typename Match>
std::vector<Piece> SplitByMatches(const std::vector<Piece>& pieces, Match match) {
  std::vector<Piece> out;
  for (const Piece& p : pieces) {
    size_t gap = p.begin;
    for (size_t i = p.begin; i < p.end;) {
      const size_t n = match(i, p.end);
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

std::vector<Piece> SplitDeepseekCoder(const CharSeq& s) {
  const auto is_letter = [](const Char& c) { return c.cls == CharClass::kLetter; };
  const auto is_punct = [](const Char& c) {
    return c.cls == CharClass::kOther && IsUnicodePunctuation(c.cp);
  };
  const auto is_cjk = [](const Char& c) {
    return (c.cp >= 0x800 && c.cp <= 0x9FA5) || (c.cp >= 0xAC00 && c.cp <= 0xD7FF);
  };
  // \s?X+ : an optional whitespace character, then a run of X.
  const auto space_then = [&s](auto is) {
    return [&s, is](size_t i, size_t end) -> size_t {
      const size_t j = s.Is(i, CharClass::kSpace) && i + 1 < end && is(s[i + 1]) ? i + 1 : i;
      return j < end && is(s[j]) ? RunWithin(s, j, end, is) - i : 0;
    };
  };
  std::vector<Piece> pieces{{0, s.size()}};
  pieces =
      SplitByMatches(pieces, [&s](size_t i, size_t) -> size_t { return s.IsNewline(i) ? 1 : 0; });
  pieces = SplitByMatches(pieces, space_then(is_letter));
  pieces = SplitByMatches(pieces, space_then(is_punct));
  pieces = SplitByMatches(pieces, [&](size_t i, size_t end) {
    return is_cjk(s[i]) ? RunWithin(s, i, end, is_cjk) - i : 0;
  });
  return SplitByMatches(
      pieces, [&s](size_t i, size_t) -> size_t { return s.Is(i, CharClass::kNumber) ? 1 : 0; });
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
  return pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3";
}

bool PreTokenizerNormalizesNfc(std::string_view pre) {
  return pre == "qwen2" || pre == "deepseek-r1-qwen";
}

std::vector<std::string_view> PreTokenize(PreTokenizerKind kind, std::string_view text) {
  const CharSeq s(text);
  std::vector<std::string_view> out;
  if (kind == PreTokenizerKind::kDeepseekCoder) {
    for (const Piece& p : SplitDeepseekCoder(s)) {
      const size_t begin = s[p.begin].offset;
      out.push_back(text.substr(begin, s[p.end].offset - begin));
    }
    return out;
  }
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    switch (kind) {
      case PreTokenizerKind::kGpt2:
        n = MatchGpt2(s, i);
        break;
      case PreTokenizerKind::kLlama3:
        n = MatchLlama3(s, i, 3);
        break;
      case PreTokenizerKind::kQwen2:
        n = MatchLlama3(s, i, 1);
        break;
      case PreTokenizerKind::kDeepseekCoder:
        break;  // split above
    }
    if (n == 0) n = 1;
    const size_t begin = s[i].offset;
    out.push_back(text.substr(begin, s[i + n].offset - begin));
    i += n;
  }
  return out;
}

}  // namespace primekv
