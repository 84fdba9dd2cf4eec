#include "primekv/eval/fidelity.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "primekv/press/compressor.h"
#include "primekv/session/conversation.h"
#include "primekv/session/pipeline.h"
#include "primekv/util/mat.h"

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
  double mx = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  const double lse = mx + std::log(sum);
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = x[i] - lse;
}

// KL and top-1 agreement over NaN logits come out as nan and 1.0: refused instead, as generate,
// logits and eval refuse them. `what` says which pass produced them.
Status CheckFinite(MatView<const float> logits, const char* what) {
  for (int64_t t = 0; t < logits.rows; ++t) {
    const float* row = logits.Row(t);
    for (int64_t v = 0; v < logits.cols; ++v) {
      if (!std::isfinite(row[v])) {
        return Status::Error("fidelity: the model produced non-finite logits (NaN or infinity) " +
                             std::string(what) + " at continuation token " + std::to_string(t) +
                             ": its weights or activations overflow");
      }
    }
  }
  return Status::Ok();
}

// The full cache's view of the continuation T: logits predicting each token of T (the
// context's last logits predict T's first), every layer's attention outputs over T, and the
// capture holding the true future queries for the oracle.
struct FullView {
  FullView(const PressCapture& prefilled, int m, const ModelConfig& c)
      : logits(m, c.vocab_size), capture(prefilled), tap(&capture, c.n_layers) {}
  Mat<float> logits;  // [m, vocab]
  PressCapture capture;
  FidelityTap tap;  // feeds `capture`
};

Status RunFull(const Model& model, const PrefilledContext& pre, std::span<const Token> cont,
               ThreadPool& pool, ForwardWorkspace& ws, FullView& full) {
  const int m = static_cast<int>(cont.size()), V = model.config().vocab_size;
  std::copy(pre.last_logits.begin(), pre.last_logits.end(), full.logits.Row(0));
  full.capture.RecordFuture(true);
  KvCache cache = pre.cache.Clone();
  Mat<float> tmp(m, V);
  PRIMEKV_RETURN_IF_ERROR(model.Forward(cont, cache, {true}, tmp.view(), pool, ws, &full.tap));
  std::copy(tmp.Row(0), tmp.Row(m - 1), full.logits.Row(1));  // logits after T[0..m-2]
  full.capture.RecordFuture(false);
  return CheckFinite(full.logits.view(), "with the full cache");
}

// Mean KL(full || compressed) and top-1 agreement over the positions of T. Position 0 is
// identical by construction; the mean runs over the m - 1 informative ones when there are any.
void AddDistributionScores(const Mat<float>& full, const Mat<float>& comp, FidelityRow& row) {
  const int m = static_cast<int>(full.rows()), V = static_cast<int>(full.cols());
  std::vector<double> lp_full, lp_comp;
  double kl = 0, agree = 0;
  const int first = m > 1 ? 1 : 0;
  for (int t = first; t < m; ++t) {
    LogSoftmax(full.Row(t), V, lp_full);
    LogSoftmax(comp.Row(t), V, lp_comp);
    double k = 0;
    for (int v = 0; v < V; ++v) k += std::exp(lp_full[v]) * (lp_full[v] - lp_comp[v]);
    kl += k;
    const auto fa = std::max_element(lp_full.begin(), lp_full.end()) - lp_full.begin();
    const auto ca = std::max_element(lp_comp.begin(), lp_comp.end()) - lp_comp.begin();
    agree += fa == ca ? 1 : 0;
  }
  const double count = m - first;
  row.kl += kl / count;
  row.top1 += agree / count;
}

// Per layer: the mean over T of |o_full - o_comp| / |o_full| of the attention outputs.
void AddLayerErrors(const FidelityTap& full, const FidelityTap& comp, int m, int width,
                    FidelityRow& row) {
  for (size_t l = 0; l < row.layer_error.size(); ++l) {
    const MatView<const float> of(full.Output(static_cast<int>(l)).data(), m, width);
    const MatView<const float> oc(comp.Output(static_cast<int>(l)).data(), m, width);
    double err = 0;
    for (int t = 0; t < m; ++t) {
      double num = 0, den = 0;
      for (int j = 0; j < width; ++j) {
        const double a = of(t, j), b = oc(t, j);
        num += (a - b) * (a - b);
        den += a * a;
      }
      err += den > 0 ? std::sqrt(num / den) : 0.0;
    }
    row.layer_error[l] += err / m;
  }
}

// Compresses a conversation over a clone of the prefilled cache (the press reads the full
// view's capture, true future queries included), teacher-forces T through it, and adds the
// distances from the full cache's view to `row`.
Status AddCompressed(const Model& model, const Compressor& comp, double ratio,
                     const PrefilledContext& pre, FullView& full, std::span<const Token> cont,
                     ThreadPool& pool, ForwardWorkspace& ws, FidelityRow& row) {
  const ModelConfig& c = model.config();
  const int m = static_cast<int>(cont.size()), V = c.vocab_size;
  Conversation conv(model, comp, pool, {.cache = pre.cache.Clone()}, {},
                    {.capture = &full.capture, .workspace = &ws});
  PRIMEKV_RETURN_IF_ERROR(conv.CompressNow(ratio));
  KvCache& cache = conv.cache();
  FidelityTap tap(nullptr, c.n_layers);
  Mat<float> tmp(m, V), logits(m, V);
  PRIMEKV_RETURN_IF_ERROR(model.Forward(cont, cache, {true}, tmp.view(), pool, ws, &tap));
  // The compressed cache's first prediction comes from the context's last position, which
  // compression cannot change: reuse the full one.
  std::copy(pre.last_logits.begin(), pre.last_logits.end(), logits.Row(0));
  std::copy(tmp.Row(0), tmp.Row(m - 1), logits.Row(1));
  PRIMEKV_RETURN_IF_ERROR(CheckFinite(logits.view(), "with the compressed cache"));
  AddDistributionScores(full.logits, logits, row);
  AddLayerErrors(full.tap, tap, m, c.q_width(), row);
  ++row.contexts;
  return Status::Ok();
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
  PressNeeds needs;
  PRIMEKV_ASSIGN_OR_RETURN(const std::vector<Compressor> compressors,
                           MakeCompressors(model, options.presses, &needs));
  needs.future_queries = true;
  std::vector<FidelityRow> rows;  // one per (press, ratio), in that order
  for (const auto& comp : compressors) {
    for (double r : options.ratios) {
      if (!(r >= 0 && r < 1)) return Status::Error("fidelity: ratios must be in [0, 1)");
      rows.push_back({comp.press().name, r, 0, 0, 0, std::vector<double>(c.n_layers, 0.0)});
    }
  }
  const int total = static_cast<int>(contexts.size() * rows.size());
  int done = 0;
  ForwardWorkspace ws;
  for (size_t ci = 0; ci < contexts.size(); ++ci) {
    const auto& cont = continuations[ci];
    if (cont.empty() || contexts[ci].empty())
      return Status::Error("fidelity: empty context or continuation");
    PRIMEKV_ASSIGN_OR_RETURN(const PrefilledContext pre,
                             PrefillForPresses(model, needs, options.kv, contexts[ci], pool));
    FullView full(pre.capture, static_cast<int>(cont.size()), c);
    PRIMEKV_RETURN_IF_ERROR(RunFull(model, pre, cont, pool, ws, full));
    size_t ri = 0;
    for (const auto& comp : compressors) {
      for (double r : options.ratios) {
        PRIMEKV_RETURN_IF_ERROR(
            AddCompressed(model, comp, r, pre, full, cont, pool, ws, rows[ri++]));
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
