// Metrics of RULER (string match), LongBench (qa_f1, rouge_l, classification, retrieval, count,
// code_sim) and exact integer answers, following the reference scorers' semantics, including
// their quirks, so scores compare with published numbers.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "eval/eval_internal.h"
#include "primekv/eval/eval.h"

namespace primekv {
namespace {

using eval_internal::AsciiLower;
using eval_internal::DigitRuns;
using eval_internal::PySplit;
using eval_internal::PyStrip;

// RULER's post-processing: trim, then delete control characters.
std::string CleanPrediction(std::string_view pred) {
  std::string out;
  for (char c : PyStrip(pred)) {
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return AsciiLower(out);
}

bool IsWordByte(unsigned char c) {
  // Python's \w: ASCII alphanumerics, '_', and (approximately) every non-ASCII character.
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         c >= 0x80;
}

bool IsAsciiPunct(char c) {
  static constexpr std::string_view kPunct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
  return kPunct.find(c) != std::string_view::npos;
}

// SQuAD normalization: lowercase, drop punctuation, replace \b(a|an|the)\b by a space, split.
std::vector<std::string> NormalizeAnswerTokens(std::string_view s) {
  std::string no_punct;
  for (char c : AsciiLower(s)) {
    if (!IsAsciiPunct(c)) no_punct += c;
  }
  const std::string_view t = no_punct;
  std::string out;
  size_t i = 0;
  while (i < t.size()) {
    bool matched = false;
    if (i == 0 || !IsWordByte(static_cast<unsigned char>(t[i - 1]))) {
      // The regex tries "a", then "an", then "the", each needing a word boundary after it.
      for (std::string_view article : {"a", "an", "the"}) {
        const size_t end = i + article.size();
        if (t.substr(i, article.size()) == article &&
            (end == t.size() || !IsWordByte(static_cast<unsigned char>(t[end])))) {
          out += ' ';
          i = end;
          matched = true;
          break;
        }
      }
    }
    if (!matched) out += t[i++];
  }
  std::vector<std::string> tokens;
  for (std::string_view w : PySplit(out)) tokens.emplace_back(w);
  return tokens;
}

double TokenF1(const std::vector<std::string>& pred, const std::vector<std::string>& gt) {
  std::map<std::string, int> counts;
  for (const std::string& w : gt) ++counts[w];
  int same = 0;
  for (const std::string& w : pred) {
    auto it = counts.find(w);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  if (same == 0) return 0.0;
  const double precision = static_cast<double>(same) / static_cast<double>(pred.size());
  const double recall = static_cast<double>(same) / static_cast<double>(gt.size());
  return 2 * precision * recall / (precision + recall);
}

// The rouge package's sentences: split on '.', drop empty pieces, collapse whitespace.
std::vector<std::string> RougeSentences(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t dot = text.find('.', start);
    const std::string_view piece =
        text.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (!piece.empty()) {
      std::string sentence;
      for (std::string_view w : PySplit(piece)) {
        if (!sentence.empty()) sentence += ' ';
        sentence += w;
      }
      out.push_back(std::move(sentence));
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return out;
}

// sentence.split(" "): an empty sentence is one empty word.
std::vector<std::string> SplitOnSpace(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t sp = s.find(' ', start);
    out.push_back(s.substr(start, sp == std::string::npos ? std::string::npos : sp - start));
    if (sp == std::string::npos) break;
    start = sp + 1;
  }
  return out;
}

// The words of one LCS of x and y, reconstructed the way the rouge package walks its table.
std::vector<std::string> LcsWords(const std::vector<std::string>& x,
                                  const std::vector<std::string>& y) {
  const size_t n = x.size(), m = y.size();
  std::vector<int> table((n + 1) * (m + 1), 0);
  const auto at = [&](size_t i, size_t j) -> int& { return table[i * (m + 1) + j]; };
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      at(i, j) = x[i - 1] == y[j - 1] ? at(i - 1, j - 1) + 1 : std::max(at(i - 1, j), at(i, j - 1));
    }
  }
  std::vector<std::string> out;
  size_t i = n, j = m;
  while (i > 0 && j > 0) {
    if (x[i - 1] == y[j - 1]) {
      out.push_back(x[i - 1]);
      --i;
      --j;
    } else if (at(i - 1, j) > at(i, j - 1)) {
      --i;
    } else {
      --j;
    }
  }
  return out;
}

double RougeLOne(std::string_view pred, std::string_view ref) {
  const std::vector<std::string> hyp = RougeSentences(pred);
  const std::vector<std::string> refs = RougeSentences(ref);
  if (hyp.empty() || refs.empty()) return 0.0;  // the package raises; LongBench scores 0
  std::vector<std::vector<std::string>> hyp_words, ref_words;
  std::set<std::string> hyp_unique, ref_unique;
  for (const std::string& s : hyp) {
    hyp_words.push_back(SplitOnSpace(s));
    hyp_unique.insert(hyp_words.back().begin(), hyp_words.back().end());
  }
  for (const std::string& s : refs) {
    ref_words.push_back(SplitOnSpace(s));
    ref_unique.insert(ref_words.back().begin(), ref_words.back().end());
  }
  std::set<std::string> lcs_union;
  for (const auto& r : ref_words) {
    for (const auto& h : hyp_words) {
      for (std::string& w : LcsWords(r, h)) lcs_union.insert(std::move(w));
    }
  }
  const double llcs = static_cast<double>(lcs_union.size());
  const double recall = llcs / static_cast<double>(ref_unique.size());
  const double precision = llcs / static_cast<double>(hyp_unique.size());
  return 2.0 * (precision * recall / (precision + recall + 1e-8));
}

double DigitRunShare(std::string_view pred, std::string_view target) {
  const std::vector<std::string_view> runs = DigitRuns(pred);
  if (runs.empty()) return 0.0;
  int right = 0;
  for (std::string_view r : runs) right += r == target ? 1 : 0;
  return static_cast<double>(right) / static_cast<double>(runs.size());
}

// re.findall(marker + r"(\d+)", gt)[0], or nullopt.
std::optional<std::string_view> FirstNumberAfter(std::string_view gt, std::string_view marker) {
  for (size_t pos = gt.find(marker); pos != std::string_view::npos;
       pos = gt.find(marker, pos + 1)) {
    const size_t start = pos + marker.size();
    size_t end = start;
    while (end < gt.size() && gt[end] >= '0' && gt[end] <= '9') ++end;
    if (end > start) return gt.substr(start, end - start);
  }
  return std::nullopt;
}

// UTF-8 to code points; a stray byte stands for itself (offset past the Unicode range).
std::vector<char32_t> CodePoints(std::string_view s) {
  std::vector<char32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + static_cast<size_t>(len) <= s.size();
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; ok && k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      ok = (cc >> 6) == 2;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok) {
      out.push_back(cp);
      i += static_cast<size_t>(len);
    } else {
      out.push_back(0x110000 + c);
      ++i;
    }
  }
  return out;
}

