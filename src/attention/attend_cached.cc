#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "primekv/attention/attention.h"
#include "primekv/attention/softmax_kernels.h"
#include "primekv/quant/dense.h"

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

namespace {

// One task: the queries of KV head `kvh`'s group for tokens [q0, q0 + qn), against every page.
struct TileTask {
  const AttnShape& shape;
  MatView<const float> q;
  std::span<const int32_t> q_pos;
  const KvCache& cache;
  int layer;
  int kvh;
  int q0;
  int qn;
  int rows() const {
    return shape.group() * qn;
  }  // row r = g * qn + i: head kvh*group+g, token q0+i
  int64_t Column(int g) const {
    return static_cast<int64_t>(kvh * shape.group() + g) * shape.head_dim;
  }
};

void GatherQueries(const TileTask& t, TileScratch& ts) {
  const int d = t.shape.head_dim;
  for (int g = 0; g < t.shape.group(); ++g) {
    for (int i = 0; i < t.qn; ++i) {
      std::copy_n(t.q.Row(t.q0 + i) + t.Column(g), d, ts.q + static_cast<size_t>(g * t.qn + i) * d);
    }
  }
  std::fill_n(ts.acc, static_cast<size_t>(t.rows()) * d, 0.0f);
  std::fill_n(ts.m, t.rows(), -std::numeric_limits<float>::infinity());
  std::fill_n(ts.l, t.rows(), 0.0f);
}

// Turns each row of scores[rows, count] into exp(s - running max), masking positions after the
// row's query, and rescales the row's running sum and accumulator to the new max. Returns false
// when a row with visible entries has no finite maximum: some score is +inf, or every one is NaN
// or -inf (a non-finite query makes all of its row so); the row is then left at zero.
bool OnlineSoftmaxRows(const TileTask& t, const KvPage& page, int count, TileScratch& ts,
                       const attention_internal::SoftmaxKernels& softmax) {
  const int pt = t.cache.page_tokens();
  const int d = t.shape.head_dim;
  bool finite = true;
  for (int r = 0; r < t.rows(); ++r) {
    const int32_t pos = t.q_pos[t.q0 + r % t.qn];
    float* s = ts.scores + static_cast<size_t>(r) * pt;
    int visible = count;
    while (visible > 0 && page.positions[visible - 1] > pos) --visible;
    // Entries [0, first) have left a sliding window.
    int first = 0;
    if (t.shape.window > 0) {
      while (first < visible && page.positions[first] <= pos - t.shape.window) ++first;
    }
    if (t.shape.softcap > 0) {
      const float cap = t.shape.softcap;
      for (int j = first; j < visible; ++j) s[j] = cap * std::tanh(s[j] / cap);
    }
    const int seen = visible - first;
    float* sv = s + first;
    const float mx = seen == 0 ? ts.m[r] : softmax.row_max(sv, seen, ts.m[r]);
    if (seen == 0 || !std::isfinite(mx)) {
      finite = finite && seen == 0;
      std::fill_n(s, count, 0.0f);
      continue;
    }
    // ExpApprox(-inf) = 0 on the first page.
    const float corr = attention_internal::ExpApprox(ts.m[r] - mx);
    const float sum = softmax.exp_sum(sv, seen, mx);
    std::fill(s, sv, 0.0f);
    std::fill(s + visible, s + count, 0.0f);
    ts.l[r] = ts.l[r] * corr + sum;
    ts.m[r] = mx;
    if (corr != 1.0f) softmax.scale(ts.acc + static_cast<size_t>(r) * d, d, corr);
  }
  return finite;
}

// acc += softmax(scale * Q K^T) V over one page of `count` entries; false as OnlineSoftmaxRows.
bool AttendPage(const TileTask& t, const KvPage& page, int count, TileScratch& ts,
                const attention_internal::SoftmaxKernels& softmax) {
  const int pt = t.cache.page_tokens();
  const int d = t.shape.head_dim;
  if (t.rows() <= kDirectScoreRows && t.cache.dtype() == KvDType::kF16 &&
      softmax.scores_f16 != nullptr) {
    // Decode over an f16 cache: the page is read in place, once.
    softmax.scores_f16(ts.q, t.rows(), static_cast<const uint16_t*>(page.keys), count, d,
                       t.shape.scale, ts.scores, pt);
    const bool finite = OnlineSoftmaxRows(t, page, count, ts, softmax);
    softmax.pv_f16(ts.scores, t.rows(), pt, static_cast<const uint16_t*>(page.values), count, d,
                   ts.acc);
    return finite;
  }
  float* key_rows = ts.values + static_cast<size_t>(pt) * d;
  t.cache.PageKeysToFloat(page, count, key_rows);
  t.cache.PageValuesToFloat(page, count, ts.values);
  // scores[rows, count] = scale * Q K^T. A few rows (decode): dot products against the key rows;
  // many: transpose the page once and run a GEMM.
  if (t.rows() <= kDirectScoreRows) {
    softmax.scores(ts.q, t.rows(), key_rows, count, d, t.shape.scale, ts.scores, pt);
  } else {
    dense::Transpose(key_rows, count, d, d, ts.keys, pt);
    dense::GemmNN(t.rows(), count, d, t.shape.scale, ts.q, d, ts.keys, pt, 0.0f, ts.scores, pt);
  }
  const bool finite = OnlineSoftmaxRows(t, page, count, ts, softmax);
  // acc[rows, d] += P V
  dense::GemmNN(t.rows(), d, count, 1.0f, ts.scores, pt, ts.values, d, 1.0f, ts.acc, d);
  return finite;
}

void WriteOutputs(const TileTask& t, const TileScratch& ts, MatView<float> out) {
  const int d = t.shape.head_dim;
  for (int g = 0; g < t.shape.group(); ++g) {
    for (int i = 0; i < t.qn; ++i) {
      const int r = g * t.qn + i;
      const float inv = ts.l[r] > 0 ? 1.0f / ts.l[r] : 0.0f;
      float* o = out.Row(t.q0 + i) + t.Column(g);
      const float* a = ts.acc + static_cast<size_t>(r) * d;
      for (int c = 0; c < d; ++c) o[c] = a[c] * inv;
    }
  }
}

}  // namespace

