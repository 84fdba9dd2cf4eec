#include "primekv/press/tensor_scores.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "primekv/press/compressor.h"
#include "primekv/press/mean_query.h"
#include "primekv/press/output_gram.h"

namespace primekv {

namespace {

using Limits = LayerTensorLimits;

// A tensor's element count against its shape; an optional one may be empty.
Status CheckSize(const char* what, size_t got, size_t expected, bool optional) {
  if (optional && got == 0) return Status::Ok();
  if (got == expected) return Status::Ok();
  return Status::Error(std::string(what) + " has " + std::to_string(got) + " elements, expected " +
                       std::to_string(expected));
}

// Rows of a [rows, width] tensor whose row count the caller chose, checked against its positions.
Status CheckRows(const char* what, size_t elements, size_t positions, int64_t width) {
  if (elements % static_cast<size_t>(width) != 0)
    return Status::Error(
        std::string(what) + " has " + std::to_string(elements) +
        " elements, not a multiple of n_heads * head_dim = " + std::to_string(width));
  if (elements / static_cast<size_t>(width) != positions)
    return Status::Error(std::string(what) + " has " +
                         std::to_string(elements / static_cast<size_t>(width)) + " rows but " +
                         std::to_string(positions) + " positions");
  if (elements / static_cast<size_t>(width) > static_cast<size_t>(Limits::kMaxEntries))
    return Status::Error(std::string(what) + " has too many rows");
  return Status::Ok();
}

Status CheckShape(ModelConfig& c, const LayerTensors& t) {
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("n", t.n, 1, Limits::kMaxEntries));
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("n_heads", c.n_heads, 1, Limits::kMaxHeads));
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("n_kv_heads", c.n_kv_heads, 1, c.n_heads));
  if (c.n_heads % c.n_kv_heads != 0)
    return Status::Error("n_heads " + std::to_string(c.n_heads) + " is not a multiple of " +
                         "n_kv_heads " + std::to_string(c.n_kv_heads));
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("head_dim", c.head_dim, 2, Limits::kMaxHeadDim));
  if (c.head_dim % 2 != 0)
    return Status::Error("head_dim " + std::to_string(c.head_dim) + " is odd (RoPE rotates pairs)");
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("d_model", c.d_model, 0, Limits::kMaxDModel));
  if (c.d_model == 0) c.d_model = c.q_width();
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("n_layers", c.n_layers, 1, Limits::kMaxLayers));
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("layer", t.layer, 0, c.n_layers - 1));
  PRIMEKV_RETURN_IF_ERROR(
      CheckDimension("next_position", t.next_position, 0, Limits::kMaxPosition));
  if (!(c.rope_base > 0) || !std::isfinite(c.rope_base))
    return Status::Error("rope_base must be a finite float > 0");
  return Status::Ok();
}

// A NaN or infinite input makes some scorers return NaN scores and others finite ones that hide
// it (expected_attention, lagkv): refused, naming the tensor and the first bad element.
Status CheckFinite(const char* what, std::span<const float> x) {
  const auto bad = std::find_if(x.begin(), x.end(), [](float v) { return !std::isfinite(v); });
  if (bad == x.end()) return Status::Ok();
  return Status::Error(std::string(what) + "[" + std::to_string(bad - x.begin()) + "] is " +
                       (std::isnan(*bad) ? "NaN"
                        : *bad > 0       ? "+inf"
                                         : "-inf") +
                       "; " + what + " must be finite");
}