size_t LcsLength(const std::vector<char32_t>& a, const std::vector<char32_t>& b) {
  std::vector<size_t> prev(b.size() + 1, 0), cur(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Python's round(): halves go to the even neighbour.
double RoundHalfEven(double v) {
  const double floor_v = std::floor(v);
  const double diff = v - floor_v;
  if (diff > 0.5) return floor_v + 1;
  if (diff < 0.5) return floor_v;
  return std::fmod(floor_v, 2.0) == 0.0 ? floor_v : floor_v + 1;
}

// fuzzywuzzy's fuzz.ratio with python-Levenshtein: 100 for equal strings, 0 if one is empty,
// else round(100 * (|a| + |b| - indel distance) / (|a| + |b|)).
int FuzzRatio(std::string_view a, std::string_view b) {
  if (a == b) return 100;
  if (a.empty() || b.empty()) return 0;
  const std::vector<char32_t> ca = CodePoints(a), cb = CodePoints(b);
  const size_t lensum = ca.size() + cb.size();
  const size_t indel = lensum - 2 * LcsLength(ca, cb);
  const double ratio = static_cast<double>(lensum - indel) / static_cast<double>(lensum);
  return static_cast<int>(RoundHalfEven(100 * ratio));
}

struct NumberToken {
  std::optional<long long> value;  // set when the number is an integer that fits
  size_t end = 0;
};

// Parses a number starting at s[i] (a digit): digits with ",ddd" groups and an optional
// fraction; integer-valued when the fraction is absent or all zeros.
NumberToken ParseNumberAt(std::string_view s, size_t i, bool negative) {
  std::string digits;
  size_t j = i;
  while (j < s.size() && s[j] >= '0' && s[j] <= '9') digits += s[j++];
  // Thousands groups: a comma followed by exactly three digits.
  while (j < s.size() && s[j] == ',') {
    size_t k = j + 1;
    while (k < s.size() && k < j + 4 && s[k] >= '0' && s[k] <= '9') ++k;
    if (k != j + 4 || (k < s.size() && s[k] >= '0' && s[k] <= '9')) break;
    digits.append(s.substr(j + 1, 3));
    j = k;
  }
  bool integral = true;
  if (j + 1 < s.size() && s[j] == '.' && s[j + 1] >= '0' && s[j + 1] <= '9') {
    ++j;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') integral &= s[j++] == '0';
  }
  NumberToken token;
  token.end = j;
  if (!integral) return token;
  long long v = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return token;
  token.value = negative ? -v : v;
  return token;
}

// Every number of `s`, in order, with its integer value if it has one.
std::vector<NumberToken> Numbers(std::string_view s) {
  std::vector<NumberToken> out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] >= '0' && s[i] <= '9') {
      const bool negative =
          i > 0 && s[i - 1] == '-' && (i < 2 || !IsWordByte(static_cast<unsigned char>(s[i - 2])));
      NumberToken t = ParseNumberAt(s, i, negative);
      i = t.end;
      out.push_back(t);
    } else {
      ++i;
    }
  }
  return out;
}

