// Attention over the ragged KV cache without ever forming a score matrix over the cache:
// tiles of queries meet pages of keys with a running max and running sum per query row
// (FlashAttention-style online softmax). Decode is the same kernel with one query row.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "primekv/kv/kv_cache.h"
#include "primekv/util/tensor.h"
#include "primekv/util/thread_pool.h"

namespace primekv {

struct AttnShape {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 0;    // usually 1/sqrt(head_dim)
  float softcap = 0;  // > 0: a score s becomes softcap * tanh(s / softcap) (gemma2)
  int window = 0;     // > 0: a query at p sees keys at positions > p - window only
  int group() const { return n_heads / n_kv_heads; }
};

// Per-thread scratch reused across calls, so decoding allocates nothing per token.
// Its size depends on the tile shape only, never on the cache length.
class AttentionWorkspace {
 public:
  static constexpr int kQueryTile = 64;  // query rows per task

  // Grows buffers for `threads` workers; no-op when already large enough.
  void Reserve(int threads, const AttnShape& shape, int page_tokens);
  float* Buffer(int thread) { return buffers_[static_cast<size_t>(thread)].data(); }
  size_t BytesPerThread() const { return floats_per_thread_ * sizeof(float); }
  // Largest total scratch ever reserved (all threads), for tests of O(tile) memory.
  size_t HighWaterBytes() const { return high_water_bytes_; }

 private:
  std::vector<std::vector<float>> buffers_;
  size_t floats_per_thread_ = 0;
  size_t high_water_bytes_ = 0;
};

// out[i] = softmax over cache entries e of `layer` with position(e) <= q_pos[i] of
// scale * q_i . k_e, applied to v_e; query head h reads KV head h / group.
// q and out are [n, n_heads * head_dim]; q_pos [n] ascending.
// Returns false when some query row met a non-finite score (a NaN or infinite query, or a dot
// product that overflows float): the softmax cannot weigh such a row, and its output is then
// meaningless. The check costs one comparison per row and page; keys are assumed finite (the
// forward pass checks them before they enter the cache).
bool AttendCached(const AttnShape& shape, MatView<const float> q, std::span<const int32_t> q_pos,
                  const KvCache& cache, int layer, MatView<float> out, ThreadPool& pool,
                  AttentionWorkspace& workspace);

// Dot product of float rows accumulated in double (press scores, reference attention).
inline double DotF64(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}
inline double NormF64(const float* a, int64_t n) { return std::sqrt(DotF64(a, a, n)); }

// Softmax in double, in place: x_j <- exp(x_j - max) / sum, and entries at -inf (masked) <- 0.
// Returns the sum of exponentials; when every entry is masked the row is left all zero.
inline double MaskedSoftmax(std::span<double> x) {
  constexpr double kMasked = -std::numeric_limits<double>::infinity();
  double mx = kMasked;
  for (double v : x) mx = std::max(mx, v);
  double sum = 0;
  for (double& v : x) {
    v = v == kMasked ? 0.0 : std::exp(v - mx);
    sum += v;
  }
  if (sum > 0) {
    for (double& v : x) v /= sum;
  }
  return sum;
}

// One query's causal attention in double over keys [n, d] (rows with position > q_pos are
// masked): probs[j] = softmax_j(scale * q . k_j).
inline void CausalAttention(const float* q, MatView<const float> keys,
                            std::span<const int32_t> positions, int32_t q_pos, double scale,
                            std::span<double> probs) {
  for (int64_t j = 0; j < keys.rows; ++j) {
    probs[static_cast<size_t>(j)] = positions[static_cast<size_t>(j)] > q_pos
                                        ? -std::numeric_limits<double>::infinity()
                                        : DotF64(q, keys.Row(j), keys.cols) * scale;
  }
  MaskedSoftmax(probs);
}

// Test oracle: the same result by a two-pass softmax in double from copied rows.
void AttendReference(const AttnShape& shape, MatView<const float> q, std::span<const int32_t> q_pos,
                     const KvCache& cache, int layer, MatView<float> out);

}  // namespace primekv
