#include "press/primekv_terms.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "primekv/quant/dense.h"

namespace primekv::press_internal {

std::vector<double> Mean(MatView<const float> x) {
  std::vector<double> m(x.cols, 0.0);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t c = 0; c < x.cols; ++c) m[c] += x(i, c);
  for (auto& v : m) v /= std::max<int64_t>(x.rows, 1);
  return m;
}

Mat<float> Centered(MatView<const float> x, const std::vector<double>& m) {
  Mat<float> out(x.rows, x.cols);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t c = 0; c < x.cols; ++c) out(i, c) = static_cast<float>(x(i, c) - m[c]);
  return out;
}

std::vector<double> QuadraticNorms(const Mat<float>& x, MatView<const float> m) {
  const int n = static_cast<int>(x.rows()), d = static_cast<int>(x.cols());
  Mat<float> u(kRows, d);  // x M
  std::vector<double> c(n, 0.0);
  for (int i0 = 0; i0 < n; i0 += kRows) {
    const int rows = std::min(kRows, n - i0);
    dense::GemmNN(rows, d, d, 1.0f, x.Row(i0), d, m.data, d, 0.0f, u.data(), d);
    for (int i = 0; i < rows; ++i)
      c[i0 + i] = std::sqrt(std::max(Dot(u.Row(i), x.Row(i0 + i), d), 0.0));
  }
  return c;
}

namespace {

// (cos, sin) of (j * step) theta_f, j < count, interleaved, row j.
std::vector<double> AngleTable(std::span<const float> inv_freq, int64_t count, int64_t step) {
  std::vector<double> t;
  t.reserve(static_cast<size_t>(count) * inv_freq.size() * 2);
  for (int64_t j = 0; j < count; ++j) {
    for (const float w : inv_freq) {
      const double phi = static_cast<double>(j * step) * w;
      t.push_back(std::cos(phi));
      t.push_back(std::sin(phi));
    }
  }
  return t;
}

}  // namespace

RotationTable::RotationTable(const RopeFrame& rope, int64_t n) : pairs_(std::ssize(rope.inv_freq)) {
  int64_t max_dist = 0;
  for (int64_t i = 0; i < n; ++i)
    max_dist = std::max<int64_t>(
        max_dist, std::abs(static_cast<int64_t>(rope.next_position) - rope.positions[i]));
  lo_ = AngleTable(rope.inv_freq, kLow, 1);
  hi_ = AngleTable(rope.inv_freq, max_dist / kLow + 1, kLow);
}

std::vector<double> NextSelfQuery(MatView<const float> keys, const RopeFrame& rope,
                                  const RotationTable& rot, const std::vector<double>& mean,
                                  bool centered, std::span<const double> common) {
  const int64_t d = keys.cols;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> q(d);
  std::vector<double> r(keys.rows);
  for (int64_t i = 0; i < keys.rows; ++i) {
    const float* k = keys.Row(i);
    for (int64_t c = 0; c < d; ++c) q[c] = centered ? k[c] - mean[c] : k[c];
    const int64_t dist = static_cast<int64_t>(rope.next_position) - rope.positions[i];
    RotatePairs(q, rope, [&](int64_t f) { return rot.CosSin(dist, f); });
    double s = 0;
    for (int64_t c = 0; c < d; ++c) s += q[c] * (k[c] - mean[c]);
    r[i] = s * scale;
    if (!common.empty()) {
      double t = 0;
      for (int64_t c = 0; c < d; ++c) t += common[c] * (k[c] - mean[c]);
      r[i] += t * scale;
    }
  }
  return r;
}

std::vector<double> NextSelfQuery(MatView<const float> keys, const RopeFrame& rope, bool centered) {
  return NextSelfQuery(keys, rope, RotationTable(rope, keys.rows), Mean(keys), centered);
}

RopeFrame RopeFrameOf(const LayerInput& in, int h) {
  return {.positions = in.heads[static_cast<size_t>(h)].positions,
          .inv_freq = in.rope_inv_freq,
          .half = in.rope_half(),
          .next_position = in.next_position};
}

}  // namespace primekv::press_internal