// The integer a \boxed{} holds: its only number once LaTeX spacing commands, text wrappers
// and '$' are dropped.
std::optional<long long> BoxedInteger(std::string_view content) {
  std::string cleaned;
  for (size_t i = 0; i < content.size(); ++i) {
    const char c = content[i];
    if (c == '\\') {
      size_t j = i + 1;
      while (j < content.size() && ((content[j] >= 'a' && content[j] <= 'z') ||
                                    (content[j] >= 'A' && content[j] <= 'Z'))) {
        ++j;
      }
      const std::string_view command = content.substr(i + 1, j - i - 1);
      if (command.empty() && j < content.size()) ++j;  // "\," "\!" "\;" "\ "
      if (command.empty() || command == "text" || command == "textbf" || command == "mathrm" ||
          command == "mathbf" || command == "displaystyle") {
        i = j - 1;
        continue;
      }
      cleaned.append(content.substr(i, j - i));
      i = j - 1;
      continue;
    }
    if (c == '$') continue;
    // Braces separate like spaces, so \frac{1}{2} stays two numbers.
    cleaned += c == '{' || c == '}' ? ' ' : c;
  }
  std::vector<NumberToken> numbers = Numbers(cleaned);
  if (numbers.size() != 1) return std::nullopt;
  return numbers[0].value;
}

}  // namespace

namespace {

// Whether the cleaned prediction contains reference r (case-insensitively). An empty or
// whitespace-only reference matches nothing: every prediction contains it, so it could only
// score a wrong answer as right.
bool Contains(const std::string& cleaned_pred, std::string_view r) {
  if (PyStrip(r).empty()) return false;
  return cleaned_pred.find(AsciiLower(r)) != std::string::npos;
}

}  // namespace

double StringMatchAll(std::string_view pred, const std::vector<std::string>& refs) {
  if (refs.empty()) return 0.0;
  const std::string p = CleanPrediction(pred);
  int found = 0;
  for (const std::string& r : refs) found += Contains(p, r) ? 1 : 0;
  return static_cast<double>(found) / static_cast<double>(refs.size());
}

