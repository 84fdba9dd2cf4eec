// PrimeKV (Zhang & Ilvovsky, Neurocomputing): attention-free scores from the cache itself. The
// paper's formulas are not public; docs/design.md §2 derives this score from the exact removal
// identity D_i = a_i (o_{-i} - v_i): dropping entry i moves a head's output by its attention
// weight times how far its value sits from what the others would give. For one KV head, over
// its n cached entries (keys k_i, values v_i at positions pos_i; means kbar, vbar), the next
// position p and M = sum_{h in group} W_O^(h)T W_O^(h):
//   q_i     = R(p - pos_i) (k_i - kbar)               the query that would need entry i
//   r_i     = q_i . (k_i - kbar) / sqrt(d)             its mean-field log-attention, log a_i
//   c_i     = sqrt((v_i - vbar)^T M (v_i - vbar))      the residual-stream size of o_{-i} - v_i
//   score_i = r_i + log c_i                            log (a_i c_i)
// Nothing reads a query or an attention score. Cost per KV head: O(n d^2) for the quadratic
// form, O(n d) for the key side. The ablation variants of design.md §2 (other key and value
// sides, combinations, successive halving) are in primekv_ablations.cc.
#include <algorithm>
#include <cmath>
#include <memory>

#include "press/primekv_terms.h"
#include "press/scorers.h"

namespace primekv::press_internal {

// The variant scorer `r`'s parameters name, or nullptr when they name the formula above.
std::unique_ptr<Scorer> MakePrimeKvAblation(ParamReader& r);

namespace {

class PrimeKvScorer : public HeadScorer {
 public:
  PressNeeds Needs() const override { return {.values = true, .output_gram = true}; }
  // r_i + log c_i estimates log |W_O D_i|, a residual-stream perturbation in the same unit in
  // every layer (docs/design.md §3, global budget).
  bool ComparableAcrossLayers() const override { return true; }

  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    if (s.empty()) return;
    const MatView<const float> keys = in.Keys(h), values = in.Values(h);
    const std::vector<double> r = NextSelfQuery(keys, RopeFrameOf(in, h), /*centered=*/true);
    const std::vector<double> c = QuadraticNorms(Centered(values, Mean(values)), in.Gram(h));
    for (size_t i = 0; i < s.size(); ++i)
      s[i] = static_cast<float>(r[i] + std::log(std::max(c[i], 1e-30)));
  }
};

}  // namespace

ScorerResult MakePrimeKvScorer(const PressParams& p, const std::string& press) {
  ParamReader r(p, press);
  std::unique_ptr<Scorer> s = MakePrimeKvAblation(r);
  if (!s) s = std::make_unique<PrimeKvScorer>();
  PRIMEKV_RETURN_IF_ERROR(r.Finish());
  s->set_resolved_params(r.Resolved());
  return s;
}

}  // namespace primekv::press_internal
