// Shared pieces of the eval module: a portable seeded RNG, Python-compatible text helpers, word
// lists, the prose and noise haystacks, and the length fitting used by every generator.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/eval/eval.h"
#include "primekv/util/status.h"

namespace primekv::eval_internal {

// SplitMix64-seeded xoshiro256**: the same stream on every platform (std:: distributions are
// implementation-defined, so generators use only this).
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  uint64_t Below(uint64_t n);               // uniform in [0, n), n > 0
  int64_t Between(int64_t lo, int64_t hi);  // uniform in [lo, hi]
  double Uniform();                         // [0, 1)
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[Below(i)]);
  }
  template <typename T>
  const T& Pick(std::span<const T> items) {
    return items[Below(items.size())];
  }

 private:
  uint64_t s_[4];
};

// A seed for (seed, task, index, stream) so tasks and samples draw independent streams.
uint64_t DeriveSeed(uint64_t seed, std::string_view task, uint64_t index, uint64_t stream = 0);

// ---- Text helpers (Python semantics where the metrics need them) ----

// str.split() without arguments: runs of Unicode whitespace separate, no empty fields.
std::vector<std::string_view> PySplit(std::string_view s);
// str.strip() for Unicode whitespace.
std::string_view PyStrip(std::string_view s);
std::string AsciiLower(std::string_view s);
// prediction.lstrip('\n').split('\n')[0]
std::string_view FirstLine(std::string_view s);
// re.findall(r"\d+", s) for ASCII digits.
std::vector<std::string_view> DigitRuns(std::string_view s);
std::string Join(std::span<const std::string> parts, std::string_view sep);
// "a", "a and b", "a, b, and c"
std::string JoinEnglishList(std::span<const std::string> items);

// ---- Words ----

std::span<const std::string_view> Adjectives();
std::span<const std::string_view> Nouns();
std::span<const std::string_view> Adverbs();
// Real words for the common-words task: adjectives, nouns, verbs, adverbs, deduplicated.
std::vector<std::string> RealWordPool();
// The i-th pronounceable made-up lowercase word (6 letters), for vocabularies larger than the
// real pool.
std::string PseudoWord(uint64_t i);

std::string RandomWordKey(Rng& rng);  // "adjective-noun"
std::string RandomNumber7(Rng& rng);  // 7 digits
std::string RandomUuid(Rng& rng);     // version-4 layout, lowercase hex
std::string RandomUpperName(Rng& rng, int letters);

// ---- Haystacks ----

// One sentence of the seeded prose grammar (no digits, no hyphens).
std::string ProseSentence(Rng& rng);
// The fixed filler paragraph of the noise haystack, one sentence per entry.
std::span<const std::string_view> NoiseSentences();

// An endless sequence of haystack units produced on demand, so a haystack of n units is always
// the first n of the same sequence.
class UnitStream {
 public:
  UnitStream(uint64_t seed, std::function<std::string(Rng&)> make);
  const std::string& Get(size_t i);

 private:
  Rng rng_;
  std::function<std::string(Rng&)> make_;
  std::vector<std::string> units_;
};

// The first `tokens` tokens of `unit` as text (whitespace words without a tokenizer).
std::string UnitPrefix(std::string_view unit, int tokens, const Tokenizer* tokenizer);
// Tokens of `unit` alone (no BOS), or its words.
int UnitTokens(std::string_view unit, const Tokenizer* tokenizer);

// Builds a sample from a haystack of n whole units followed by a prefix of `partial` tokens of
// unit n (partial is always 0 when the task allows no partial unit).
using SampleBuilder = std::function<EvalSample(int n, int partial)>;
// Chooses the largest n (then the largest partial, when partial_unit is given: it returns the
// text of unit n) whose sample fits the budget of `options`.
Result<EvalSample> FitSample(std::string_view task, const TaskOptions& options,
                             const SampleBuilder& build,
                             const std::function<std::string(int n)>& partial_unit);

// Inserts `items` (each with a depth in [0, 1)) among `units` at gap index
// min(size, floor(depth * (size + 1))); items sharing a gap keep their given order.
std::vector<std::string> InsertAtDepths(std::vector<std::string> units,
                                        std::span<const std::pair<double, std::string>> items);

// ---- Generators and loaders ----

// RULER's needle frame: "One of the special magic <type> for <key> is: <value>."
std::string NeedleSentence(std::string_view plural_type, std::string_view key,
                           std::string_view value);
std::string SampleId(std::string_view task, uint64_t seed, int index);

std::vector<std::string> RulerTaskNames();
std::optional<int> RulerMaxNewTokens(std::string_view task);
Result<std::vector<EvalSample>> GenerateRuler(std::string_view task, const TaskOptions& options);
Result<std::vector<EvalSample>> GenerateMultiTurn(const TaskOptions& options);
// File tasks, from the file's text (`path` names it in messages).
Result<std::vector<EvalSample>> ParseLongBench(const std::string& path, std::string_view text,
                                               const TaskOptions& options);
Result<std::vector<EvalSample>> ParseJsonl(const std::string& path, std::string_view text,
                                           const TaskOptions& options);
Result<std::vector<EvalSample>> ParseAime(const std::string& path, std::string_view text,
                                          const TaskOptions& options);

// Parses one non-blank line of a jsonl file (1-based line number) into a sample, or says why not.
using JsonLineParser = std::function<Result<EvalSample>(const nlohmann::json& line, int line_no)>;
// Runs `parse` over the lines of `text`: blank lines are ignored; bad ones (over
// kMaxTaskLineBytes, invalid UTF-8 or JSON, with the byte where it goes wrong, or rejected by
// `parse`) are skipped with a
// "PATH:LINE: reason" warning (into options.warnings); a repeated sample id is an error naming
// both lines, and so is a file without any valid line.
Result<std::vector<EvalSample>> ParseJsonLines(const std::string& path, std::string_view text,
                                               const TaskOptions& options,
                                               const JsonLineParser& parse);
// `text` as a JSON string literal with every non-ASCII or control byte escaped (for messages).
std::string QuotedForMessage(std::string_view text);

// Limits on task files: the whole file is read (a LongBench file is tens of MB), and a line is
// one sample (the longest real contexts are a few MB); a longer line is skipped with a warning
// before it is parsed.
inline constexpr uint64_t kMaxTaskFileBytes = uint64_t{256} << 20;
inline constexpr size_t kMaxTaskLineBytes = size_t{32} << 20;

// Reads a whole task file of at most kMaxTaskFileBytes; a directory, device, FIFO, larger or
// unreadable file is an error naming it ("task file 'PATH' is not a regular file").
Result<std::string> ReadTextFile(const std::string& path);
int EffectiveMaxNewTokens(const TaskOptions& options, int task_default);

}  // namespace primekv::eval_internal
