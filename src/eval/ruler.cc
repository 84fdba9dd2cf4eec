// RULER-style synthetic tasks: the needle-in-a-haystack family, variable tracking (vt), common
// words extraction (cwe) and frequent words extraction (fwe). The structure follows RULER; the
// wording, word lists and haystacks are this project's own.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "eval/eval_internal.h"

namespace primekv::eval_internal {
namespace {

enum class Hay { kNoise, kEssay, kNeedle };
enum class Kind { kWords, kNumbers, kUuids };

struct NiahSpec {
  std::string_view name;
  Hay hay;
  Kind key, value;
  int keys, values, queries;
};

constexpr NiahSpec kNiah[] = {
    {"niah_single_1", Hay::kNoise, Kind::kWords, Kind::kNumbers, 1, 1, 1},
    {"niah_single_2", Hay::kEssay, Kind::kWords, Kind::kNumbers, 1, 1, 1},
    {"niah_single_3", Hay::kEssay, Kind::kWords, Kind::kUuids, 1, 1, 1},
    {"niah_multikey_1", Hay::kEssay, Kind::kWords, Kind::kNumbers, 4, 1, 1},
    {"niah_multikey_2", Hay::kNeedle, Kind::kWords, Kind::kNumbers, 1, 1, 1},
    {"niah_multikey_3", Hay::kNeedle, Kind::kUuids, Kind::kUuids, 1, 1, 1},
    {"niah_multivalue", Hay::kEssay, Kind::kWords, Kind::kNumbers, 1, 4, 1},
    {"niah_multiquery", Hay::kEssay, Kind::kWords, Kind::kNumbers, 4, 1, 4},
};

constexpr int kNiahMaxNew = 128, kVtMaxNew = 30, kCweMaxNew = 120, kFweMaxNew = 50;

// What a kind of key or value is called, and how one is drawn.
struct KindInfo {
  std::string_view plural;
  std::string (*draw)(Rng&);
};
constexpr KindInfo kKinds[] = {
    {"words", RandomWordKey}, {"numbers", RandomNumber7}, {"uuids", RandomUuid}};  // by Kind

std::string RandomOf(Kind kind, Rng& rng) { return kKinds[static_cast<size_t>(kind)].draw(rng); }

std::string_view PluralName(Kind kind) { return kKinds[static_cast<size_t>(kind)].plural; }

// A draw of `kind` not yet in `used` (added to it).
std::string FreshRandom(Kind kind, Rng& rng, std::set<std::string>& used) {
  for (;;) {
    std::string s = RandomOf(kind, rng);
    if (used.insert(s).second) return s;
  }
}

// Groups noise sentences into paragraph lines of the filler's length.
std::vector<std::string> NoiseLines(int sentences) {
  const auto noise = NoiseSentences();
  std::vector<std::string> lines;
  for (int i = 0; i < sentences; ++i) {
    const size_t k = static_cast<size_t>(i) % noise.size();
    if (k == 0) {
      lines.emplace_back(noise[k]);
    } else {
      lines.back() += ' ';
      lines.back() += noise[k];
    }
  }
  return lines;
}

// The needles of one sample: keys, their values, the needle sentences (shuffled, each with
// a depth), the queried keys and the expected answers. The keys and values drawn stay
// reserved, so distractor needles never repeat them.
struct NiahNeedles {
  std::shared_ptr<std::set<std::string>> used_keys = std::make_shared<std::set<std::string>>();
  std::shared_ptr<std::set<std::string>> used_values = std::make_shared<std::set<std::string>>();
  std::vector<std::pair<double, std::string>> needles;  // (depth, sentence)
  std::vector<std::string> queries, answers;
};

NiahNeedles DrawNeedles(const NiahSpec& spec, Rng& rng) {
  NiahNeedles n;
  std::vector<std::string> keys;
  for (int k = 0; k < spec.keys; ++k) keys.push_back(FreshRandom(spec.key, rng, *n.used_keys));
  std::vector<std::vector<std::string>> values(keys.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    for (int v = 0; v < spec.values; ++v) {
      values[k].push_back(FreshRandom(spec.value, rng, *n.used_values));
      n.needles.emplace_back(0.0,
                             NeedleSentence(PluralName(spec.value), keys[k], values[k].back()));
    }
  }
  rng.Shuffle(n.needles);
  for (auto& needle : n.needles) needle.first = rng.Uniform();
  std::vector<size_t> order(keys.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  rng.Shuffle(order);
  for (int q = 0; q < spec.queries; ++q) {
    const size_t k = order[static_cast<size_t>(q)];
    n.queries.push_back(keys[k]);
    for (const std::string& v : values[k]) n.answers.push_back(v);
  }
  return n;
}

struct NiahWording {
  std::string intro, question, prefix;
};

// "A special magic number is ..." for one expected answer, "Some special magic numbers are
// ..." for several.
NiahWording WordNiah(const NiahSpec& spec, const std::string& query) {
  const bool singular = spec.queries * spec.values == 1;
  std::string type(PluralName(spec.value));
  if (singular) type.pop_back();
  const std::string are = singular ? "is" : "are";
  return {(singular ? "A" : "Some") + std::string(" special magic ") + type + " " + are +
              " hidden inside the text below. Memorize " + (singular ? "it" : "them") +
              ", because you will be quizzed on the " + type + " afterwards.",
          (singular ? "What is the" : "What are all the") + std::string(" special magic ") + type +
              " for " + query + " that the text above mentions?",
          " The special magic " + type + " for " + query + " mentioned in the text above " + are};
}

// The haystack's own stream (none for noise), so its sentences do not depend on how many were
// drawn for the needles.
std::shared_ptr<UnitStream> HayStream(const NiahSpec& spec, const TaskOptions& options, int index,
                                      const NiahNeedles& n) {
  const uint64_t hay_seed = DeriveSeed(options.seed, spec.name, static_cast<uint64_t>(index), 1);
  if (spec.hay == Hay::kEssay) {
    return std::make_shared<UnitStream>(hay_seed, [](Rng& r) { return ProseSentence(r); });
  }
  if (spec.hay == Hay::kNeedle) {
    // Distractor needles: fresh keys and values, never those of the real needles.
    return std::make_shared<UnitStream>(hay_seed, [spec, used_keys = n.used_keys,
                                                   used_values = n.used_values](Rng& r) {
      std::string key;
      do {
        key = RandomOf(spec.key, r);
      } while (used_keys->count(key) > 0);
      return NeedleSentence(PluralName(spec.value), key, FreshRandom(spec.value, r, *used_values));
    });
  }
  return nullptr;
}

Result<EvalSample> NiahSample(const NiahSpec& spec, const TaskOptions& options, int index) {
  Rng rng(DeriveSeed(options.seed, spec.name, static_cast<uint64_t>(index)));
  const NiahNeedles n = DrawNeedles(spec, rng);
  const NiahWording words = WordNiah(spec, JoinEnglishList(n.queries));
  const std::shared_ptr<UnitStream> stream = HayStream(spec, options, index, n);
  const int max_new = EffectiveMaxNewTokens(options, kNiahMaxNew);
  const auto build = [&](int units_wanted, int partial) {
    std::string hay;
    if (spec.hay == Hay::kNoise) {
      hay = Join(InsertAtDepths(NoiseLines(units_wanted), n.needles), "\n");
    } else {
      std::vector<std::string> units;
      for (int u = 0; u < units_wanted; ++u) units.push_back(stream->Get(static_cast<size_t>(u)));
      units = InsertAtDepths(std::move(units), n.needles);
      if (partial > 0) {
        units.push_back(
            UnitPrefix(stream->Get(static_cast<size_t>(units_wanted)), partial, options.tokenizer));
      }
      hay = Join(units, spec.hay == Hay::kEssay ? " " : "\n");
    }
    EvalSample s;
    s.id = SampleId(spec.name, options.seed, index);
    s.task = std::string(spec.name);
    s.context = words.intro + "\n" + hay + "\n";
    s.turns.push_back({words.question, words.prefix, n.answers, max_new});
    s.metric = "string_match_all";
    return s;
  };
  std::function<std::string(int)> partial_unit;
  if (spec.hay != Hay::kNoise) {
    partial_unit = [&](int u) { return stream->Get(static_cast<size_t>(u)); };
  }
  return FitSample(spec.name, options, build, partial_unit);
}

// ---- vt ----

std::string VtIntro() {
  return "The text below hides a chain of variable assignments. Keep track of every variable in "
         "the chain.";
}
std::string VtQuestion(const std::string& value) {
  return "Question: Which variables in the text above end up holding the value " + value +
         "? Name all of them.";
}
std::string VtPrefix(const std::string& value, size_t count) {
  return " Answer: Following the assignment chain in the text above, " + std::to_string(count) +
         " variables hold the value " + value + ". They are:";
}

// The chain statements, first the value, then each variable copying the previous one.
std::vector<std::string> VtChain(const std::vector<std::string>& names, const std::string& value) {
  std::vector<std::string> out;
  out.push_back("VAR " + names[0] + " = " + value);
  for (size_t i = 1; i < names.size(); ++i)
    out.push_back("VAR " + names[i] + " = VAR " + names[i - 1]);
  return out;
}

std::vector<std::pair<double, std::string>> SortedDepthItems(const std::vector<std::string>& items,
                                                             Rng& rng) {
  std::vector<double> depths;
  for (size_t i = 0; i < items.size(); ++i) depths.push_back(rng.Uniform());
  std::sort(depths.begin(), depths.end());
  std::vector<std::pair<double, std::string>> out;
  for (size_t i = 0; i < items.size(); ++i) out.emplace_back(depths[i], items[i]);
  return out;
}

std::vector<std::string> DistinctNames(Rng& rng, int count, int letters) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  while (static_cast<int>(out.size()) < count) {
    std::string name = RandomUpperName(rng, letters);
    if (seen.insert(name).second) out.push_back(std::move(name));
  }
  return out;
}

Result<EvalSample> VtSample(const TaskOptions& options, int index) {
  constexpr std::string_view kTask = "vt";
  constexpr int kHops = 4;
  Rng rng(DeriveSeed(options.seed, kTask, static_cast<uint64_t>(index)));
  const std::vector<std::string> names = DistinctNames(rng, kHops + 1, 5);
  const std::string value = std::to_string(rng.Between(10000, 99999));
  const auto chain = SortedDepthItems(VtChain(names, value), rng);

  // One solved example in front (three-letter names, another value, a short noise haystack).
  const std::vector<std::string> ex_names = DistinctNames(rng, kHops + 1, 3);
  std::string ex_value;
  do {
    ex_value = std::to_string(rng.Between(10000, 99999));
  } while (ex_value == value);
  const auto ex_chain = SortedDepthItems(VtChain(ex_names, ex_value), rng);
  const std::string example =
      VtIntro() + "\n" + Join(InsertAtDepths(NoiseLines(15), ex_chain), "\n") + "\n" +
      VtQuestion(ex_value) + VtPrefix(ex_value, ex_names.size()) + " " + Join(ex_names, " ");

  const int max_new = EffectiveMaxNewTokens(options, kVtMaxNew);
  const auto build = [&](int n, int) {
    EvalSample s;
    s.id = SampleId(kTask, options.seed, index);
    s.task = std::string(kTask);
    s.context = example + "\n\n" + VtIntro() + "\n" +
                Join(InsertAtDepths(NoiseLines(n), chain), "\n") + "\n";
    s.turns.push_back({VtQuestion(value), VtPrefix(value, names.size()), names, max_new});
    s.metric = "string_match_all";
    return s;
  };
  return FitSample(kTask, options, build, nullptr);
}

// ---- cwe ----

// The vocabulary of the common-words task: the real words in a seeded order, then made-up words
// (never equal to a real one) for long contexts.
class CweVocabulary {
 public:
  explicit CweVocabulary(Rng& rng) : real_(RealWordPool()) {
    rng.Shuffle(real_);
    seen_.insert(real_.begin(), real_.end());
    offset_ = rng.Below(kPseudoSpace);
  }
  const std::string& Get(size_t i) {
    while (extra_.size() + real_.size() <= i) {
      // An odd stride visits every index of the pseudo-word space (a power of two is not
      // needed: the stride is coprime with kPseudoSpace).
      std::string w = PseudoWord((offset_ + next_++ * kStride) % kPseudoSpace);
      Check(next_ < kPseudoSpace, "cwe vocabulary exhausted");
      if (seen_.insert(w).second) extra_.push_back(std::move(w));
    }
    return i < real_.size() ? real_[i] : extra_[i - real_.size()];
  }

