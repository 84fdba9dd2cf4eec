// The mean query of a context, recovered from its cache through the model's own projections
// (docs/design.md §2, PrimeKV's key=typical). A KV head's cached keys and values are linear in
// the normed layer inputs x_j: content keys c_j = R(-pos_j) k_j = W_k x_j (+ b_k), values
// v_j = W_v x_j (+ b_v). Their means therefore fix A xbar, A = [W_k; W_v], and the part of xbar
// that A sees is A^+ [cbar - b_k; vbar - b_v]; the group's mean content query is W_q xbar (+ b_q).
// Nothing here reads a query or an attention score: only the cache and the weights.
#pragma once

#include <span>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/util/mat.h"

namespace primekv {

// One KV head's map from its cached means y to the mean content (pre-RoPE) query of each query
// head g of its group: u_g = post_g G^-1 pre y + offset_g, with G's Cholesky factor kept, so a
// use costs one O(s^2) solve and building it no per-row solves.
struct MeanQueryMap {
  int group = 0;
  int head_dim = 0;
  // y = [cbar; vbar] (2 * head_dim). With per-head q/k norms (qwen3) the keys are not linear in
  // x, so y = cbar / k_gain (head_dim; the unit-RMS key direction, whose mean is W_k applied to
  // a weighted mean of x), and each u_g is RMS-normalised and scaled by q_gain, as the model does.
  int in_dim = 0;
  int solve_dim = 0;           // s: in_dim when A has no more rows than columns, else d_model
  std::vector<float> pre;      // [s][in_dim]: A^T when s = d_model, else empty (identity)
  std::vector<double> factor;  // [s][s]: lower Cholesky factor of G = A A^T (or A^T A)
  std::vector<float> post;     // [group * head_dim][s]: W_q A^T (or W_q)
  std::vector<float> offset;   // [group][head_dim]
  std::vector<float> k_gain, q_gain;  // [head_dim], q/k-norm models only
  float norm_eps = 0;
  bool empty() const { return post.empty(); }

  // The group's mean content query: the mean over g of u_g ([head_dim]). cbar: the mean of the
  // head's content keys; vbar: the mean of its values (unused with q/k norms).
  std::vector<double> MeanQuery(std::span<const double> cbar, std::span<const double> vbar) const;
  // u_g for every g before any norm ([group * head_dim]), from y itself.
  std::vector<double> Apply(std::span<const double> y) const;
};

// The weights one KV head's map is built from, as float rows: wq [group * d, D] (the group's
// query rows), wk and wv [d, D]; biases empty or [group * d] / [d]; k_gain/q_gain empty unless
// the model norms q and k per head. The pseudo-inverse is A^T (A A^T)^-1 when A has no more rows
// than columns (every real model: 2d <= D), else (A^T A)^-1 A^T, both by a Cholesky factor in
// double with a 1e-10 relative floor on the pivots (rank-deficient A).
MeanQueryMap BuildMeanQueryMap(MatView<const float> wq, MatView<const float> wk,
                               MatView<const float> wv, std::span<const float> bq,
                               std::span<const float> bk, std::span<const float> bv,
                               std::span<const float> k_gain, std::span<const float> q_gain,
                               float norm_eps);

// The map of KV head `kv_head` in `layer`, from the model's weights (dequantised rows).
MeanQueryMap MeanQueryMapOf(const Model& model, int layer, int kv_head);

}  // namespace primekv
