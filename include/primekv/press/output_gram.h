// The W_O Gram matrix of a KV head: the metric in which PrimeKV's value side measures how far a
// value moves the residual stream (docs/design.md §2), c_i^2 = v^T M v with
// M = sum_{h in group} W_O^(h)T W_O^(h).
#pragma once

#include <functional>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/util/mat.h"

namespace primekv {

// M of KV head `kv_head` in `layer`: [head_dim, head_dim] row-major, float products of row blocks
// summed in double.
std::vector<float> OutputGram(const Model& model, int layer, int kv_head);

// The same for a float W_O [d_model, n_heads * head_dim] held by the caller.
std::vector<float> OutputGram(const ModelConfig& config, MatView<const float> wo, int kv_head);

}  // namespace primekv
