#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/softmax_kernels.h"
#include "primekv/attention.h"
#include "primekv/dense.h"

namespace primekv {

namespace {

// Query rows (group x tokens) up to which scores are direct dot products (decode of GQA groups
// up to 8); beyond, the page transpose pays for itself in the GEMM.
constexpr int kDirectScoreRows = 8;

// Scratch layout per thread, for R = group * kQueryTile query rows and T = page_tokens keys.
struct TileScratch {
  float* q;       // [R, d] gathered queries of the group
  float* keys;    // [d, T] transposed, so score rows vectorise over keys
  float* values;  // [T, d]
  float* scores;  // [R, T]
  float* acc;     // [R, d]
  float* m;       // [R] running max
  float* l;       // [R] running sum
};

size_t ScratchFloats(const AttnShape& s, int page_tokens) {
  const size_t r = static_cast<size_t>(s.group()) * AttentionWorkspace::kQueryTile;
  const size_t d = static_cast<size_t>(s.head_dim);
  const size_t t = static_cast<size_t>(page_tokens);
  return r * d + 3 * t * d + r * t + r * d + 2 * r;
}

TileScratch Carve(float* base, const AttnShape& s, int page_tokens) {
  const size_t r = static_cast<size_t>(s.group()) * AttentionWorkspace::kQueryTile;
  const size_t d = static_cast<size_t>(s.head_dim);
  const size_t t = static_cast<size_t>(page_tokens);
  TileScratch ts;
  ts.q = base;
  ts.keys = ts.q + r * d;
  ts.values = ts.keys + t * d;
  ts.scores = ts.values + 2 * t * d;  // values, then rows of keys before transposing
  ts.acc = ts.scores + r * t;
  ts.m = ts.acc + r * d;
  ts.l = ts.m + r;
  return ts;
}

}  // namespace

void AttentionWorkspace::Reserve(int threads, const AttnShape& shape, int page_tokens) {
  const size_t need = ScratchFloats(shape, page_tokens);
  if (need > floats_per_thread_) floats_per_thread_ = need;
  if (buffers_.size() < static_cast<size_t>(threads)) buffers_.resize(static_cast<size_t>(threads));
  size_t total = 0;
  for (auto& b : buffers_) {
    if (b.size() < floats_per_thread_) b.resize(floats_per_thread_);
    total += b.size() * sizeof(float);
  }
  high_water_bytes_ = std::max(high_water_bytes_, total);
}

void AttendCached(const AttnShape& shape, MatView<const float> q, std::span<const int32_t> q_pos,
                  const KvCache& cache, int layer, MatView<float> out, ThreadPool& pool,
                  AttentionWorkspace& workspace) {
  const int n = static_cast<int>(q.rows);
  const int d = shape.head_dim;
  const int group = shape.group();
  const int pt = cache.page_tokens();
  Check(cache.head_dim() == d && cache.n_kv_heads() == shape.n_kv_heads,
        "AttendCached: cache shape differs from attention shape");
  workspace.Reserve(pool.size(), shape, pt);
  const attention_internal::SoftmaxKernels& softmax = attention_internal::BestSoftmax();
  const int tq = AttentionWorkspace::kQueryTile;
  const int n_qtiles = (n + tq - 1) / tq;
  const int64_t tasks = static_cast<int64_t>(shape.n_kv_heads) * n_qtiles;

  pool.ParallelFor(tasks, [&](int64_t begin, int64_t end, int thread) {
    TileScratch ts = Carve(workspace.Buffer(thread), shape, pt);
    for (int64_t task = begin; task < end; ++task) {
      const int kvh = static_cast<int>(task / n_qtiles);
      const int q0 = static_cast<int>(task % n_qtiles) * tq;
      const int qn = std::min(tq, n - q0);
      const int rows = group * qn;  // row r = g * qn + i: query head kvh*group+g, token q0+i
      for (int g = 0; g < group; ++g) {
        const int64_t col = static_cast<int64_t>(kvh * group + g) * d;
        for (int i = 0; i < qn; ++i) {
          std::copy_n(q.Row(q0 + i) + col, d, ts.q + static_cast<size_t>(g * qn + i) * d);
        }
      }
      std::fill_n(ts.acc, static_cast<size_t>(rows) * d, 0.0f);
      std::fill_n(ts.m, rows, -std::numeric_limits<float>::infinity());
      std::fill_n(ts.l, rows, 0.0f);
      const int32_t max_pos = q_pos[q0 + qn - 1];
      const int len = cache.Length(layer, kvh);
      for (int p = 0; p * pt < len; ++p) {
        const KvPage& page = cache.Page(layer, kvh, p);
        const int count = std::min(pt, len - p * pt);
        if (page.positions[0] > max_pos) break;  // positions ascend: nothing visible further on
        float* key_rows = ts.values + static_cast<size_t>(pt) * d;
        cache.PageKeysToFloat(page, count, key_rows);
        cache.PageValuesToFloat(page, count, ts.values);
        // scores[rows, count] = scale * Q K^T. A few rows (decode): dot products against the
        // key rows; many: transpose the page once and run a GEMM.
        if (rows <= kDirectScoreRows) {
          softmax.scores(ts.q, rows, key_rows, count, d, shape.scale, ts.scores, pt);
        } else {
          dense::Transpose(key_rows, count, d, d, ts.keys, pt);
          dense::GemmNN(rows, count, d, shape.scale, ts.q, d, ts.keys, pt, 0.0f, ts.scores, pt);
        }
        for (int r = 0; r < rows; ++r) {
          const int32_t pos = q_pos[q0 + r % qn];
          float* s = ts.scores + static_cast<size_t>(r) * pt;
          int visible = count;
          while (visible > 0 && page.positions[visible - 1] > pos) --visible;
          const float mx = softmax.row_max(s, visible, ts.m[r]);
          if (visible == 0 || mx == -std::numeric_limits<float>::infinity()) {
            std::fill_n(s, count, 0.0f);
            continue;
          }
          // ExpApprox(-inf) = 0 on the first page.
          const float corr = attention_internal::ExpApprox(ts.m[r] - mx);
          const float sum = softmax.exp_sum(s, visible, mx);
          std::fill(s + visible, s + count, 0.0f);
          ts.l[r] = ts.l[r] * corr + sum;
          ts.m[r] = mx;
          if (corr != 1.0f) softmax.scale(ts.acc + static_cast<size_t>(r) * d, d, corr);
        }
        // acc[rows, d] += P V
        dense::GemmNN(rows, d, count, 1.0f, ts.scores, pt, ts.values, d, 1.0f, ts.acc, d);
      }
      for (int g = 0; g < group; ++g) {
        const int64_t col = static_cast<int64_t>(kvh * group + g) * d;
        for (int i = 0; i < qn; ++i) {
          const int r = g * qn + i;
          const float inv = ts.l[r] > 0 ? 1.0f / ts.l[r] : 0.0f;
          float* o = out.Row(q0 + i) + col;
          const float* a = ts.acc + static_cast<size_t>(r) * d;
          for (int c = 0; c < d; ++c) o[c] = a[c] * inv;
        }
      }
    }
  });
}

void AttendReference(const AttnShape& shape, MatView<const float> q, std::span<const int32_t> q_pos,
                     const KvCache& cache, int layer, MatView<float> out) {
  const int d = shape.head_dim;
  std::vector<float> keys, values;
  std::vector<int32_t> pos;
  std::vector<double> logits;
  for (int kvh = 0; kvh < shape.n_kv_heads; ++kvh) {
    cache.ReadHead(layer, kvh, &keys, &values, &pos);
    const int len = static_cast<int>(pos.size());
    logits.resize(static_cast<size_t>(len));
    for (int g = 0; g < shape.group(); ++g) {
      const int64_t col = static_cast<int64_t>(kvh * shape.group() + g) * d;
      for (int64_t i = 0; i < q.rows; ++i) {
        const float* qi = q.Row(i) + col;
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < len; ++j) {
          if (pos[j] > q_pos[i]) {
            logits[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += static_cast<double>(qi[c]) * keys[j * d + c];
          logits[j] = dot * shape.scale;
          mx = std::max(mx, logits[j]);
        }
        double sum = 0;
        for (int j = 0; j < len; ++j) {
          logits[j] = std::isinf(logits[j]) ? 0.0 : std::exp(logits[j] - mx);
          sum += logits[j];
        }
        float* o = out.Row(i) + col;
        for (int c = 0; c < d; ++c) {
          double acc = 0;
          for (int j = 0; j < len; ++j) acc += logits[j] * values[j * d + c];
          o[c] = sum > 0 ? static_cast<float>(acc / sum) : 0.0f;
        }
      }
    }
  }
}

}  // namespace primekv
