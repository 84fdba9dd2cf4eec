// Synthetic tokenizers for project-made random models: BPE learned from a short built-in text.
#include <algorithm>
#include <cstdint>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "primekv/tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace primekv {
namespace {

// Training text written for this project: plain English and a little code, so the learned pieces
// look like those of a real vocabulary (words, leading spaces, indentation, operators).
constexpr std::string_view kTrainingText =
    R"TXT(The river ran quietly past the old mill, and the children followed it down to the sea.
Every morning the baker opened the shop at seven, and every evening she counted the coins twice.
"Where are you going?" asked the teacher. "To the library," said Tom, "because I want to read about the stars."
It was a cold winter, the coldest in forty years, and the lake froze from one shore to the other.
People walked across the ice, talking and laughing, while their dogs ran in circles around them.
When the spring came, the ice broke into large white plates that drifted slowly to the south.
A good engineer measures twice and changes one thing at a time; a careful writer reads every line again.
The train leaves at 10:45 and arrives at 13:20, so the journey takes two hours and thirty-five minutes.
In 2023 the town had 12,500 people, 3 schools, 2 hospitals and more than 400 small shops.
She didn't know the answer, but she wasn't afraid to say so, and they'll remember that.
We're testing the tokenizer with contractions, numbers like 3.14159 and 42, and punctuation!!!
The quick brown fox jumps over the lazy dog. The lazy dog sleeps in the warm afternoon sun.
Memory is limited, so the cache keeps only the most important keys and values for each head.
Attention compares every query with every key, then mixes the values with those weights.

// Compute the mean of a list of numbers.
double Mean(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  double sum = 0.0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

int main(int argc, char** argv) {
	for (int i = 0; i < argc; ++i) {
		std::printf("%d: %s\n", i, argv[i]);
	}
	return 0;
}

def count_words(text):
    counts = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return sorted(counts.items(), key=lambda item: -item[1])

if __name__ == "__main__":
    print(count_words("the cat and the hat and the bat"))
    values = [1, 2, 3, 4, 5]
    total = sum(x * x for x in values)
    print(f"total = {total}")

for (size_t row = 0; row < rows; ++row) {
  float max_value = -1e30f;
  for (size_t col = 0; col < cols; ++col) max_value = std::max(max_value, scores[row * cols + col]);
}
Les élèves ont visité le musée, puis ils ont mangé des crêpes au café près de la gare.
)TXT";

struct LearnedMerge {
  int left, right, result;
};

using Word = std::pair<std::vector<int>, int64_t>;  // symbols, frequency

uint64_t PairOf(int a, int b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Replaces every (a, b) in the words by `result`, moving the pair counts of each changed word
// from its old pairs to its new ones; `changed` receives every pair whose count moved.
void ApplyMerge(std::vector<Word>& words, int a, int b, int result,
                std::unordered_map<uint64_t, int64_t>& counts, std::vector<uint64_t>& changed) {
  for (auto& [w, f] : words) {
    bool has = false;
    for (size_t i = 1; i < w.size() && !has; ++i) has = w[i - 1] == a && w[i] == b;
    if (!has) continue;
    for (size_t i = 1; i < w.size(); ++i) {
      counts[PairOf(w[i - 1], w[i])] -= f;
      changed.push_back(PairOf(w[i - 1], w[i]));
    }
    std::vector<int> merged;
    for (size_t i = 0; i < w.size(); ++i) {
      if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
        merged.push_back(result);
        ++i;
      } else {
        merged.push_back(w[i]);
      }
    }
    w = std::move(merged);
    for (size_t i = 1; i < w.size(); ++i) {
      counts[PairOf(w[i - 1], w[i])] += f;
      changed.push_back(PairOf(w[i - 1], w[i]));
    }
  }
}

// Byte-pair learning: repeatedly join the most frequent adjacent pair (ties: lowest ids) until
// `max_new` new symbols exist or every word is one symbol (pairs seen once still merge, so the
// short text yields a few thousand pieces). `text` holds each symbol's string; merges
// whose string is in `blocked` are never made, and a string made twice reuses its first symbol.
std::vector<LearnedMerge> LearnMerges(std::vector<Word> words, std::vector<std::string>& text,
                                      const std::set<std::string>& blocked, size_t max_new) {
  std::unordered_map<uint64_t, int64_t> counts;
  for (const auto& [w, f] : words) {
    for (size_t i = 1; i < w.size(); ++i) counts[PairOf(w[i - 1], w[i])] += f;
  }
  struct Entry {
    int64_t count;
    uint64_t pair;
  };
  auto lower = [](const Entry& a, const Entry& b) {
    return a.count < b.count || (a.count == b.count && a.pair > b.pair);
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(lower)> queue(lower);
  for (const auto& [k, c] : counts) queue.push({c, k});

  std::map<std::string, int> existing;
  for (size_t i = 0; i < text.size(); ++i) existing.emplace(text[i], static_cast<int>(i));
  std::vector<LearnedMerge> merges;
  std::set<uint64_t> refused;
  size_t made = 0;
  std::vector<uint64_t> changed;
  while (made < max_new && !queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    auto it = counts.find(top.pair);
    if (it == counts.end() || it->second != top.count || refused.count(top.pair)) continue;
    const int a = static_cast<int>(top.pair >> 32);
    const int b = static_cast<int>(top.pair & 0xFFFFFFFFu);
    const std::string joined = text[static_cast<size_t>(a)] + text[static_cast<size_t>(b)];
    if (blocked.count(joined)) {
      refused.insert(top.pair);
      continue;
    }
    int result;
    if (auto e = existing.find(joined); e != existing.end()) {
      result = e->second;
    } else {
      result = static_cast<int>(text.size());
      text.push_back(joined);
      existing.emplace(joined, result);
      ++made;
    }
    merges.push_back({a, b, result});
    changed.clear();
    ApplyMerge(words, a, b, result, counts, changed);
    std::sort(changed.begin(), changed.end());
    changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
    for (uint64_t k : changed) {
      const int64_t c = counts[k];
      if (c > 0) {
        queue.push({c, k});
      } else {
        counts.erase(k);
      }
    }
  }
  return merges;
}

// Pre-token counts of the training text, in first-appearance order.
std::vector<std::pair<std::string, int64_t>> TrainingWords(std::string_view text) {
  std::vector<std::pair<std::string, int64_t>> words;
  std::map<std::string, size_t> index;
  for (std::string_view piece : PreTokenize(PreTokenizerKind::kLlama3, text)) {
    auto [it, inserted] = index.emplace(std::string(piece), words.size());
    if (inserted) words.push_back({std::string(piece), 0});
    ++words[it->second].second;
  }
  return words;
}

Result<TokenizerSpec> MakeLlama(int vocab_size) {
  constexpr int kFixed = 3 + 256;
  if (vocab_size < kFixed + 1) {
    return Status::Error("synthetic llama tokenizer needs vocab_size >= " +
                         std::to_string(kFixed + 1) + ", got " + std::to_string(vocab_size));
  }
  TokenizerSpec spec;
  spec.model = "llama";
  spec.pre = "default";
  auto add = [&](std::string text, float score, TokenType type) {
    spec.tokens.push_back(std::move(text));
    spec.scores.push_back(score);
    spec.token_types.push_back(static_cast<int32_t>(type));
  };
  add("<unk>", 0.0f, TokenType::kUnknown);
  add("<s>", 0.0f, TokenType::kControl);
  add("</s>", 0.0f, TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    add(tokenizer_internal::ByteTokenText(static_cast<uint8_t>(b)), 0.0f, TokenType::kByte);
  }
  spec.unk = 0;
  spec.bos = 1;
  spec.eos = 2;
  const std::set<std::string> blocked(spec.tokens.begin(), spec.tokens.end());

  // Words as SentencePiece sees them: spaces spelled U+2581, with the leading space prefix.
  std::string norm_text(" ");
  norm_text += kTrainingText;
  std::vector<std::string> symbol_text;
  std::map<std::string, int> char_ids;
  std::map<std::string, int64_t> char_counts;
  std::vector<std::pair<std::vector<int>, int64_t>> words;
  for (const auto& [word, count] : TrainingWords(norm_text)) {
    std::string norm;
    for (char c : word) {
      if (c == ' ') {
        norm += tokenizer_internal::kSpaceMarker;
      } else {
        norm += c;
      }
    }
    std::vector<int> symbols;
    for (size_t pos = 0; pos < norm.size();) {
      const auto len = static_cast<size_t>(DecodeUtf8(norm, pos).len);
      std::string ch = norm.substr(pos, len);
      pos += len;
      auto [it, inserted] = char_ids.emplace(ch, static_cast<int>(symbol_text.size()));
      if (inserted) symbol_text.push_back(ch);
      char_counts[ch] += count;
      symbols.push_back(it->second);
    }
    words.push_back({std::move(symbols), count});
  }
  const size_t n_chars = symbol_text.size();
  const auto budget = static_cast<size_t>(vocab_size - kFixed);
  LearnMerges(words, symbol_text, blocked, budget);  // extends symbol_text with the pieces

  // Pieces by descending score: learned merges in learning order, then the single characters
  // (most frequent first), then unused fillers.
  std::vector<std::string> pieces(symbol_text.begin() + static_cast<std::ptrdiff_t>(n_chars),
                                  symbol_text.end());
  std::vector<std::pair<int64_t, std::string>> chars;
  for (const auto& [ch, count] : char_counts) chars.push_back({-count, ch});
  std::sort(chars.begin(), chars.end());
  for (const auto& [neg_count, ch] : chars) {
    if (pieces.size() < budget) pieces.push_back(ch);
  }
  float score = 0.0f;
  for (std::string& p : pieces) add(std::move(p), score -= 1.0f, TokenType::kNormal);
  for (int i = 0; static_cast<int>(spec.tokens.size()) < vocab_size; ++i) {
    add("<unused" + std::to_string(i) + ">", score -= 1.0f, TokenType::kUnused);
  }
  return spec;
}

Result<TokenizerSpec> MakeGpt2(int vocab_size) {
  const std::vector<std::string> controls = {
      "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
      "<|end_header_id|>", "<|eot_id|>",      "<|im_start|>",
      "<|im_end|>",        "[INST]",          "[/INST]"};
  const int fixed = 256 + static_cast<int>(controls.size());
  if (vocab_size < fixed) {
    return Status::Error("synthetic gpt2 tokenizer needs vocab_size >= " + std::to_string(fixed) +
                         ", got " + std::to_string(vocab_size));
  }
  TokenizerSpec spec;
  spec.model = "gpt2";
  spec.pre = "llama3";
  spec.add_bos = true;
  spec.add_space_prefix = false;
  std::vector<std::string> symbol_text;
  for (int b = 0; b < 256; ++b) {
    symbol_text.push_back(tokenizer_internal::ByteLevelChar(static_cast<uint8_t>(b)));
  }
  std::vector<std::pair<std::vector<int>, int64_t>> words;
  for (const auto& [word, count] : TrainingWords(kTrainingText)) {
    std::vector<int> symbols;
    for (char c : word) symbols.push_back(static_cast<unsigned char>(c));
    words.push_back({std::move(symbols), count});
  }
  const std::set<std::string> blocked(controls.begin(), controls.end());
  const std::vector<LearnedMerge> merges =
      LearnMerges(words, symbol_text, blocked, static_cast<size_t>(vocab_size - fixed));
  for (const LearnedMerge& m : merges) {
    spec.merges.push_back(symbol_text[static_cast<size_t>(m.left)] + " " +
                          symbol_text[static_cast<size_t>(m.right)]);
  }
  spec.tokens = std::move(symbol_text);
  spec.token_types.assign(spec.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  const auto first_control = static_cast<Token>(spec.tokens.size());
  spec.bos = first_control;      // <|begin_of_text|>
  spec.eos = first_control + 1;  // <|end_of_text|>
  spec.eot = first_control + 4;  // <|eot_id|>
  for (const std::string& c : controls) {
    spec.tokens.push_back(c);
    spec.token_types.push_back(static_cast<int32_t>(TokenType::kControl));
  }
  for (int i = 0; static_cast<int>(spec.tokens.size()) < vocab_size; ++i) {
    spec.tokens.push_back("<|reserved_" + std::to_string(i) + "|>");
    spec.token_types.push_back(static_cast<int32_t>(TokenType::kControl));
  }
  return spec;
}

}  // namespace

Result<TokenizerSpec> MakeSyntheticTokenizerSpec(std::string_view model, int vocab_size) {
  constexpr int kMaxVocab = 1 << 22;
  if (vocab_size > kMaxVocab) {
    return Status::Error("synthetic tokenizer vocab_size " + std::to_string(vocab_size) +
                         " is above the limit " + std::to_string(kMaxVocab));
  }
  Result<TokenizerSpec> spec = Status::Error("unsupported synthetic tokenizer model \"" +
                                             std::string(model) + "\"; supported: llama, gpt2");
  if (model == "llama") spec = MakeLlama(vocab_size);
  if (model == "gpt2") spec = MakeGpt2(vocab_size);
  if (!spec.ok()) return spec;
  if (Status s = ValidateTokenizerSpec(*spec); !s.ok()) return s;
  return spec;
}

}  // namespace primekv