double StringMatchPart(std::string_view pred, const std::vector<std::string>& refs) {
  const std::string p = CleanPrediction(pred);
  for (const std::string& r : refs) {
    if (Contains(p, r)) return 1.0;
  }
  return 0.0;
}

double QaF1(std::string_view pred, const std::vector<std::string>& refs) {
  const std::vector<std::string> p = NormalizeAnswerTokens(pred);
  double best = 0.0;
  for (const std::string& r : refs) best = std::max(best, TokenF1(p, NormalizeAnswerTokens(r)));
  return best;
}

double RougeL(std::string_view pred, const std::vector<std::string>& refs) {
  double best = 0.0;
  for (const std::string& r : refs) best = std::max(best, RougeLOne(pred, r));
  return best;
}

double Classification(std::string_view pred, std::string_view gt,
                      const std::vector<std::string>& all_classes) {
  std::vector<std::string> matches;
  for (const std::string& c : all_classes) {
    if (pred.find(c) != std::string_view::npos) matches.push_back(c);
  }
  // LongBench removes from the list while iterating over it, so the element after each removed
  // one is never examined; kept for identical scores.
  for (size_t i = 0; i < matches.size(); ++i) {
    const std::string term = matches[i];
    if (gt.find(term) != std::string_view::npos && term != gt) {
      matches.erase(std::find(matches.begin(), matches.end(), term));
    }
  }
  if (std::find(matches.begin(), matches.end(), gt) == matches.end()) return 0.0;
  return 1.0 / static_cast<double>(matches.size());
}

double Retrieval(std::string_view pred, std::string_view gt) {
  const auto id = FirstNumberAfter(gt, "Paragraph ");
  return id ? DigitRunShare(pred, *id) : 0.0;
}

double RetrievalZh(std::string_view pred, std::string_view gt) {
  const auto id = FirstNumberAfter(gt, "\xE6\xAE\xB5\xE8\x90\xBD");  // "段落"
  return id ? DigitRunShare(pred, *id) : 0.0;
}

double Count(std::string_view pred, std::string_view gt) { return DigitRunShare(pred, gt); }

double CodeSim(std::string_view pred, std::string_view gt) {
  const size_t start = pred.find_first_not_of('\n');
  std::string_view rest = start == std::string_view::npos ? std::string_view() : pred.substr(start);
  std::string_view chosen;
  for (;;) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    if (line.find('`') == std::string_view::npos && line.find('#') == std::string_view::npos &&
        line.find("//") == std::string_view::npos) {
      chosen = line;
      break;
    }
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  return FuzzRatio(chosen, gt) / 100.0;
}

std::optional<long long> ExtractFinalInteger(std::string_view text) {
  for (size_t pos = text.rfind("\\boxed"); pos != std::string_view::npos;
       pos = pos == 0 ? std::string_view::npos : text.rfind("\\boxed", pos - 1)) {
    size_t i = pos + 6;
    while (i < text.size() && text[i] == ' ') ++i;
    if (i >= text.size() || text[i] != '{') continue;  // not a box (e.g. \boxedsymbol)
    int depth = 0;
    const size_t open = i;
    for (; i < text.size(); ++i) {
      if (text[i] == '{') ++depth;
      if (text[i] == '}' && --depth == 0) break;
    }
    // An unclosed box (generation cut off) holds the rest of the text.
    return BoxedInteger(text.substr(open + 1, i - open - 1));
  }
  const std::vector<NumberToken> numbers = Numbers(text);
  for (auto it = numbers.rbegin(); it != numbers.rend(); ++it) {
    if (it->value) return it->value;
  }
  return std::nullopt;
}

double ExactInteger(std::string_view pred, std::string_view gt) {
  const std::vector<NumberToken> truth = Numbers(gt);
  if (truth.size() != 1 || !truth[0].value) return 0.0;
  const std::optional<long long> got = ExtractFinalInteger(pred);
  return got && *got == *truth[0].value ? 1.0 : 0.0;
}

}  // namespace primekv