 private:
  static constexpr uint64_t kPseudoSpace = 70ull * 70 * 70;  // 3 syllables of 14 x 5 letters
  static constexpr uint64_t kStride = 7919;                  // prime, coprime with 343000
  std::vector<std::string> real_, extra_;
  std::set<std::string> seen_;
  uint64_t offset_ = 0, next_ = 0;
};

std::string NumberedList(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(i + 1) + ". " + words[i];
  }
  return out;
}

std::vector<std::string> CweEntries(const std::vector<std::string>& words, int common,
                                    int common_repeats, int uncommon_repeats, Rng& rng) {
  std::vector<std::string> entries;
  for (size_t i = 0; i < words.size(); ++i) {
    const int repeats = static_cast<int>(i) < common ? common_repeats : uncommon_repeats;
    for (int r = 0; r < repeats; ++r) entries.push_back(words[i]);
  }
  rng.Shuffle(entries);
  return entries;
}

const char* kCweIntro =
    "Below is a numbered list of words. Some words occur many times and others only a few. "
    "Memorize the words that occur most often.";
const char* kCweQuestion = "Question: Which 10 words occur most often in the list above?";
const char* kCwePrefix = " Answer: The 10 words that occur most often in the list are:";

// Repeat counts of the list and of the one-shot example in front of it.
struct CweTier {
  int common_repeats, uncommon_repeats;
  int ex_words, ex_common_repeats, ex_uncommon_repeats;  // ex_words 0: no example
};
constexpr CweTier kCweLong{30, 3, 40, 10, 3};  // RULER, 4K tokens and longer
constexpr CweTier kCweShort{6, 1, 20, 3, 1};   // RULER, shorter than 4K
constexpr CweTier kCweTiny{6, 1, 0, 0, 0};     // no example, for very short targets

// Builds the sample for one tier; with `base_cost` set, only measures the list of common words
// alone (no uncommon word) and returns that.
Result<EvalSample> CweSampleForTier(const TaskOptions& options, int index, const CweTier& tier,
                                    int* base_cost) {
  constexpr std::string_view kTask = "cwe";
  constexpr int kCommon = 10;
  Rng rng(DeriveSeed(options.seed, kTask, static_cast<uint64_t>(index)));
  auto vocab = std::make_shared<CweVocabulary>(rng);
  std::string example;
  if (tier.ex_words > 0) {
    std::vector<std::string> ex_list;
    for (int i = 0; i < tier.ex_words; ++i) ex_list.push_back(vocab->Get(static_cast<size_t>(i)));
    const std::vector<std::string> ex_answer(ex_list.begin(), ex_list.begin() + kCommon);
    example = std::string(kCweIntro) + "\n" +
              NumberedList(CweEntries(ex_list, kCommon, tier.ex_common_repeats,
                                      tier.ex_uncommon_repeats, rng)) +
              "\n" + kCweQuestion + kCwePrefix + " " + NumberedList(ex_answer) + "\n\n";
  }
  const int max_new = EffectiveMaxNewTokens(options, kCweMaxNew);
  const auto build = [&](int n, int) {
    // The example's words come first in the vocabulary, so the list never repeats them.
    std::vector<std::string> words;
    for (int i = 0; i < kCommon + n; ++i) {
      words.push_back(vocab->Get(static_cast<size_t>(tier.ex_words + i)));
    }
    // A shuffle of its own per size, so every candidate list is a fresh arrangement.
    Rng shuffle(DeriveSeed(options.seed, kTask, static_cast<uint64_t>(index),
                           2 + static_cast<uint64_t>(n)));
    EvalSample s;
    s.id = SampleId(kTask, options.seed, index);
    s.task = std::string(kTask);
    s.context = example + kCweIntro + "\n" +
                NumberedList(CweEntries(words, kCommon, tier.common_repeats, tier.uncommon_repeats,
                                        shuffle)) +
                "\n";
    s.turns.push_back({kCweQuestion, kCwePrefix,
                       std::vector<std::string>(words.begin(), words.begin() + kCommon), max_new});
    s.metric = "string_match_all";
    return s;
  };
  if (base_cost != nullptr) {
    EvalSample s = build(0, 0);
    *base_cost = CountSampleTokens(s, options.tokenizer);
    return s;
  }
  return FitSample(kTask, options, build, nullptr);
}

// RULER's repeat counts when they leave at least a third of the budget to uncommon words (a
// tokenizer that spends more tokens per list entry gets the next smaller tier).
Result<EvalSample> CweSample(const TaskOptions& options, int index) {
  std::vector<CweTier> tiers;
  if (options.target_tokens >= 4096) tiers.push_back(kCweLong);
  tiers.push_back(kCweShort);
  tiers.push_back(kCweTiny);
  const int budget = options.target_tokens - options.reserved_tokens;
  for (size_t t = 0; t + 1 < tiers.size(); ++t) {
    int base = 0;
    (void)CweSampleForTier(options, index, tiers[t], &base);
    if (3 * base <= 2 * budget) return CweSampleForTier(options, index, tiers[t], nullptr);
  }
  return CweSampleForTier(options, index, tiers.back(), nullptr);
}

// ---- fwe ----

Result<EvalSample> FweSample(const TaskOptions& options, int index) {
  constexpr std::string_view kTask = "fwe";
  constexpr double kAlpha = 2.0;
  const double zeta = std::numbers::pi * std::numbers::pi / 6.0;  // zeta(2)
  const int max_new = EffectiveMaxNewTokens(options, kFweMaxNew);
  const int vocab_size = std::max(5, (options.target_tokens - max_new) / 50);

  Rng rng(DeriveSeed(options.seed, kTask, static_cast<uint64_t>(index)));
  std::set<std::string> seen;
  std::vector<std::string> vocab;
  while (static_cast<int>(vocab.size()) < vocab_size) {
    std::string w;
    for (int i = 0; i < 6; ++i) w += static_cast<char>('a' + rng.Below(26));
    if (seen.insert(w).second) vocab.push_back(std::move(w));
  }
  vocab[0] = "...";  // the most frequent "word" is noise the model must ignore

  const auto counts = [&](int total) {
    std::vector<int> c;
    for (int k = 1; k <= vocab_size; ++k) {
      c.push_back(static_cast<int>(std::floor(total * std::pow(k, -kAlpha) / zeta)));
    }
    return c;
  };
  const std::string intro =
      "Read the coded text below and keep count of how often each coded word appears. Find the "
      "three coded words that appear most often.";
  const std::string question =
      "Question: Ignore the dots '...'. Which three coded words appear most often in the coded "
      "text above? Answer without any explanation.";
  const std::string prefix =
      " Answer: The three coded words that appear most often in the coded text above are:";
  const std::vector<std::string> answers(vocab.begin() + 1, vocab.begin() + 4);
  int last_total = 0;  // the size of the last sample built: FitSample builds its answer last
  const auto build = [&](int n, int) {
    last_total = n;
    std::vector<std::string> words;
    const std::vector<int> c = counts(n);
    for (size_t k = 0; k < c.size(); ++k) {
      for (int r = 0; r < c[k]; ++r) words.push_back(vocab[k]);
    }
    Rng shuffle(DeriveSeed(options.seed, kTask, static_cast<uint64_t>(index),
                           2 + static_cast<uint64_t>(n)));
    shuffle.Shuffle(words);
    EvalSample s;
    s.id = SampleId(kTask, options.seed, index);
    s.task = std::string(kTask);
    s.context = intro + "\n" + Join(words, " ") + "\n";
    s.turns.push_back({question, prefix, answers, max_new});
    s.metric = "string_match_all";
    return s;
  };
  Result<EvalSample> sample = FitSample(kTask, options, build, nullptr);
  if (!sample.ok()) return sample;
  // The answers must be strictly the three most frequent real words.
  const std::vector<int> c = counts(last_total);
  if (!(c[1] > c[2] && c[2] > c[3] && c[3] > c[4])) {
    return Status::Error("fwe: target of " + std::to_string(options.target_tokens) +
                         " tokens is too small for three distinct most frequent words");
  }
  return sample;
}

}  // namespace

