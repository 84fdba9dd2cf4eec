#include "primekv/session/calibration_corpus.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>
#include <string>

namespace primekv {
namespace {

// A piece is word-like when it decodes to letters or digits, with at most one leading space.
bool WordLike(const std::string& s) {
  const size_t b = !s.empty() && s[0] == ' ' ? 1 : 0;
  if (s.size() - b < 2) return false;
  for (size_t i = b; i < s.size(); ++i) {
    if (!std::isalnum(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

class Writer {
 public:
  Writer(std::vector<std::string> pieces, uint64_t seed) : pieces_(std::move(pieces)), rng_(seed) {}

  // One to three pieces glued into a word the tokenizer has to spell out.
  std::string Word() {
    std::string w;
    const int n = Pick(3) + 1;
    for (int i = 0; i < n; ++i) {
      const std::string& p = pieces_[static_cast<size_t>(Pick(static_cast<int>(pieces_.size())))];
      w += p[0] == ' ' ? p.substr(1) : p;
    }
    return w;
  }
  std::string Words(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += (i ? " " : "") + Word();
    return s;
  }
  std::string Number() { return std::to_string(Pick(900000) + 100000); }
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

 private:
  std::vector<std::string> pieces_;
  std::mt19937_64 rng_;
};

// About `target` tokens of text: segments of the four kinds in turn, in a shuffled order.
std::string WriteContext(Writer& w, const Tokenizer& tok, int target) {
  struct Fact {
    std::string key, value;
  };
  std::vector<Fact> facts;
  std::vector<std::string> spans;  // earlier segments, to be repeated
  std::string text;
  int tokens = 1;
  while (tokens < target) {
    std::string seg;
    switch (w.Pick(5)) {
      case 0:  // facts: a key and its value
        for (int i = 0, n = 2 + w.Pick(4); i < n; ++i) {
          Fact f;
          f.key = w.Words(1 + w.Pick(2));
          f.value = w.Pick(2) ? w.Number() : w.Words(1);
          seg += "The " + f.key + " is " + f.value + ". ";
          facts.push_back(std::move(f));
        }
        break;
      case 1:  // a question about an earlier fact, answered: a lookup by key
        if (facts.empty()) continue;
        for (int i = 0, n = 1 + w.Pick(3); i < n; ++i) {
          const Fact& f = facts[static_cast<size_t>(w.Pick(static_cast<int>(facts.size())))];
          seg += "What is the " + f.key + "? The " + f.key + " is " + f.value + ". ";
        }
        break;
      case 2:  // a span repeated verbatim: a copy
        if (spans.empty()) continue;
        seg = spans[static_cast<size_t>(w.Pick(static_cast<int>(spans.size())))];
        break;
      case 3:  // a list
        // (The draws one a statement, in the order the first measurements had: the operands of
        // + are evaluated in an order each compiler chooses, and every build must write the
        // same corpus.)
        for (int i = 0, n = 3 + w.Pick(5); i < n; ++i) {
          const bool numbered = w.Pick(2) != 0;
          const std::string number = numbered ? ": " + w.Number() : "";
          const std::string words = w.Words(1 + w.Pick(3));
          seg += "\n- " + words + number;
        }
        seg += "\n";
        break;
      default:  // prose-like filler
        for (int i = 0, n = 1 + w.Pick(3); i < n; ++i) seg += w.Words(6 + w.Pick(12)) + ". ";
        break;
    }
    tokens += static_cast<int>(tok.Encode(seg, false).size());
    text += seg;
    spans.push_back(std::move(seg));
  }
  return text;
}

}  // namespace

Result<std::vector<std::vector<Token>>> BuiltInCalibrationCorpus(const Tokenizer& tokenizer,
                                                                 const CorpusOptions& o) {
  if (o.contexts < 1 || o.min_length < 16 || o.max_length < o.min_length)
    return Status::Error("calibration corpus: needs contexts >= 1 and 16 <= min <= max length");
  std::vector<std::string> pieces;
  for (Token t = 0; t < tokenizer.vocab_size(); ++t) {
    if (tokenizer.token_type(t) != TokenType::kNormal) continue;
    const std::string s = tokenizer.Decode(std::span<const Token>(&t, 1), false);
    if (WordLike(s)) pieces.push_back(s);
  }
  if (pieces.size() < 64)
    return Status::Error("calibration corpus: the vocabulary has " + std::to_string(pieces.size()) +
                         " word-like pieces, too few to write from; pass --tasks");
  Writer w(std::move(pieces), o.seed);
  std::vector<std::vector<Token>> out;
  for (int i = 0; i < o.contexts; ++i) {
    // Lengths spread over [min, max] in a scattered order, so a corpus cut short by a time
    // budget still covers them (the golden ratio's multiples mod 1 fill the range evenly).
    const double at = std::fmod(0.5 + i * 0.6180339887498949, 1.0);
    const int length = o.min_length + static_cast<int>(at * (o.max_length - o.min_length) + 0.5);
    std::vector<Token> ids = tokenizer.Encode(WriteContext(w, tokenizer, length), true);
    ids.resize(std::min(ids.size(), static_cast<size_t>(length)));
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace primekv