Status CheckTensors(const ModelConfig& c, const LayerTensors& t) {
  const auto entries = static_cast<size_t>(c.n_kv_heads) * static_cast<size_t>(t.n) *
                       static_cast<size_t>(c.head_dim);
  PRIMEKV_RETURN_IF_ERROR(CheckSize("keys", t.keys.size(), entries, false));
  PRIMEKV_RETURN_IF_ERROR(CheckSize("values", t.values.size(), entries, false));
  PRIMEKV_RETURN_IF_ERROR(
      CheckSize("positions", t.positions.size(), static_cast<size_t>(t.n), false));
  for (size_t i = 0; i < t.positions.size(); ++i) {
    if (t.positions[i] < 0 || (i > 0 && t.positions[i] <= t.positions[i - 1]))
      return Status::Error("positions must be >= 0 and strictly ascending");
  }
  const int64_t width = c.q_width();
  PRIMEKV_RETURN_IF_ERROR(
      CheckRows("window_queries", t.window_queries.size(), t.window_positions.size(), width));
  PRIMEKV_RETURN_IF_ERROR(
      CheckRows("context_queries", t.context_queries.size(), t.context_positions.size(), width));
  if (t.future_queries.size() % static_cast<size_t>(width) != 0)
    return Status::Error("future_queries is not a whole number of rows of n_heads * head_dim");
  const auto dm = static_cast<size_t>(c.d_model);
  PRIMEKV_RETURN_IF_ERROR(CheckSize("wo", t.wo.size(), dm * static_cast<size_t>(width), true));
  PRIMEKV_RETURN_IF_ERROR(CheckSize("wq", t.wq.size(), dm * static_cast<size_t>(width), true));
  PRIMEKV_RETURN_IF_ERROR(CheckSize("wk", t.wk.size(), dm * c.kv_width(), true));
  PRIMEKV_RETURN_IF_ERROR(CheckSize("wv", t.wv.size(), dm * c.kv_width(), true));
  if (t.wq.empty() != t.wk.empty() || t.wq.empty() != t.wv.empty())
    return Status::Error("wq, wk and wv come together");
  const std::pair<const char*, std::span<const float>> floats[] = {
      {"keys", t.keys},
      {"values", t.values},
      {"window_queries", t.window_queries},
      {"wo", t.wo},
      {"context_queries", t.context_queries},
      {"future_queries", t.future_queries},
      {"wq", t.wq},
      {"wk", t.wk},
      {"wv", t.wv}};
  for (const auto& [what, x] : floats) PRIMEKV_RETURN_IF_ERROR(CheckFinite(what, x));
  return Status::Ok();
}

// RoPE inverse frequencies base^(-2i/d), each a positive finite float (as Model::Load demands).
Result<std::vector<float>> InvFreq(const ModelConfig& c) {
  std::vector<float> out;
  for (int i = 0; i < c.head_dim / 2; ++i) {
    const auto v = static_cast<float>(std::pow(c.rope_base, -2.0 * i / c.head_dim));
    if (!(v > 0) || !std::isfinite(v))
      return Status::Error("rope_base gives a RoPE inverse frequency of " + std::to_string(v) +
                           " at pair " + std::to_string(i) + "; it must be a finite float > 0");
    out.push_back(v);
  }
  return out;
}

// W_O Gram per KV head, stacked [n_kv_heads][d][d].
std::vector<float> OutputGrams(const ModelConfig& c, std::span<const float> wo) {
  std::vector<float> gram;
  for (int h = 0; h < c.n_kv_heads; ++h) {
    const std::vector<float> one = OutputGram(c, {wo.data(), c.d_model, c.q_width()}, h);
    gram.insert(gram.end(), one.begin(), one.end());
  }
  return gram;
}

// Query statistics from raw pre-RoPE context queries (past the sinks, as the engine does).
QueryStats ContextStats(const ModelConfig& c, const LayerTensors& t) {
  const int d = c.head_dim;
  QueryStats stats;
  stats.sum.assign(static_cast<size_t>(c.n_heads) * d, 0.0);
  stats.sum_sq.assign(static_cast<size_t>(c.n_heads) * d * d, 0.0);
  const MatView<const float> q(t.context_queries.data(), std::ssize(t.context_positions),
                               c.q_width());
  for (int64_t r = 0; r < q.rows; ++r) {
    if (t.context_positions[r] < PressCapture::kStatsSinks) continue;
    for (int h = 0; h < c.n_heads; ++h) {
      const float* x = q.Row(r) + static_cast<int64_t>(h) * d;
      for (int a = 0; a < d; ++a) {
        stats.sum[h * d + a] += x[a];
        for (int b = 0; b < d; ++b)
          stats.sum_sq[(static_cast<size_t>(h) * d + a) * d + b] +=
              static_cast<double>(x[a]) * x[b];
      }
    }
    ++stats.count;
  }
  return stats;
}

