// The multi-turn (query drift) task: one prose context hiding several independent facts at
// spread-out depths, and one turn per fact, so a cache compressed for the first question is
// reused for questions about other parts of the context.
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "eval/eval_internal.h"

namespace primekv::eval_internal {
namespace {

constexpr std::string_view kTask = "multiturn";
constexpr int kMaxNew = 64;

Result<EvalSample> MultiTurnSample(const TaskOptions& options, int index) {
  const int k = options.multiturn_facts;
  Rng rng(DeriveSeed(options.seed, kTask, static_cast<uint64_t>(index)));
  std::set<std::string> used;  // keys and values alike, so no fact's text repeats another's
  const auto fresh = [&](std::string (*draw)(Rng&)) {
    for (;;) {
      std::string s = draw(rng);
      if (used.insert(s).second) return s;
    }
  };
  struct Fact {
    std::string type, key, value;
  };
  std::vector<Fact> facts;
  for (int j = 0; j < k; ++j) {
    Fact f;
    f.key = fresh(RandomWordKey);
    switch (j % 3) {
      case 0:
        f.type = "number";
        f.value = fresh(RandomNumber7);
        break;
      case 1:
        f.type = "uuid";
        f.value = fresh(RandomUuid);
        break;
      default:
        f.type = "word";
        f.value = fresh(RandomWordKey);
        break;
    }
    facts.push_back(std::move(f));
  }
  // Stratified depths: fact j lands in its own k-th of the context (slot perm[j]), away from the
  // slot edges, so the facts are spread out and the turn order is not the depth order.
  std::vector<int> perm(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) perm[static_cast<size_t>(j)] = j;
  rng.Shuffle(perm);
  std::vector<std::pair<double, std::string>> needles;
  for (int j = 0; j < k; ++j) {
    const Fact& f = facts[static_cast<size_t>(j)];
    const double depth = (perm[static_cast<size_t>(j)] + 0.15 + 0.7 * rng.Uniform()) / k;
    needles.emplace_back(depth, NeedleSentence(f.type + "s", f.key, f.value));
  }

  auto stream =
      std::make_shared<UnitStream>(DeriveSeed(options.seed, kTask, static_cast<uint64_t>(index), 1),
                                   [](Rng& r) { return ProseSentence(r); });
  const std::string intro =
      "The text below hides several special magic values, each tied to a key. Memorize all of "
      "them: you will be asked about them one at a time.";
  const int max_new = EffectiveMaxNewTokens(options, kMaxNew);
  const auto build = [&](int n, int partial) {
    std::vector<std::string> units;
    for (int u = 0; u < n; ++u) units.push_back(stream->Get(static_cast<size_t>(u)));
    units = InsertAtDepths(std::move(units), needles);
    if (partial > 0) {
      units.push_back(UnitPrefix(stream->Get(static_cast<size_t>(n)), partial, options.tokenizer));
    }
    EvalSample s;
    s.id = SampleId(kTask, options.seed, index);
    s.task = std::string(kTask);
    s.context = intro + "\n" + Join(units, " ") + "\n";
    for (const Fact& f : facts) {
      s.turns.push_back(
          {"What is the special magic " + f.type + " for " + f.key +
               " that the text above mentions?",
           " The special magic " + f.type + " for " + f.key + " mentioned in the text above is",
           {f.value},
           max_new});
    }
    s.metric = "string_match_all";
    return s;
  };
  return FitSample(kTask, options, build,
                   [&](int n) { return stream->Get(static_cast<size_t>(n)); });
}

}  // namespace

Result<std::vector<EvalSample>> GenerateMultiTurn(const TaskOptions& options) {
  if (options.multiturn_facts < 1) {
    return Status::Error("multiturn: multiturn_facts must be at least 1");
  }
  std::vector<EvalSample> out;
  for (int i = 0; i < options.samples; ++i) {
    Result<EvalSample> sample = MultiTurnSample(options, i);
    if (!sample.ok()) return sample.status();
    out.push_back(std::move(sample).value());
  }
  return out;
}

}  // namespace primekv::eval_internal
