// The terms of PrimeKV's score (docs/design.md §2) that the default formula (primekv.cc) and its
// ablation variants (primekv_ablations.cc) share.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "press/scorer_util.h"

namespace primekv::press_internal {

// Row blocks of at most kRows rows bound the scratch of the GEMMs of the terms.
inline constexpr int kRows = 512;

// Column means of x [n, d].
std::vector<double> Mean(MatView<const float> x);

// x - m, row by row, rounded to float.
Mat<float> Centered(MatView<const float> x, const std::vector<double>& m);

// sqrt(x_i^T M x_i) for each row.
std::vector<double> QuadraticNorms(const Mat<float>& x, MatView<const float> m);

// Where the cached entries sit in RoPE's rotation, and where the next query will.
struct RopeFrame {
  std::span<const int32_t> positions;  // [n], of the rows being scored
  std::span<const float> inv_freq;     // [d / 2]
  bool half = false;                   // NeoX pairing (f, f + pairs), else (2f, 2f + 1)
  int32_t next_position = 0;
};

// cos and sin of dist * theta_f for every rotary pair f and integer distance |dist| <= max_dist,
// from two small tables by angle addition (dist = 64 hi + lo): a compression asks for n
// distances per head, and n * d / 2 calls of sin and cos were most of the press's time.
class RotationTable {
 public:
  RotationTable(const RopeFrame& rope, int64_t n);
  std::pair<double, double> CosSin(int64_t dist, int64_t f) const {
    const int64_t a = dist < 0 ? -dist : dist;
    const size_t l = static_cast<size_t>(((a % kLow) * pairs_ + f) * 2);
    const size_t h = static_cast<size_t>(((a / kLow) * pairs_ + f) * 2);
    const double c = hi_[h] * lo_[l] - hi_[h + 1] * lo_[l + 1];
    const double s = hi_[h + 1] * lo_[l] + hi_[h] * lo_[l + 1];
    return {c, dist < 0 ? -s : s};
  }

 private:
  static constexpr int64_t kLow = 64;
  int64_t pairs_;
  std::vector<double> lo_, hi_;
};

// Rotates each rotary pair f of x by angle(f) (RoPE's sense); the other dimensions stay.
template <typename Angle>
void RotatePairs(std::vector<double>& x, const RopeFrame& rope, Angle angle) {
  const int64_t pairs = std::ssize(rope.inv_freq);
  for (int64_t f = 0; f < pairs; ++f) {
    const int64_t a = rope.half ? f : 2 * f, b = rope.half ? f + pairs : 2 * f + 1;
    const auto [cs, sn] = angle(f);
    const double xa = x[a] * cs - x[b] * sn, xb = x[a] * sn + x[b] * cs;
    x[a] = xa;
    x[b] = xb;
  }
}

// The self-query asked at the next position p: q_i = R(p - pos_i) k_i, the query that targets
// entry i's content (k_i = R(pos_i) c_i) as the next token's query would carry it. Its
// mean-field log-attention is q_i.(k_i - kbar) / sqrt(d) (with `centered`, q_i = R(p - pos_i)
// (k_i - kbar)): each rotary pair turns by (p - pos_i) theta_f, so an entry far back keeps its
// self-logit only in the slowly rotating pairs. Dimensions outside the rotary pairs do not turn.
// `common`, if given, is a query every entry's query shares (key=typical): its logit
// common.(k_i - kbar) / sqrt(d) is added. The caller passes the keys' mean and rotation table.
std::vector<double> NextSelfQuery(MatView<const float> keys, const RopeFrame& rope,
                                  const RotationTable& rot, const std::vector<double>& mean,
                                  bool centered, std::span<const double> common = {});
std::vector<double> NextSelfQuery(MatView<const float> keys, const RopeFrame& rope, bool centered);

// The frame of KV head h's entries in `in`.
RopeFrame RopeFrameOf(const LayerInput& in, int h);

}  // namespace primekv::press_internal
