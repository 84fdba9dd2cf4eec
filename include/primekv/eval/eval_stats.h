// Statistics for evaluation reports: bootstrap confidence intervals of mean scores and paired
// comparisons of two presses on the same samples (docs/results.md says how to read them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "primekv/util/status.h"

namespace primekv {

struct BootstrapInterval {
  double mean = 0;  // the statistic on the data itself
  double lo = 0;    // percentile interval bounds
  double hi = 0;
  int n = 0;  // samples (all strata together)
};

// Mean over strata of each stratum's mean (tasks are strata, a task's samples are exchangeable),
// with a percentile bootstrap interval: every replicate redraws each stratum's samples with
// replacement, strata in order, index = SplitMix64() mod n_s. Quantiles interpolate linearly
// (numpy's default). Empty strata are ignored; no data gives all zeros.
BootstrapInterval StratifiedBootstrap(const std::vector<std::vector<double>>& strata,
                                      int replicates = 2000, uint64_t seed = 20261130,
                                      double level = 0.95);

// One sample's score for a press at a ratio: the mean over its turns.
struct SampleScores {
  // task -> press -> ratio -> sample id -> score in [0, 1]
  std::map<std::string, std::map<std::string, std::map<double, std::map<std::string, double>>>>
      scores;
};
// Reads DIR/results.jsonl (lines an interruption cut short are skipped).
Result<SampleScores> LoadSampleScores(const std::filesystem::path& results_jsonl);

// Markdown: per press and ratio, the mean over tasks x100 with its 95% interval and n.
std::string IntervalTable(const SampleScores& s);

// Markdown: press B minus press A on the samples both have, per ratio (a "none" side is taken
// at ratio 0 for every ratio of the other), averaged over tasks, with its paired 95% interval;
// then the same per task. Error when the presses share no samples.
Result<std::string> PairedComparison(const SampleScores& s, const std::string& a,
                                     const std::string& b);

}  // namespace primekv
