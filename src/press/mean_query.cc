#include "primekv/press/mean_query.h"

#include <algorithm>
#include <cmath>

#include "primekv/quant/dense.h"
#include "primekv/quant/matmul.h"

namespace primekv {

namespace {

constexpr int kBlock = 256;  // rows of the float products summed in double

// Lower Cholesky factor in place, pivots floored at 1e-10 of the mean diagonal (a rank-deficient
// A leaves g singular; the floored directions are those A cannot see).
void Cholesky(Mat<double>& g) {
  const int s = static_cast<int>(g.rows());
  double trace = 0;
  for (int j = 0; j < s; ++j) trace += g(j, j);
  dense::CholeskyLower(g, std::max(1e-10 * trace / std::max(s, 1), 1e-300));
}

// Solves L L^T x = b in place (l: [s][s] row-major, lower). Both passes walk rows of L (the
// back substitution in axpy form), so every inner loop is contiguous.
void CholeskySolve(std::span<const double> l, int s, std::span<double> b) {
  for (int i = 0; i < s; ++i) {
    const double* row = l.data() + static_cast<size_t>(i) * s;
    double t = b[i];
    for (int k = 0; k < i; ++k) t -= row[k] * b[k];
    b[i] = t / row[i];
  }
  for (int i = s - 1; i >= 0; --i) {
    const double* row = l.data() + static_cast<size_t>(i) * s;
    const double x = b[i] / row[i];
    b[i] = x;
    for (int k = 0; k < i; ++k) b[k] -= row[k] * x;
  }
}

Mat<float> Transposed(MatView<const float> x) {
  Mat<float> t(x.cols, x.rows);
  dense::Transpose(x.data, static_cast<int>(x.rows), static_cast<int>(x.cols),
                   static_cast<int>(x.stride), t.data(), static_cast<int>(x.rows));
  return t;
}

}  // namespace

MeanQueryMap BuildMeanQueryMap(MatView<const float> wq, MatView<const float> wk,
                               MatView<const float> wv, std::span<const float> bq,
                               std::span<const float> bk, std::span<const float> bv,
                               std::span<const float> k_gain, std::span<const float> q_gain,
                               float norm_eps) {
  const int d = static_cast<int>(wk.rows), width = static_cast<int>(wk.cols);
  const bool normed = !k_gain.empty();
  const int m = normed ? d : 2 * d;
  MeanQueryMap out;
  out.group = static_cast<int>(wq.rows) / d;
  out.head_dim = d;
  out.in_dim = m;
  out.k_gain.assign(k_gain.begin(), k_gain.end());
  out.q_gain.assign(q_gain.begin(), q_gain.end());
  out.norm_eps = norm_eps;
  // A = [W_k; W_v] as A^T [width, m], so both products below are X^T Y of row-major blocks.
  Mat<float> a(m, width);
  for (int r = 0; r < d; ++r) {
    std::copy_n(wk.Row(r), width, a.Row(r));
    if (!normed) std::copy_n(wv.Row(r), width, a.Row(d + r));
  }
  const Mat<float> at = Transposed(a.view());  // [width, m]
  Mat<double> g, post;
  if (m <= width) {
    // u = W_q A^T (A A^T)^-1 y.
    const Mat<float> wqt = Transposed(wq);                         // [width, group * d]
    g = dense::ProductTNDouble(at.view(), at.view(), kBlock);      // A A^T [m, m]
    post = dense::ProductTNDouble(wqt.view(), at.view(), kBlock);  // W_q A^T [group * d, m]
  } else {
    // u = W_q (A^T A)^-1 A^T y.
    g = dense::ProductTNDouble(a.view(), a.view(), kBlock);  // A^T A [width, width]
    post.Resize(wq.rows, width);
    for (int64_t r = 0; r < wq.rows; ++r)
      for (int c = 0; c < width; ++c) post(r, c) = wq(r, c);
    out.pre.assign(at.data(), at.data() + at.rows() * at.cols());
  }
  Cholesky(g);
  out.solve_dim = static_cast<int>(g.rows());
  out.factor.assign(g.data(), g.data() + g.rows() * g.cols());
  out.post.assign(post.data(), post.data() + post.rows() * post.cols());
  // offset_g = b_q^(g) - (the map applied to [b_k; b_v]).
  std::vector<double> bias(static_cast<size_t>(m), 0.0);
  for (int j = 0; j < d; ++j) {
    if (!bk.empty()) bias[j] = bk[j];
    if (!normed && !bv.empty()) bias[d + j] = bv[j];
  }
  const std::vector<double> shift = out.Apply(bias);
  out.offset.resize(shift.size());
  for (size_t r = 0; r < shift.size(); ++r)
    out.offset[r] = static_cast<float>((bq.empty() ? 0.0 : bq[r]) - shift[r]);
  return out;
}

std::vector<double> MeanQueryMap::Apply(std::span<const double> y) const {
  const int s = solve_dim;
  std::vector<double> x(static_cast<size_t>(s), 0.0);
  if (pre.empty()) {
    std::copy_n(y.begin(), s, x.begin());
  } else {
    for (int r = 0; r < s; ++r) {
      const float* row = pre.data() + static_cast<size_t>(r) * in_dim;
      for (int j = 0; j < in_dim; ++j) x[r] += row[j] * y[j];
    }
  }
  CholeskySolve(factor, s, x);
  std::vector<double> u(static_cast<size_t>(group) * head_dim, 0.0);
  for (size_t r = 0; r < u.size(); ++r) {
    const float* row = post.data() + r * static_cast<size_t>(s);
    double t = 0;
    for (int j = 0; j < s; ++j) t += row[j] * x[j];
    u[r] = t;
  }
  return u;
}

std::vector<double> MeanQueryMap::MeanQuery(std::span<const double> cbar,
                                            std::span<const double> vbar) const {
  const int d = head_dim;
  std::vector<double> y(static_cast<size_t>(in_dim)), mean(static_cast<size_t>(d), 0.0);
  // A zero gain leaves that key dimension zero in every entry: it carries nothing to divide.
  for (int c = 0; c < d; ++c)
    y[c] = k_gain.empty() ? cbar[c] : (k_gain[c] != 0.0f ? cbar[c] / k_gain[c] : 0.0);
  if (k_gain.empty())
    for (int c = 0; c < d; ++c) y[d + c] = vbar[c];
  const std::vector<double> u = Apply(y);
  for (int g = 0; g < group; ++g) {
    const double* ug = u.data() + static_cast<size_t>(g) * d;
    double ss = 0;
    for (int a = 0; a < d; ++a)
      ss += (ug[a] + offset[static_cast<size_t>(g) * d + a]) *
            (ug[a] + offset[static_cast<size_t>(g) * d + a]);
    const double scale = q_gain.empty() ? 1.0 : 1.0 / std::sqrt(ss / d + norm_eps);
    for (int a = 0; a < d; ++a) {
      const double t = ug[a] + offset[static_cast<size_t>(g) * d + a];
      mean[a] += (q_gain.empty() ? t : t * scale * q_gain[a]) / group;
    }
  }
  return mean;
}

MeanQueryMap MeanQueryMapOf(const Model& model, int layer, int kv_head) {
  const ModelConfig& c = model.config();
  const LayerWeights& w = model.layer(layer);
  const int d = c.head_dim, g = c.group();
  const auto rows = [&](const WeightView& v, int64_t first, int64_t count) {
    Mat<float> m(count, v.cols);
    for (int64_t r = 0; r < count; ++r) GetRow(v, first + r, m.Row(r));
    return m;
  };
  const auto slice = [](const std::vector<float>& b, int64_t first, int64_t count) {
    return b.empty() ? std::span<const float>() : std::span<const float>(b).subspan(first, count);
  };
  const Mat<float> wq = rows(w.wq, int64_t{kv_head} * g * d, int64_t{g} * d);
  const Mat<float> wk = rows(w.wk, int64_t{kv_head} * d, d);
  const Mat<float> wv = c.qk_norm ? Mat<float>() : rows(w.wv, int64_t{kv_head} * d, d);
  return BuildMeanQueryMap(
      wq.view(), wk.view(), wv.view(), slice(w.bq, int64_t{kv_head} * g * d, int64_t{g} * d),
      slice(w.bk, int64_t{kv_head} * d, d), slice(w.bv, int64_t{kv_head} * d, d),
      c.qk_norm ? std::span<const float>(w.k_norm) : std::span<const float>(),
      c.qk_norm ? std::span<const float>(w.q_norm) : std::span<const float>(), c.rms_eps);
}

}  // namespace primekv
