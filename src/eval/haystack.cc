// Haystack streams, needle insertion by depth, token counting and the length fitting shared by
// the generators.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "eval/eval_internal.h"
#include "primekv/tokenizer/tokenizer.h"

namespace primekv {

int CountTextTokens(std::string_view text, const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return static_cast<int>(eval_internal::PySplit(text).size());
  return static_cast<int>(tokenizer->Encode(text, /*add_bos=*/true).size());
}

int CountSampleTokens(const EvalSample& sample, const Tokenizer* tokenizer) {
  std::string text = sample.context;
  int generated = 0;
  for (const EvalTurn& turn : sample.turns) {
    text += turn.question;
    text += turn.answer_prefix;
    generated += turn.max_new_tokens;
  }
  return CountTextTokens(text, tokenizer) + generated;
}

namespace eval_internal {

UnitStream::UnitStream(uint64_t seed, std::function<std::string(Rng&)> make)
    : rng_(seed), make_(std::move(make)) {}

const std::string& UnitStream::Get(size_t i) {
  while (units_.size() <= i) units_.push_back(make_(rng_));
  return units_[i];
}

std::string UnitPrefix(std::string_view unit, int tokens, const Tokenizer* tokenizer) {
  if (tokens <= 0) return {};
  if (tokenizer == nullptr) {
    const std::vector<std::string_view> words = PySplit(unit);
    std::string out;
    for (int i = 0; i < tokens && i < static_cast<int>(words.size()); ++i) {
      if (i > 0) out += ' ';
      out += words[static_cast<size_t>(i)];
    }
    return out;
  }
  std::vector<Token> ids = tokenizer->Encode(unit, /*add_bos=*/false);
  if (static_cast<int>(ids.size()) > tokens) ids.resize(static_cast<size_t>(tokens));
  return std::string(PyStrip(tokenizer->Decode(ids, /*strip_leading_space=*/true)));
}

int UnitTokens(std::string_view unit, const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return static_cast<int>(PySplit(unit).size());
  return static_cast<int>(tokenizer->Encode(unit, /*add_bos=*/false).size());
}

namespace {

// Largest x in [0, limit) with cost(x) <= budget, given cost(0) = c0 <= budget and cost(limit)
// taken to exceed it. The cost grows about linearly, so secant guesses shrink the range in a few
// evaluations (each encodes a whole prompt); bisection finishes what they leave.
int LargestFitting(const std::function<int(int)>& cost, int c0, int limit, int budget,
                   int first_guess) {
  int lo = 0, hi = limit;
  int guess = first_guess;
  for (int iter = 0; iter < 8 && hi - lo > 1; ++iter) {
    guess = std::clamp(guess, lo + 1, hi - 1);
    const int c = cost(guess);
    if (c <= budget) {
      lo = guess;
    } else {
      hi = guess;
    }
    const double slope = std::max(1e-6, static_cast<double>(c - c0) / guess);
    guess = static_cast<int>(std::min<double>(hi, std::floor((budget - c0) / slope)));
  }
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    if (cost(mid) <= budget) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace

Result<EvalSample> FitSample(std::string_view task, const TaskOptions& options,
                             const SampleBuilder& build,
                             const std::function<std::string(int n)>& partial_unit) {
  // Far beyond any context length; a builder that ignores n ends here instead of looping.
  constexpr int kMaxUnits = 1 << 22;
  const int budget = options.target_tokens - options.reserved_tokens;
  const auto cost = [&](int n, int partial) {
    return CountSampleTokens(build(n, partial), options.tokenizer);
  };
  const int base = cost(0, 0);
  if (base > budget) {
    return Status::Error(std::string(task) + ": target of " + std::to_string(budget) +
                         " tokens is too small; the sample without haystack takes " +
                         std::to_string(base));
  }
  const int c1 = cost(1, 0);
  int n = 0;
  if (c1 <= budget) {
    const int guess = (budget - base) / std::max(1, c1 - base);
    n = LargestFitting([&](int x) { return cost(x, 0); }, base, kMaxUnits, budget, guess);
    if (n >= kMaxUnits - 1) {
      return Status::Error(std::string(task) + ": haystack does not grow with its size");
    }
  }
  int partial = 0;
  if (partial_unit) {
    const int unit_tokens = UnitTokens(partial_unit(n), options.tokenizer);
    const int c_n = cost(n, 0);
    if (unit_tokens > 1) {
      partial =
          LargestFitting([&](int m) { return cost(n, m); }, c_n, unit_tokens, budget, budget - c_n);
    }
  }
  return build(n, partial);
}

std::vector<std::string> InsertAtDepths(std::vector<std::string> units,
                                        std::span<const std::pair<double, std::string>> items) {
  const size_t size = units.size();
  std::vector<std::pair<size_t, size_t>> gaps;  // (gap, item index)
  for (size_t k = 0; k < items.size(); ++k) {
    const double depth = std::clamp(items[k].first, 0.0, 1.0);
    const size_t gap =
        std::min(size, static_cast<size_t>(std::floor(depth * static_cast<double>(size + 1))));
    gaps.emplace_back(gap, k);
  }
  std::stable_sort(gaps.begin(), gaps.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  out.reserve(size + items.size());
  size_t next = 0;
  for (size_t gap = 0; gap <= size; ++gap) {
    while (next < gaps.size() && gaps[next].first == gap)
      out.push_back(items[gaps[next++].second].second);
    if (gap < size) out.push_back(std::move(units[gap]));
  }
  return out;
}

}  // namespace eval_internal
}  // namespace primekv
