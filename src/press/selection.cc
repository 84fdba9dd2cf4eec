// Budgets and top-k selection, shared by every press.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "primekv/press/press.h"

namespace primekv {

int KeepCount(int n, double ratio) {
  if (n <= 0) return 0;
  const int keep = static_cast<int>(std::floor(n * (1.0 - ratio)));
  return std::clamp(keep, 1, n);
}

// KVCache-Factory's PyramidKV schedule as kvpress rescales it: the mean over layers is n(1-r).
int PyramidKeep(int n, double ratio, int layer, int n_layers, int window, double beta) {
  const double cap = window + n * (1.0 - ratio);
  double min_b = (cap - window) / beta;
  double max_b = 2 * (cap - window) - min_b;
  if (max_b >= n - window) {
    max_b = n - window;
    min_b = 2 * (cap - window) - max_b;
  }
  if (!(n >= max_b && max_b >= min_b && min_b >= window) || n_layers < 2)
    return KeepCount(n, ratio);
  const double b = max_b - layer * (max_b - min_b) / (n_layers - 1);
  return std::clamp(static_cast<int>(std::lround(b)), 1, n);
}

std::vector<int32_t> SelectTopK(std::span<const float> scores, int keep) {
  const int n = static_cast<int>(scores.size());
  keep = std::clamp(keep, 0, n);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    const float sa = scores[static_cast<size_t>(a)], sb = scores[static_cast<size_t>(b)];
    // NaN ranks last so a broken score never evicts a finite one.
    const bool na = std::isnan(sa), nb = std::isnan(sb);
    if (na != nb) return nb;
    if (!na && sa != sb) return sa > sb;
    return a < b;
  };
  std::nth_element(idx.begin(), idx.begin() + keep, idx.end(), better);
  idx.resize(static_cast<size_t>(keep));
  std::sort(idx.begin(), idx.end());
  return idx;
}

namespace {

// One head in a pooled selection: its scores and its uniform share.
struct PoolHead {
  std::span<const float> scores;
  int keep = 0;
};

// AdaKV's pooled top-k: each head keeps its top floor(alpha * keep) unconditionally, then one
// top-k across all the heads fills the total of their shares. `normalise`: scores that are not
// comparable are shifted to a zero minimum and scaled to sum to one per head, so heads compete
// on shares rather than on raw scales.
std::vector<std::vector<int32_t>> PooledTopK(std::span<const PoolHead> heads, double alpha,
                                             bool normalise) {
  struct Entry {
    float score;
    int head;
    int32_t row;
  };
  std::vector<Entry> all;
  size_t total_keep = 0;
  for (int h = 0; h < std::ssize(heads); ++h) {
    const std::span<const float> s = heads[static_cast<size_t>(h)].scores;
    const int n = static_cast<int>(s.size());
    const int keep = heads[static_cast<size_t>(h)].keep;
    total_keep += static_cast<size_t>(keep);
    float lo = 0;
    double sum = 0;
    if (normalise && n > 0) {
      lo = *std::min_element(s.begin(), s.end());
      for (float x : s) sum += static_cast<double>(x) - lo;
    }
    const auto forced = SelectTopK(s, static_cast<int>(std::floor(alpha * keep)));
    std::vector<char> is_forced(static_cast<size_t>(n), 0);
    for (int32_t r : forced) is_forced[static_cast<size_t>(r)] = 1;
    for (int32_t r = 0; r < n; ++r) {
      float v = s[static_cast<size_t>(r)];
      if (normalise) v = sum > 0 ? static_cast<float>((static_cast<double>(v) - lo) / sum) : 0.0f;
      if (is_forced[static_cast<size_t>(r)]) v = std::numeric_limits<float>::max();
      all.push_back({v, h, r});
    }
  }
  const size_t k = std::min(all.size(), total_keep);
  std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(),
                   [](const Entry& a, const Entry& b) {
                     if (a.score != b.score) return a.score > b.score;
                     if (a.row != b.row) return a.row < b.row;
                     return a.head < b.head;
                   });
  std::vector<std::vector<int32_t>> kept(heads.size());
  for (size_t i = 0; i < k; ++i) kept[static_cast<size_t>(all[i].head)].push_back(all[i].row);
  for (size_t h = 0; h < kept.size(); ++h) {
    std::sort(kept[h].begin(), kept[h].end());
    // A head is never left empty.
    if (kept[h].empty() && !heads[h].scores.empty()) kept[h].push_back(0);
  }
  return kept;
}

}  // namespace

