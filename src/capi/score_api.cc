// pk_score: a press's scores of one layer from a caller's arrays, through the same code as
// `primekv press-scores` (press/tensor_scores.h).
#include <cstring>
#include <string>

#include "capi/capi_internal.h"
#include "primekv/press/tensor_scores.h"

namespace primekv::capi {

namespace {

using Limits = LayerTensorLimits;

// A span over a caller's array of `count` elements; NULL is allowed only with count 0.
template <typename T>
Result<std::span<const T>> Array(const char* name, const T* p, int64_t count, bool optional) {
  if (count < 0) return Status::Error(std::string(name) + ": negative count");
  if (p == nullptr) {
    if (count == 0 && optional) return std::span<const T>{};
    return Status::Error(std::string(name) + " is NULL");
  }
  return std::span<const T>(p, static_cast<size_t>(count));
}

Result<LayerTensors> Tensors(const pk_score_input& x, std::vector<int32_t>& default_positions) {
  LayerTensors t;
  ModelConfig& c = t.config;
  // Each dimension is bounded before any product of them is formed.
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("n", x.n, 1, Limits::kMaxEntries));
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("n_heads", x.n_heads, 1, Limits::kMaxHeads));
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("n_kv_heads", x.n_kv_heads, 1, Limits::kMaxHeads));
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("head_dim", x.head_dim, 2, Limits::kMaxHeadDim));
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("d_model", x.d_model, 0, Limits::kMaxDModel));
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("n_window", x.n_window, 0, Limits::kMaxEntries));
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("n_context", x.n_context, 0, Limits::kMaxEntries));
  PRIMEKV_RETURN_IF_ERROR(CheckDimension("n_future", x.n_future, 0, Limits::kMaxEntries));
  c.n_heads = x.n_heads;
  c.n_kv_heads = x.n_kv_heads;
  c.head_dim = x.head_dim;
  c.d_model = x.d_model;
  c.n_layers = x.n_layers == 0 ? 1 : x.n_layers;
  c.rope_base = x.rope_base == 0 ? 10000.0f : x.rope_base;
  c.rope_style = x.rope_half != 0 ? RopeStyle::kHalf : RopeStyle::kAdjacent;
  t.layer = x.layer;
  t.n = x.n;
  t.next_position = x.next_position < 0 ? x.n : x.next_position;
  const int64_t kv = int64_t{x.n_kv_heads} * x.n * x.head_dim;
  const int64_t width = int64_t{x.n_heads} * x.head_dim;
  const int64_t d_model = x.d_model == 0 ? width : x.d_model;
  PRIMEKV_ASSIGN_OR_RETURN(t.keys, Array("keys", x.keys, kv, false));
  PRIMEKV_ASSIGN_OR_RETURN(t.values, Array("values", x.values, kv, false));
  if (x.positions == nullptr) {
    default_positions.resize(static_cast<size_t>(x.n));
    for (int i = 0; i < x.n; ++i) default_positions[static_cast<size_t>(i)] = i;
    t.positions = default_positions;
  } else {
    t.positions = {x.positions, static_cast<size_t>(x.n)};
  }
  PRIMEKV_ASSIGN_OR_RETURN(t.window_queries,
                           Array("window_queries", x.window_queries, x.n_window * width, true));
  PRIMEKV_ASSIGN_OR_RETURN(t.window_positions,
                           Array("window_positions", x.window_positions, x.n_window, true));
  PRIMEKV_ASSIGN_OR_RETURN(t.wo, Array("wo", x.wo, x.wo == nullptr ? 0 : d_model * width, true));
  PRIMEKV_ASSIGN_OR_RETURN(t.context_queries,
                           Array("context_queries", x.context_queries, x.n_context * width, true));
  PRIMEKV_ASSIGN_OR_RETURN(t.context_positions,
                           Array("context_positions", x.context_positions, x.n_context, true));
  PRIMEKV_ASSIGN_OR_RETURN(t.future_queries,
                           Array("future_queries", x.future_queries, x.n_future * width, true));
  return t;
}

}  // namespace

}  // namespace primekv::capi

using primekv::capi::Fail;
using primekv::capi::Guard;

extern "C" {

pk_score_input pk_score_input_default(void) {
  pk_score_input x;
  std::memset(&x, 0, sizeof(x));
  x.next_position = -1;
  return x;
}

pk_status pk_score(const char* press, const pk_score_input* input, float* scores, size_t capacity) {
  return Guard("pk_score", [&]() -> pk_status {
    PK_REQUIRE(press != nullptr && input != nullptr, "pk_score", "NULL argument");
    auto spec = primekv::ParsePressSpec(press);
    if (!spec.ok()) return primekv::capi::FromStatus("pk_score", spec.status());
    auto made = primekv::MakePress(*spec);
    if (!made.ok()) return primekv::capi::FromStatus("pk_score", made.status());
    std::vector<int32_t> positions;
    auto t = primekv::capi::Tensors(*input, positions);
    if (!t.ok()) return primekv::capi::FromStatus("pk_score", t.status());
    const size_t need = static_cast<size_t>(input->n_kv_heads) * static_cast<size_t>(input->n);
    PK_REQUIRE(scores != nullptr, "pk_score", "scores is NULL");
    if (capacity < need)
      return Fail(PK_ERR_BUFFER,
                  "pk_score: a buffer of " + std::to_string(capacity) +
                      " floats cannot hold n_kv_heads * n = " + std::to_string(need));
    auto s = primekv::ScoreLayerTensors(*made, std::move(t).value());
    if (!s.ok()) return primekv::capi::FromStatus("pk_score", s.status());
    float* at = scores;
    for (const auto& head : *s) at = std::copy(head.begin(), head.end(), at);
    return PK_OK;
  });
}

}  // extern "C"
