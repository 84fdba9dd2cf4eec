// Measuring a model's BudgetProfile: KVzip's one-threshold selection over calibration contexts,
// recorded as the share of each layer's KV head it keeps at each ratio.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/press/budget_profile.h"
#include "primekv/util/thread_pool.h"

namespace primekv {

struct CalibrationOptions {
  std::vector<double> ratios;  // ascending, in (0, 1)
  int window = 0;              // positions the second pass may use (0 = trained context)
  // Called after each context with (done, total).
  std::function<void(int, int)> progress;
  // Stop before a context expected to end past this many seconds (at the time per token so
  // far), after the first (0 = no limit); the profile then averages the contexts done.
  double max_seconds = 0;
};

// Each context (token ids, BOS included) is prefilled, read again by KVzip's reconstruction
// pass, and compressed by `kvzip` at every ratio from a shared copy of its cache. A head's share
// at a ratio is the mean over contexts of kept / context length.
Result<BudgetProfile> CalibrateBudgetProfile(const Model& model,
                                             std::span<const std::vector<Token>> contexts,
                                             const CalibrationOptions& options, ThreadPool& pool);

}  // namespace primekv