bool AttendCached(const AttnShape& shape, MatView<const float> q, std::span<const int32_t> q_pos,
                  const KvCache& cache, int layer, MatView<float> out, ThreadPool& pool,
                  AttentionWorkspace& workspace) {
  const int n = static_cast<int>(q.rows);
  const int pt = cache.page_tokens();
  Check(cache.head_dim() == shape.head_dim && cache.n_kv_heads() == shape.n_kv_heads,
        "AttendCached: cache shape differs from attention shape");
  workspace.Reserve(pool.size(), shape, pt);
  const attention_internal::SoftmaxKernels& softmax = attention_internal::BestSoftmax();
  const int tq = AttentionWorkspace::kQueryTile;
  const int n_qtiles = (n + tq - 1) / tq;
  const int64_t tasks = static_cast<int64_t>(shape.n_kv_heads) * n_qtiles;
  std::atomic<bool> finite{true};

  pool.ParallelFor(tasks, [&](int64_t begin, int64_t end, int thread) {
    TileScratch ts = Carve(workspace.Buffer(thread), shape, pt);
    for (int64_t task = begin; task < end; ++task) {
      const int q0 = static_cast<int>(task % n_qtiles) * tq;
      const TileTask t{shape, q,
                       q_pos, cache,
                       layer, static_cast<int>(task / n_qtiles),
                       q0,    std::min(tq, n - q0)};
      GatherQueries(t, ts);
      const int32_t max_pos = q_pos[t.q0 + t.qn - 1];
      const int32_t min_pos = q_pos[t.q0];
      const int n_pages = cache.NumPages(layer, t.kvh);
      bool task_finite = true;
      for (int p = 0; p < n_pages; ++p) {
        const KvPage& page = cache.Page(layer, t.kvh, p);
        if (page.positions[0] > max_pos) break;  // positions ascend: nothing visible further on
        // Every entry of the page has left every query's window.
        if (shape.window > 0 && page.positions[page.rows - 1] <= min_pos - shape.window) continue;
        task_finite &= AttendPage(t, page, page.rows, ts, softmax);
      }
      if (!task_finite) finite.store(false, std::memory_order_relaxed);
      WriteOutputs(t, ts, out);
    }
  });
  return finite.load(std::memory_order_relaxed);
}

void AttendReference(const AttnShape& shape, MatView<const float> q, std::span<const int32_t> q_pos,
                     const KvCache& cache, int layer, MatView<float> out) {
  const int d = shape.head_dim;
  std::vector<float> keys, values;
  std::vector<int32_t> pos;
  std::vector<double> p;
  for (int kvh = 0; kvh < shape.n_kv_heads; ++kvh) {
    cache.ReadHead(layer, kvh, &keys, &values, &pos);
    const int64_t len = static_cast<int64_t>(pos.size());
    const MatView<const float> k(keys.data(), len, d), v(values.data(), len, d);
    p.resize(pos.size());
    for (int g = 0; g < shape.group(); ++g) {
      const int64_t col = static_cast<int64_t>(kvh * shape.group() + g) * d;
      for (int64_t i = 0; i < q.rows; ++i) {
        for (int64_t j = 0; j < len; ++j) {
          const int32_t kp = pos[static_cast<size_t>(j)];
          double x = DotF64(q.Row(i) + col, k.Row(j), d) * shape.scale;
          if (shape.softcap > 0) x = shape.softcap * std::tanh(x / shape.softcap);
          const bool hidden = kp > q_pos[i] || (shape.window > 0 && kp <= q_pos[i] - shape.window);
          p[static_cast<size_t>(j)] = hidden ? -std::numeric_limits<double>::infinity() : x;
        }
        MaskedSoftmax(p);
        float* o = out.Row(i) + col;
        for (int c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < len; ++j) acc += p[static_cast<size_t>(j)] * v(j, c);
          o[c] = static_cast<float>(acc);
        }
      }
    }
  }
}

}  // namespace primekv
