#include "primekv/session/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "primekv/press/compressor.h"
#include "primekv/session/pipeline.h"

namespace primekv {

Result<BudgetProfile> CalibrateBudgetProfile(const Model& model,
                                             std::span<const std::vector<Token>> contexts,
                                             const CalibrationOptions& options, ThreadPool& pool) {
  const ModelConfig& c = model.config();
  BudgetProfile p;
  p.method = "kvzip";
  p.n_layers = c.n_layers;
  p.n_kv_heads = c.n_kv_heads;
  p.ratios = options.ratios;
  p.contexts = static_cast<int>(contexts.size());
  if (contexts.empty()) return Status::Error("calibrate: no contexts");
  const std::vector<std::string> names = {"kvzip"};
  PressNeeds needs;
  PRIMEKV_ASSIGN_OR_RETURN(std::vector<Compressor> kvzip, MakeCompressors(model, names, &needs));
  const size_t cells = static_cast<size_t>(c.n_layers) * static_cast<size_t>(c.n_kv_heads);
  p.fractions.assign(p.ratios.size() * cells, 0.0);
  std::vector<double> squares(p.fractions.size(), 0.0);
  const auto start = std::chrono::steady_clock::now();
  size_t done = 0;
  double tokens = 0;  // in the contexts done
  for (size_t i = 0; i < contexts.size(); ++i) {
    const std::span<const Token> context = contexts[i];
    PRIMEKV_ASSIGN_OR_RETURN(PrefilledContext pre,
                             PrefillForPresses(model, needs, {}, context, pool, options.window));
    const double n = static_cast<double>(context.size());
    for (size_t r = 0; r < p.ratios.size(); ++r) {
      KvCache copy = pre.cache.Share();  // compaction copies the pages it changes
      PRIMEKV_RETURN_IF_ERROR(kvzip[0].Compress(copy, p.ratios[r], &pre.capture, pool));
      for (int l = 0; l < c.n_layers; ++l) {
        for (int h = 0; h < c.n_kv_heads; ++h) {
          const size_t at = r * cells + static_cast<size_t>(l * c.n_kv_heads + h);
          const double share = copy.Length(l, h) / n;
          p.fractions[at] += share;
          squares[at] += share * share;
        }
      }
    }
    done = i + 1;
    tokens += n;
    if (options.progress) options.progress(static_cast<int>(done), p.contexts);
    const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start;
    // The next context is expected to cost the time per token so far times its tokens: stop
    // before one that would end past the budget, not after it.
    const double next = i + 1 < contexts.size()
                            ? spent.count() / tokens * static_cast<double>(contexts[i + 1].size())
                            : 0.0;
    if (options.max_seconds > 0 && spent.count() + next > options.max_seconds) break;
  }
  p.contexts = static_cast<int>(done);
  const double m = static_cast<double>(done);
  for (double& f : p.fractions) f /= m;
  for (double& s : squares) s /= m;
  p.spread.resize(p.fractions.size());
  for (size_t i = 0; i < p.fractions.size(); ++i)
    p.spread[i] = std::sqrt(std::max(0.0, squares[i] - p.fractions[i] * p.fractions[i]));
  PRIMEKV_RETURN_IF_ERROR(p.Validate());
  return p;
}

}  // namespace primekv
