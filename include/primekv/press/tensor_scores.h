// One layer's scores from tensors a caller holds, with no model: `primekv press-scores` (files
// made by the numpy references) and the C API's pk_score (a researcher's arrays) both score here,
// so the two give the same numbers as the engine's Compressor would on the same inputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/press/press.h"
#include "primekv/util/status.h"

namespace primekv {

// A layer's tensors, row-major float32 / int32; every optional one is empty when not given.
struct LayerTensors {
  // n_heads, n_kv_heads, head_dim, d_model (0 = n_heads * head_dim), n_layers, rope_base,
  // rope_style; the rest is unused.
  ModelConfig config;
  int layer = 0;
  int n = 0;                                   // entries per KV head
  int32_t next_position = 0;                   // position of the next token (usually n)
  std::span<const float> keys, values;         // [n_kv_heads, n, head_dim], keys after RoPE
  std::span<const int32_t> positions;          // [n], ascending
  std::span<const float> window_queries;       // [w, n_heads * head_dim], after RoPE
  std::span<const int32_t> window_positions;   // [w]
  std::span<const float> wo;                   // W_O [d_model, n_heads * head_dim]
  std::span<const float> context_queries;      // [t, n_heads * head_dim], before RoPE
  std::span<const int32_t> context_positions;  // [t]
  std::span<const float> future_queries;       // [t, n_heads * head_dim], after RoPE
  std::span<const float> wq, wk, wv;           // projections [rows, d_model]: all or none
};

// Bounds on a caller's shape: far above any real layer, far below what would exhaust memory.
struct LayerTensorLimits {
  static constexpr int64_t kMaxEntries = int64_t{1} << 20;
  static constexpr int64_t kMaxHeads = 1024;
  static constexpr int64_t kMaxHeadDim = 1024;
  static constexpr int64_t kMaxLayers = 4096;
  static constexpr int64_t kMaxDModel = int64_t{1} << 16;
  static constexpr int64_t kMaxPosition = int64_t{1} << 30;
};

// An error naming `what` when v is outside [lo, hi]; a caller bounds each dimension with it
// before forming products of them.
Status CheckDimension(const char* what, int64_t v, int64_t lo, int64_t hi);

// The shape checks of `t.config` and every tensor's size against it, with a message naming the
// tensor; fills d_model when 0.
Status CheckLayerTensors(LayerTensors& t);

// Scores of every KV head ([n_kv_heads][n], higher = keep). Errors: a bad shape, a press that
// needs an input not given, or one that needs a model run (KVzip's second pass).
Result<HeadScores> ScoreLayerTensors(const Press& press, LayerTensors t);

}  // namespace primekv