std::string NeedleSentence(std::string_view plural_type, std::string_view key,
                           std::string_view value) {
  return "One of the special magic " + std::string(plural_type) + " for " + std::string(key) +
         " is: " + std::string(value) + ".";
}

std::string SampleId(std::string_view task, uint64_t seed, int index) {
  return std::string(task) + "-" + std::to_string(seed) + "-" + std::to_string(index);
}

std::optional<int> RulerMaxNewTokens(std::string_view task) {
  for (const NiahSpec& spec : kNiah) {
    if (spec.name == task) return kNiahMaxNew;
  }
  if (task == "vt") return kVtMaxNew;
  if (task == "cwe") return kCweMaxNew;
  if (task == "fwe") return kFweMaxNew;
  return std::nullopt;
}

std::vector<std::string> RulerTaskNames() {
  std::vector<std::string> out;
  for (const NiahSpec& spec : kNiah) out.emplace_back(spec.name);
  out.emplace_back("vt");
  out.emplace_back("cwe");
  out.emplace_back("fwe");
  return out;
}

Result<std::vector<EvalSample>> GenerateRuler(std::string_view task, const TaskOptions& options) {
  std::vector<EvalSample> out;
  for (int i = 0; i < options.samples; ++i) {
    Result<EvalSample> sample = Status::Error(std::string(task) + ": unknown RULER task");
    for (const NiahSpec& spec : kNiah) {
      if (spec.name == task) sample = NiahSample(spec, options, i);
    }
    if (task == "vt") sample = VtSample(options, i);
    if (task == "cwe") sample = CweSample(options, i);
    if (task == "fwe") sample = FweSample(options, i);
    if (!sample.ok()) return sample.status();
    out.push_back(std::move(sample).value());
  }
  return out;
}

}  // namespace primekv::eval_internal