std::vector<std::vector<int32_t>> SelectForLayer(const HeadScores& scores, double ratio,
                                                 const BudgetOptions& budget, bool comparable,
                                                 int layer, int n_layers) {
  if (budget.kind == BudgetKind::kGlobal) {
    // One layer alone: the global threshold restricted to it.
    auto kept = SelectAcrossLayers(std::span(&scores, 1), std::span(&ratio, 1), budget);
    return std::move(kept.front());
  }
  const int heads = static_cast<int>(scores.size());
  std::vector<PoolHead> pool(static_cast<size_t>(heads));
  for (int h = 0; h < heads; ++h) {
    const auto& s = scores[static_cast<size_t>(h)];
    pool[static_cast<size_t>(h)] = {s, KeepCount(static_cast<int>(s.size()), ratio)};
  }
  if (budget.kind == BudgetKind::kAdaptive)
    return PooledTopK(pool, budget.adaptive_alpha, !comparable);
  std::vector<std::vector<int32_t>> kept(static_cast<size_t>(heads));
  for (int h = 0; h < heads; ++h) {
    const int n = static_cast<int>(scores[static_cast<size_t>(h)].size());
    const int keep =
        budget.kind == BudgetKind::kPyramid
            ? PyramidKeep(n, ratio, layer, n_layers, budget.pyramid_window, budget.pyramid_beta)
            : pool[static_cast<size_t>(h)].keep;
    kept[static_cast<size_t>(h)] = SelectTopK(scores[static_cast<size_t>(h)], keep);
  }
  return kept;
}

std::vector<std::vector<std::vector<int32_t>>> SelectAcrossLayers(
    std::span<const HeadScores> layers, std::span<const double> ratios,
    const BudgetOptions& budget) {
  std::vector<PoolHead> pool;
  for (size_t l = 0; l < layers.size(); ++l) {
    for (const auto& s : layers[l])
      pool.push_back({s, KeepCount(static_cast<int>(s.size()), ratios[l])});
  }
  auto flat = PooledTopK(pool, budget.adaptive_alpha, /*normalise=*/false);
  std::vector<std::vector<std::vector<int32_t>>> kept(layers.size());
  auto next = flat.begin();
  for (size_t l = 0; l < layers.size(); ++l) {
    for (size_t h = 0; h < layers[l].size(); ++h) kept[l].push_back(std::move(*next++));
  }
  return kept;
}

std::vector<std::vector<std::vector<int32_t>>> SelectSharedPositions(
    std::span<const HeadScores> layers, std::span<const double> ratios) {
  size_t n = 0;
  for (const auto& heads : layers)
    for (const auto& s : heads) n = std::max(n, s.size());
  // Best and summed quantile per row; a head's ranks with SelectTopK's order (NaN last).
  std::vector<double> best(n, 0.0), sum(n, 0.0);
  std::vector<int32_t> order(n);
  for (const auto& heads : layers) {
    for (const auto& s : heads) {
      if (s.size() != n || n < 2) continue;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        const float sa = s[static_cast<size_t>(a)], sb = s[static_cast<size_t>(b)];
        const bool na = std::isnan(sa), nb = std::isnan(sb);
        if (na != nb) return na;
        return !na && sa < sb;
      });
      for (size_t r = 0; r < n; ++r) {
        const double q = static_cast<double>(r) / static_cast<double>(n - 1);
        const auto row = static_cast<size_t>(order[r]);
        best[row] = std::max(best[row], q);
        sum[row] += q;
      }
    }
  }
  std::vector<int32_t> rows(n);
  std::iota(rows.begin(), rows.end(), 0);
  std::stable_sort(rows.begin(), rows.end(), [&](int32_t a, int32_t b) {
    const auto ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
    if (best[ua] != best[ub]) return best[ua] > best[ub];
    return sum[ua] > sum[ub];
  });
  std::vector<std::vector<std::vector<int32_t>>> kept(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    std::vector<int32_t> top(rows.begin(),
                             rows.begin() + KeepCount(static_cast<int>(n), ratios[l]));
    std::sort(top.begin(), top.end());
    kept[l].assign(layers[l].size(), top);
  }
  return kept;
}

}  // namespace primekv