// Everything LayerInput points into, kept alive together.
struct Inputs {
  std::vector<HeadEntries> heads;
  std::vector<float> inv_freq, gram;
  QueryStats stats;
  std::vector<MeanQueryMap> mean_query;
};

void FillInput(const LayerTensors& t, const Press& press, Inputs& x, LayerInput& in) {
  const ModelConfig& c = t.config;
  const int d = c.head_dim, width = c.q_width();
  const size_t per_head = static_cast<size_t>(t.n) * d;
  for (int h = 0; h < c.n_kv_heads; ++h) {
    const auto keys = t.keys.subspan(h * per_head, per_head);
    const auto values = t.values.subspan(h * per_head, per_head);
    x.heads.push_back({{keys.begin(), keys.end()},
                       {values.begin(), values.end()},
                       {t.positions.begin(), t.positions.end()}});
  }
  in.layer = t.layer;
  in.next_position = t.next_position;
  in.rope_inv_freq = x.inv_freq;
  in.heads = x.heads;
  if (!t.window_queries.empty()) {
    const int64_t rows = std::ssize(t.window_queries) / width;
    // The engine's capture keeps only the last rows the scorer asked for; do the same.
    const int64_t keep = std::min<int64_t>(rows, std::max(1, press.scorer->Needs().window_queries));
    in.window_queries = {t.window_queries.data() + (rows - keep) * width, keep, width};
    in.window_positions = t.window_positions.subspan(static_cast<size_t>(rows - keep));
  }
  if (!t.wo.empty()) {
    x.gram = OutputGrams(c, t.wo);
    in.output_gram = x.gram;
    in.output_weights = {t.wo.data(), c.d_model, width};
  }
  if (!t.context_queries.empty()) {
    x.stats = ContextStats(c, t);
    in.query_stats = &x.stats;
  }
  if (!t.future_queries.empty())
    in.future_queries = {t.future_queries.data(), std::ssize(t.future_queries) / width, width};
  if (!t.wq.empty()) {
    const int64_t dm = c.d_model, gd = int64_t{c.group()} * d;
    for (int h = 0; h < c.n_kv_heads; ++h) {
      x.mean_query.push_back(BuildMeanQueryMap(
          {t.wq.data() + h * gd * dm, gd, dm}, {t.wk.data() + int64_t{h} * d * dm, d, dm},
          {t.wv.data() + int64_t{h} * d * dm, d, dm}, {}, {}, {}, {}, {}, c.rms_eps));
    }
    in.mean_query = x.mean_query;
  }
}

}  // namespace

Status CheckDimension(const char* what, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return Status::Ok();
  return Status::Error(std::string(what) + " is " + std::to_string(v) + ", outside [" +
                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

Status CheckLayerTensors(LayerTensors& t) {
  PRIMEKV_RETURN_IF_ERROR(CheckShape(t.config, t));
  return CheckTensors(t.config, t);
}

Result<HeadScores> ScoreLayerTensors(const Press& press, LayerTensors t) {
  if (!press.scorer) return Status::Error("press " + press.name + " has no scores");
  PRIMEKV_RETURN_IF_ERROR(CheckLayerTensors(t));
  Inputs x;
  PRIMEKV_ASSIGN_OR_RETURN(x.inv_freq, InvFreq(t.config));
  LayerInput in(t.config);
  FillInput(t, press, x, in);
  if (Status s = CheckLayerInput(press.scorer->Needs(), in, press.name); !s.ok()) {
    const char* why = press.scorer->Needs().reconstruction
                          ? " (scoring tensors runs no model, so it cannot score this press)"
                          : "";
    return Status::Error(s.message() + why);
  }
  HeadScores scores(static_cast<size_t>(t.config.n_kv_heads),
                    std::vector<float>(static_cast<size_t>(t.n)));
  press.scorer->Score(in, scores);
  return scores;
}

}  // namespace primekv
