#include "primekv/fidelity.h"

#include <cmath>

#include "primekv/compressor.h"
#include "primekv/pipeline.h"

namespace primekv {

namespace {

// Feeds queries to a PressCapture and keeps every layer's attention outputs.
class FidelityTap : public ForwardTap {
 public:
  FidelityTap(PressCapture* capture, int n_layers)
      : capture_(capture), outputs_(static_cast<size_t>(n_layers)) {}
  void OnQueries(int layer, std::span<const int32_t> pos, MatView<const float> q) override {
    if (capture_) capture_->OnQueries(layer, pos, q);
  }
  void OnAttentionOutput(int layer, MatView<const float> o) override {
    auto& v = outputs_[static_cast<size_t>(layer)];
    v.clear();
    for (int64_t r = 0; r < o.rows; ++r) v.insert(v.end(), o.Row(r), o.Row(r) + o.cols);
  }
  const std::vector<float>& Output(int layer) const { return outputs_[static_cast<size_t>(layer)]; }

 private:
  PressCapture* capture_;
  std::vector<std::vector<float>> outputs_;  // [layer][m * width]
};

void LogSoftmax(const float* x, int n, std::vector<double>& out) {
  out.resize(static_cast<size_t>(n));
  double mx = -1e300;
  for (int i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  const double lse = mx + std::log(sum);
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = x[i] - lse;
}

}  // namespace

double FidelityRow::mean_layer_error() const {
  double s = 0;
  for (double e : layer_error) s += e;
  return layer_error.empty() ? 0 : s / static_cast<double>(layer_error.size());
}

Result<std::vector<FidelityRow>> MeasureFidelity(const Model& model,
                                                 std::span<const std::vector<Token>> contexts,
                                                 std::span<const std::vector<Token>> continuations,
                                                 const FidelityOptions& options, ThreadPool& pool) {
  if (contexts.size() != continuations.size() || contexts.empty()) {
    return Status::Error("fidelity: need matching, non-empty lists of contexts and continuations");
  }
  const ModelConfig& c = model.config();
  const int V = c.vocab_size, L = c.n_layers, width = c.q_width();
  std::vector<Compressor> compressors;
  PressNeeds needs;
  for (const auto& name : options.presses) {
    auto spec = ParsePressSpec(name);
    if (!spec.ok()) return spec.status();
    auto press = MakePress(*spec);
    if (!press.ok()) return press.status();
    compressors.emplace_back(model, std::move(press).value());
    needs = UnionNeeds(needs, compressors.back().Needs());
  }
  needs.future_queries = true;
  std::vector<FidelityRow> rows;
  for (const auto& comp : compressors) {
    for (double r : options.ratios) {
      if (!(r >= 0 && r < 1)) return Status::Error("fidelity: ratios must be in [0, 1)");
      FidelityRow row;
      row.press = comp.press().name;
      row.ratio = r;
      row.layer_error.assign(static_cast<size_t>(L), 0.0);
      rows.push_back(row);
    }
  }
  const int total = static_cast<int>(contexts.size() * rows.size());
  int done = 0;
  ForwardWorkspace ws;
  std::vector<double> lp_full, lp_comp;
  for (size_t ci = 0; ci < contexts.size(); ++ci) {
    const auto& cont = continuations[ci];
    const int m = static_cast<int>(cont.size());
    if (m == 0 || contexts[ci].empty())
      return Status::Error("fidelity: empty context or continuation");
    auto pre = PrefillContext(model, needs, options.kv, contexts[ci], pool);
    if (!pre.ok()) return pre.status();
    // The full cache's view of T: logits (the context's last logit predicts T's first token),
    // attention outputs, and the true future queries for the oracle.
    std::vector<float> full_logits(static_cast<size_t>(m) * V),
        comp_logits(static_cast<size_t>(m) * V);
    std::copy(pre->last_logits.begin(), pre->last_logits.end(), full_logits.begin());
    PressCapture capture = pre->capture;
    capture.RecordFuture(true);
    FidelityTap full_tap(&capture, L);
    {
      KvCache full = pre->cache.Clone();
      std::vector<float> tmp(static_cast<size_t>(m) * V);
      if (Status s = model.Forward(cont, full, {true}, {tmp.data(), m, V}, pool, ws, &full_tap);
          !s.ok())
        return s;
      std::copy(tmp.begin(), tmp.end() - V, full_logits.begin() + V);  // logits after T[0..m-2]
    }
    capture.RecordFuture(false);
    size_t ri = 0;
    for (const auto& comp : compressors) {
      for (double r : options.ratios) {
        FidelityRow& row = rows[ri++];
        KvCache cache = pre->cache.Clone();
        if (Status s = comp.Compress(cache, r, &capture, pool); !s.ok()) return s;
        // The compressed cache's first prediction comes from the context's last position, which
        // compression cannot change; it is recomputed by re-running nothing: reuse the full one.
        FidelityTap tap(nullptr, L);
        std::vector<float> tmp(static_cast<size_t>(m) * V);
        if (Status s = model.Forward(cont, cache, {true}, {tmp.data(), m, V}, pool, ws, &tap);
            !s.ok())
          return s;
        std::copy(pre->last_logits.begin(), pre->last_logits.end(), comp_logits.begin());
        std::copy(tmp.begin(), tmp.end() - V, comp_logits.begin() + V);
        double kl = 0, agree = 0;
        // Position 0 is identical by construction; average over the m - 1 informative ones when
        // there are any.
        const int first = m > 1 ? 1 : 0;
        for (int t = first; t < m; ++t) {
          LogSoftmax(full_logits.data() + static_cast<size_t>(t) * V, V, lp_full);
          LogSoftmax(comp_logits.data() + static_cast<size_t>(t) * V, V, lp_comp);
          double k = 0;
          for (int v = 0; v < V; ++v)
            k += std::exp(lp_full[static_cast<size_t>(v)]) *
                 (lp_full[static_cast<size_t>(v)] - lp_comp[static_cast<size_t>(v)]);
          kl += k;
          const auto fa = std::max_element(lp_full.begin(), lp_full.end()) - lp_full.begin();
          const auto ca = std::max_element(lp_comp.begin(), lp_comp.end()) - lp_comp.begin();
          agree += fa == ca ? 1 : 0;
        }
        const double count = m - first;
        row.kl += kl / count;
        row.top1 += agree / count;
        for (int l = 0; l < L; ++l) {
          const auto& of = full_tap.Output(l);
          const auto& oc = tap.Output(l);
          double err = 0;
          for (int t = 0; t < m; ++t) {
            double num = 0, den = 0;
            for (int j = 0; j < width; ++j) {
              const double a = of[static_cast<size_t>(t) * width + j],
                           b = oc[static_cast<size_t>(t) * width + j];
              num += (a - b) * (a - b);
              den += a * a;
            }
            err += den > 0 ? std::sqrt(num / den) : 0.0;
          }
          row.layer_error[static_cast<size_t>(l)] += err / m;
        }
        ++row.contexts;
        if (options.progress) options.progress(++done, total);
      }
    }
  }
  for (auto& row : rows) {
    const double n = std::max(1, row.contexts);
    row.kl /= n;
    row.top1 /= n;
    for (auto& e : row.layer_error) e /= n;
  }
  return rows;
}

}  // namespace primekv
