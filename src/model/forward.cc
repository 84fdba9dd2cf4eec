// The decoder forward pass: RMSNorm, QKV (+bias, +q/k norm), RoPE, cached attention, SwiGLU
// (dense, or a routed mixture of experts for qwen3moe).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>

#include "primekv/attention/softmax_kernels.h"
#include "primekv/model/model.h"
#include "primekv/quant/matmul.h"

namespace primekv {

namespace {

void RmsNorm(const float* x, const float* w, int n, float eps, float* out) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

// Element-wise work over token rows, spread over the pool once there are enough rows that the
// hand-off pays (a prefill batch: otherwise these loops are serial sections between matmuls).
template <typename Fn>
void ForRows(ThreadPool& pool, int64_t rows, int64_t row_elems, Fn&& fn) {
  const int64_t min_rows =
      std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, row_elems));
  pool.ParallelFor(
      rows,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t r = begin; r < end; ++r) fn(r);
      },
      min_rows);
}

void RmsNormRows(MatView<const float> x, const std::vector<float>& w, float eps, MatView<float> out,
                 ThreadPool& pool) {
  ForRows(pool, x.rows, x.cols, [&](int64_t r) {
    RmsNorm(x.Row(r), w.data(), static_cast<int>(x.cols), eps, out.Row(r));
  });
}

// gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i] over n contiguous
// values. The exponentials go through the attention module's vector exp (ExpApprox, relative
// error below 3e-7) a block at a time; one libm call per value took about 2% of a 1B decode
// step. The blocks are split over the pool even for a single token row, since at decode this
// is otherwise a serial section between two matmuls.
void SwiGluInPlace(float* gate, const float* up, int64_t n, ThreadPool& pool) {
  constexpr int64_t kBlock = 512;
  const attention_internal::SoftmaxKernels& k = attention_internal::BestSoftmax();
  pool.ParallelFor((n + kBlock - 1) / kBlock,
                   [&](int64_t begin, int64_t end, int) {
                     float e[kBlock];
                     for (int64_t b = begin; b < end; ++b) {
                       const int64_t lo = b * kBlock;
                       const int m = static_cast<int>(std::min(kBlock, n - lo));
                       for (int j = 0; j < m; ++j) e[j] = -gate[lo + j];
                       k.exp_sum(e, m, 0.0f);
                       for (int j = 0; j < m; ++j)
                         gate[lo + j] = gate[lo + j] / (1.0f + e[j]) * up[lo + j];
                     }
                   },
                   4);
}

// gate[i] = gelu(gate[i]) * up[i] with GELU's tanh form (gemma's GeGLU):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void GeGluInPlace(float* gate, const float* up, int64_t n, ThreadPool& pool) {
  constexpr int64_t kBlock = 512;
  pool.ParallelFor((n + kBlock - 1) / kBlock,
                   [&](int64_t begin, int64_t end, int) {
                     for (int64_t i = begin * kBlock; i < std::min(n, end * kBlock); ++i) {
                       const float x = gate[i];
                       const float t =
                           std::tanh(0.7978845608028654f * x * (1.0f + 0.044715f * x * x));
                       gate[i] = 0.5f * x * (1.0f + t) * up[i];
                     }
                   },
                   4);
}

template <typename T>
void Grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Router order: larger logit first, equal logits by lower index; NaN ranks below everything,
// so a broken router still yields k distinct experts.
bool RanksAbove(float a, int ia, float b, int ib) {
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  const float ka = std::isnan(a) ? kLowest : a, kb = std::isnan(b) ? kLowest : b;
  return ka > kb || (ka == kb && ia < ib);
}

// Mixture-of-experts SwiGLU of the normed rows h, added to x: each token goes through its
// n_experts_used routed experts. Rows are grouped by expert so that each expert's weights are
// streamed once per call however many tokens chose it.
void AddExpertFfn(const ModelConfig& c, const LayerWeights& L, MatView<const float> h,
                  MatView<float> x, ThreadPool& pool, ForwardWorkspace& ws) {
  const int n = static_cast<int>(h.rows);
  const int E = c.n_experts, K = c.n_experts_used, D = c.d_model, F = c.d_ff_expert;
  const size_t N = static_cast<size_t>(n);
  Grow(ws.router_logits, N * E);
  Grow(ws.choices, N * K);
  Grow(ws.expert_start, static_cast<size_t>(E) + 1);
  Grow(ws.expert_rows, N * K);
  Grow(ws.moe_in, N * D);
  Grow(ws.moe_out, N * D);
  Grow(ws.gate, N * F);
  Grow(ws.up, N * F);

  MatView<float> logits(ws.router_logits.data(), n, E);
  MatMul(L.router, h, logits, pool);
  std::fill_n(ws.expert_start.begin(), E + 1, 0);
  for (int t = 0; t < n; ++t) {
    std::span<ExpertChoice> mine(ws.choices.data() + static_cast<size_t>(t) * K,
                                 static_cast<size_t>(K));
    SelectExperts(logits.RowSpan(t), mine);
    for (const ExpertChoice& ch : mine) ++ws.expert_start[static_cast<size_t>(ch.expert) + 1];
  }
  // Counting sort of the (token, slot) pairs by expert, tokens in order within an expert:
  // counts -> starts; each start is then a fill cursor that ends at the next expert's start,
  // so shifting by one restores the starts.
  for (int e = 0; e < E; ++e)
    ws.expert_start[static_cast<size_t>(e) + 1] += ws.expert_start[static_cast<size_t>(e)];
  for (int slot = 0; slot < n * K; ++slot) {
    const ExpertChoice& ch = ws.choices[static_cast<size_t>(slot)];
    ws.expert_rows[static_cast<size_t>(ws.expert_start[static_cast<size_t>(ch.expert)]++)] = slot;
  }
  for (int e = E; e > 0; --e)
    ws.expert_start[static_cast<size_t>(e)] = ws.expert_start[static_cast<size_t>(e) - 1];
  ws.expert_start[0] = 0;

  for (int e = 0; e < E; ++e) {
    const int32_t b = ws.expert_start[static_cast<size_t>(e)];
    const int m = ws.expert_start[static_cast<size_t>(e) + 1] - b;
    if (m == 0) continue;
    MatView<float> in(ws.moe_in.data(), m, D);
    for (int r = 0; r < m; ++r) {
      const int t = ws.expert_rows[static_cast<size_t>(b + r)] / K;
      std::copy_n(h.Row(t), D, in.Row(r));
    }
    MatView<float> gate(ws.gate.data(), m, F), up(ws.up.data(), m, F);
    MatMul(L.gate_exps.Expert(e), in, gate, pool);
    MatMul(L.up_exps.Expert(e), in, up, pool);
    SwiGluInPlace(ws.gate.data(), ws.up.data(), static_cast<int64_t>(m) * F, pool);
    MatView<float> out(ws.moe_out.data(), m, D);
    MatMul(L.down_exps.Expert(e), gate, out, pool);
    for (int r = 0; r < m; ++r) {
      const int slot = ws.expert_rows[static_cast<size_t>(b + r)];
      const float w = ws.choices[static_cast<size_t>(slot)].weight;
      float* xr = x.Row(slot / K);
      const float* o = out.Row(r);
      for (int j = 0; j < D; ++j) xr[j] += w * o[j];
    }
  }
}

}  // namespace

void SelectExperts(std::span<const float> logits, std::span<ExpertChoice> out) {
  const int n = static_cast<int>(logits.size()), k = static_cast<int>(out.size());
  Check(k >= 1 && k <= n, "SelectExperts: need 1 <= k <= number of experts");
  // Softmax is monotonic, so the k most probable experts are those of the k largest logits;
  // picked one at a time, each strictly below the previous one in router order.
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int i = 0; i < n; ++i) {
      const float li = logits[static_cast<size_t>(i)];
      if (j > 0) {
        const ExpertChoice& prev = out[static_cast<size_t>(j) - 1];
        if (!RanksAbove(logits[static_cast<size_t>(prev.expert)], prev.expert, li, i)) continue;
      }
      if (best < 0 || RanksAbove(li, i, logits[static_cast<size_t>(best)], best)) best = i;
    }
    out[static_cast<size_t>(j)].expert = best;
  }
  // p_e = exp(l_e - max) / Z over all experts; renormalising the selected p_e to sum 1
  // (norm_topk_prob) cancels Z, leaving exp(l_e - max) / sum over the selected.
  const float top = logits[static_cast<size_t>(out[0].expert)];
  double sum = 0;
  for (ExpertChoice& ch : out) {
    ch.weight = std::exp(logits[static_cast<size_t>(ch.expert)] - top);
    sum += ch.weight;
  }
  for (ExpertChoice& ch : out) ch.weight = static_cast<float>(ch.weight / sum);
}

void Model::ApplyRope(MatView<float> x, int n_heads_x, std::span<const int32_t> positions) const {
  const ModelConfig& c = config_;
  const int half = c.rope_dim / 2;
  for (int64_t r = 0; r < x.rows; ++r) {
    const double pos = positions[static_cast<size_t>(r)];
    for (int i = 0; i < half; ++i) {
      const double theta = pos * rope_inv_freq_[static_cast<size_t>(i)];
      const float cs = static_cast<float>(std::cos(theta)) * c.rope_attn_factor;
      const float sn = static_cast<float>(std::sin(theta)) * c.rope_attn_factor;
      for (int h = 0; h < n_heads_x; ++h) {
        float* v = x.Row(r) + static_cast<int64_t>(h) * c.head_dim;
        const int a = c.rope_style == RopeStyle::kAdjacent ? 2 * i : i;
        const int b = c.rope_style == RopeStyle::kAdjacent ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs - x1 * sn;
        v[b] = x0 * sn + x1 * cs;
      }
    }
  }
}

namespace {

// Queries from their projection (h * W_q^T, in `out`): bias, q-norm, RoPE.
void FinishQueries(const Model& model, int layer, std::span<const int32_t> positions,
                   MatView<float> out) {
  const ModelConfig& c = model.config();
  const LayerWeights& L = model.layer(layer);
  for (int64_t r = 0; r < out.rows; ++r) {
    float* q = out.Row(r);
    if (!L.bq.empty()) {
      for (int j = 0; j < c.q_width(); ++j) q[j] += L.bq[static_cast<size_t>(j)];
    }
    if (!L.q_norm.empty()) {
      for (int hh = 0; hh < c.n_heads; ++hh) {
        float* v = q + static_cast<int64_t>(hh) * c.head_dim;
        RmsNorm(v, L.q_norm.data(), c.head_dim, c.rms_eps, v);
      }
    }
  }
  model.ApplyRope(out, c.n_heads, positions);
}

}  // namespace

void Model::ProjectQueries(int layer, MatView<const float> h, std::span<const int32_t> positions,
                           MatView<float> out, ThreadPool& pool) const {
  MatMul(layers_[static_cast<size_t>(layer)].wq, h, out, pool);
  FinishQueries(*this, layer, positions, out);
}

namespace {

// The workspace's rows for one call of n tokens.
struct RowViews {
  MatView<float> x, h, q, k, v, attn;
};

RowViews PrepareRows(const ModelConfig& c, int n, ForwardWorkspace& ws) {
  const size_t D = static_cast<size_t>(c.d_model);
  const size_t N = static_cast<size_t>(n);
  Grow(ws.x, N * D);
  Grow(ws.h, N * std::max<size_t>(D, static_cast<size_t>(c.q_width())));
  Grow(ws.q, N * c.q_width());
  Grow(ws.k, N * c.kv_width());
  Grow(ws.v, N * c.kv_width());
  Grow(ws.attn, N * c.q_width());
  if (!c.moe()) {
    Grow(ws.gate, N * c.d_ff);
    Grow(ws.up, N * c.d_ff);
  }
  Grow(ws.positions, N);
  return {
      MatView<float>(ws.x.data(), n, c.d_model),    MatView<float>(ws.h.data(), n, c.d_model),
      MatView<float>(ws.q.data(), n, c.q_width()),  MatView<float>(ws.k.data(), n, c.kv_width()),
      MatView<float>(ws.v.data(), n, c.kv_width()), MatView<float>(ws.attn.data(), n, c.q_width())};
}

Status CheckCacheShape(const ModelConfig& c, const KvCache& cache) {
  if (cache.n_layers() != c.n_layers || cache.n_kv_heads() != c.n_kv_heads ||
      cache.head_dim() != c.head_dim) {
    return Status::Error("forward: KV cache shape does not match the model");
  }
  return Status::Ok();
}

Status CheckToken(const ModelConfig& c, Token t) {
  if (t < 0 || t >= c.vocab_size) {
    return Status::Error("forward: token id " + std::to_string(t) + " outside vocabulary of " +
                         std::to_string(c.vocab_size));
  }
  return Status::Ok();
}

// Beyond the trained context RoPE extrapolates; allowed, as other engines do, but bounded by
// int32 positions.
Status CheckPositions(int32_t p0, int n) {
  if (static_cast<int64_t>(p0) + n > int64_t{1} << 30)
    return Status::Error("forward: position overflow");
  return Status::Ok();
}

// Whether every entry of the rows is finite (exponent bits not all set), branch-free so it
// vectorises: one pass over the keys, far cheaper than the projection that made them.
bool AllFinite(MatView<const float> m) {
  uint32_t bad = 0;
  for (int64_t r = 0; r < m.rows; ++r) {
    const float* x = m.Row(r);
    for (int64_t i = 0; i < m.cols; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + i, sizeof(bits));
      bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
  }
  return bad == 0;
}

// A NaN or infinite key would meet the softmax's exponential as a score taken for 0 and vanish
// from every later attention row; refused before it enters the cache. (Queries are checked by
// AttendCached's row maximum, values reach the logits and the sampler's check.)
Status CheckKeys(int layer, MatView<const float> k) {
  if (AllFinite(k)) return Status::Ok();
  return Status::Error("forward: non-finite attention scores in layer " + std::to_string(layer) +
                       ": a key is NaN or infinite (the model's weights or activations overflow)");
}

Status AttentionFailed(int layer) {
  return Status::Error("forward: non-finite attention scores in layer " + std::to_string(layer) +
                       ": a query is NaN or infinite, or a query-key product overflows float (the "
                       "model's weights or activations overflow)");
}

// Appends a layer's new entries and attends over the cache, telling the tap (which may read
// the appended rows). A sliding-window layer that drops expired entries takes the queries one
// page at a time and drops after each page, so it holds at most window - 1 + page_tokens
// entries while the call runs; the tap then sees each page's rows as a call of its own.
Status AppendAndAttend(const AttnShape& shape, const RowViews& r, std::span<const int32_t> pos,
                       KvCache& cache, int layer, bool drop, ThreadPool& pool,
                       AttentionWorkspace& aws, ForwardTap* tap) {
  const int n = static_cast<int>(pos.size());
  const bool windowed = drop && shape.window > 0;
  const int step = windowed ? cache.page_tokens() : n;
  for (int b = 0; b < n; b += step) {
    const int m = std::min(step, n - b);
    const auto rows = [&](MatView<float> x) {
      return MatView<float>(x.Row(b), m, x.cols, x.stride);
    };
    const std::span<const int32_t> pb = pos.subspan(static_cast<size_t>(b), static_cast<size_t>(m));
    if (Status s = cache.Append(layer, rows(r.k), rows(r.v), pb); !s.ok()) return s;
    if (tap) tap->OnQueries(layer, pb, rows(r.q));
    if (!AttendCached(shape, rows(r.q), pb, cache, layer, rows(r.attn), pool, aws))
      return AttentionFailed(layer);
    if (tap) tap->OnAttentionOutput(layer, rows(r.attn));
    if (windowed)
      cache.DropBefore(layer, KvRetention::FirstVisible(int64_t{pb.back()} + 1, shape.window));
  }
  return Status::Ok();
}

// x += post_norm(h) * scale over n rows of d_model (granite's residual multiplier, gemma2's
// norm after each block; either may be absent).
void AddResidual(ThreadPool& pool, const RowViews& r, const std::vector<float>& post_norm = {},
                 float eps = 0, float scale = 1.0f) {
  const int64_t D = r.x.cols;
  ForRows(pool, r.x.rows, D, [&](int64_t row) {
    float* x = r.x.Row(row);
    float* h = r.h.Row(row);
    if (!post_norm.empty()) RmsNorm(h, post_norm.data(), static_cast<int>(D), eps, h);
    if (scale != 1.0f) {
      for (int64_t i = 0; i < D; ++i) x[i] += h[i] * scale;
    } else {
      for (int64_t i = 0; i < D; ++i) x[i] += h[i];
    }
  });
}

// The layer's attention inputs from x: h = normed x, queries (q-norm, RoPE), keys (bias,
// k-norm, RoPE) and values (bias), one row per token at its position.
void ProjectQkv(const Model& model, int layer, const RowViews& r, std::span<const int32_t> pos,
                ThreadPool& pool) {
  const ModelConfig& c = model.config();
  const LayerWeights& L = model.layer(layer);
  RmsNormRows(r.x, L.attn_norm, c.rms_eps, r.h, pool);
  const WeightView* const w[] = {&L.wq, &L.wk, &L.wv};
  const MatView<float> out[] = {r.q, r.k, r.v};
  MatMulSameInput(w, r.h, out, pool);
  FinishQueries(model, layer, pos, r.q);
  for (int64_t i = 0; i < r.k.rows; ++i) {
    float* kr = r.k.Row(i);
    float* vr = r.v.Row(i);
    if (!L.bk.empty()) {
      for (int j = 0; j < c.kv_width(); ++j) {
        kr[j] += L.bk[static_cast<size_t>(j)];
        vr[j] += L.bv[static_cast<size_t>(j)];
      }
    }
    if (!L.k_norm.empty()) {
      for (int hh = 0; hh < c.n_kv_heads; ++hh) {
        float* kv = kr + static_cast<int64_t>(hh) * c.head_dim;
        RmsNorm(kv, L.k_norm.data(), c.head_dim, c.rms_eps, kv);
      }
    }
  }
  model.ApplyRope(r.k, c.n_kv_heads, pos);
}

// SwiGLU of the normed rows h, added to x.
void AddDenseFfn(const ModelConfig& c, const LayerWeights& L, const RowViews& r, ThreadPool& pool,
                 ForwardWorkspace& ws) {
  const int64_t n = r.x.rows;
  MatView<float> gate(ws.gate.data(), n, c.d_ff);
  MatView<float> up(ws.up.data(), n, c.d_ff);
  const WeightView* const w[] = {&L.w_gate, &L.w_up};
  const MatView<float> out[] = {gate, up};
  MatMulSameInput(w, r.h, out, pool);
  if (c.ffn_activation == FfnActivation::kGeluTanh) {
    GeGluInPlace(ws.gate.data(), ws.up.data(), n * c.d_ff, pool);
  } else {
    SwiGluInPlace(ws.gate.data(), ws.up.data(), n * c.d_ff, pool);
  }
  MatMul(L.w_down, gate, r.h, pool);
  AddResidual(pool, r, L.ffn_post_norm, c.rms_eps, c.residual_scale);
}

// The rest of a layer after attention: W_O and the residual, then the FFN block (dense or
// routed experts) and its residual.
void FinishLayer(const ModelConfig& c, const LayerWeights& L, const RowViews& r, ThreadPool& pool,
                 ForwardWorkspace& ws) {
  MatMul(L.wo, r.attn, r.h, pool);
  AddResidual(pool, r, L.attn_post_norm, c.rms_eps, c.residual_scale);
  RmsNormRows(r.x, L.ffn_norm, c.rms_eps, r.h, pool);
  if (c.moe()) {
    AddExpertFfn(c, L, r.h, r.x, pool, ws);
  } else {
    AddDenseFfn(c, L, r, pool, ws);
  }
}

}  // namespace

void Model::EmbedRow(Token token, float* row) const {
  GetRow(token_embd_, token, row);
  if (config_.embedding_scale != 1.0f) {
    for (int j = 0; j < config_.d_model; ++j) row[j] *= config_.embedding_scale;
  }
}

void Model::Embed(std::span<const Token> tokens, MatView<float> x) const {
  for (size_t i = 0; i < tokens.size(); ++i) EmbedRow(tokens[i], x.Row(static_cast<int64_t>(i)));
}

AttnShape Model::Attention(int layer) const {
  const ModelConfig& c = config_;
  AttnShape shape{c.n_heads, c.n_kv_heads, c.head_dim, static_cast<float>(c.QkScale())};
  shape.softcap = c.attn_softcap;
  if (c.LocalLayer(layer)) shape.window = c.sliding_window;
  return shape;
}

void Model::OutputLogits(MatView<const float> rows, float* scratch, MatView<float> logits,
                         ThreadPool& pool) const {
  MatView<float> normed(scratch, rows.rows, config_.d_model);
  RmsNormRows(rows, output_norm_, config_.rms_eps, normed, pool);
  const MatView<float> out(logits.data, rows.rows, config_.vocab_size, logits.stride);
  MatMul(output_, normed, out, pool);
  const float scale = 1.0f / config_.logit_scale, cap = config_.final_softcap;
  if (scale == 1.0f && cap == 0) return;
  ForRows(pool, out.rows, out.cols, [&](int64_t r) {
    float* row = out.Row(r);
    for (int64_t j = 0; j < out.cols; ++j) {
      row[j] *= scale;
      if (cap > 0) row[j] = cap * std::tanh(row[j] / cap);
    }
  });
}

size_t ForwardWorkspace::Bytes() const {
  const auto bytes = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  return bytes(x) + bytes(h) + bytes(q) + bytes(k) + bytes(v) + bytes(attn) + bytes(gate) +
         bytes(up) + bytes(positions) + bytes(router_logits) + bytes(choices) +
         bytes(expert_start) + bytes(expert_rows) + bytes(moe_in) + bytes(moe_out) +
         attention.HighWaterBytes();
}

Status Model::Forward(std::span<const Token> tokens, KvCache& cache, const ForwardOptions& opts,
                      MatView<float> logits, ThreadPool& pool, ForwardWorkspace& ws,
                      ForwardTap* tap) const {
  const ModelConfig& c = config_;
  const int n = static_cast<int>(tokens.size());
  if (n == 0) return Status::Error("forward: no tokens");
  const int n_out = opts.all_logits ? n : 1;
  Check(logits.rows >= n_out && logits.cols == c.vocab_size, "forward: logits view too small");
  if (Status s = CheckCacheShape(c, cache); !s.ok()) return s;
  for (Token t : tokens) {
    if (Status s = CheckToken(c, t); !s.ok()) return s;
  }
  if (c.moe() && static_cast<int64_t>(n) * c.n_experts_used > std::numeric_limits<int32_t>::max())
    return Status::Error("forward: too many tokens in one call for the expert routing");
  const int32_t p0 = cache.NextPosition();
  if (Status s = CheckPositions(p0, n); !s.ok()) return s;

  const RowViews r = PrepareRows(c, n, ws);
  for (int i = 0; i < n; ++i) ws.positions[static_cast<size_t>(i)] = p0 + i;
  const std::span<const int32_t> pos(ws.positions.data(), static_cast<size_t>(n));
  Embed(tokens, r.x);
  for (int l = 0; l < c.n_layers; ++l) {
    const AttnShape shape = Attention(l);
    ProjectQkv(*this, l, r, pos, pool);
    PRIMEKV_RETURN_IF_ERROR(CheckKeys(l, r.k));
    PRIMEKV_RETURN_IF_ERROR(
        AppendAndAttend(shape, r, pos, cache, l, opts.drop_expired, pool, ws.attention, tap));
    FinishLayer(c, layers_[static_cast<size_t>(l)], r, pool, ws);
  }
  cache.SetNextPosition(p0 + n);
  OutputLogits(MatView<const float>(r.x.Row(n - n_out), n_out, c.d_model), ws.h.data(), logits,
               pool);
  return Status::Ok();
}

Status Model::ForwardDecodeBatch(std::span<const DecodeSlot> slots, MatView<float> logits,
                                 ThreadPool& pool, ForwardWorkspace& ws) const {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(slots.size());
  if (n == 0) return Status::Error("forward: no tokens");
  Check(logits.rows >= n && logits.cols == c.vocab_size, "forward: logits view too small");
  // Everything is checked before any cache changes, so a bad slot leaves every cache as it was.
  for (int64_t i = 0; i < n; ++i) {
    const DecodeSlot& slot = slots[static_cast<size_t>(i)];
    if (slot.cache == nullptr) return Status::Error("forward: decode slot without a cache");
    if (Status s = CheckCacheShape(c, *slot.cache); !s.ok()) return s;
    if (Status s = CheckToken(c, slot.token); !s.ok()) return s;
    if (Status s = CheckPositions(slot.cache->NextPosition(), 1); !s.ok()) return s;
    for (int64_t j = 0; j < i; ++j) {
      if (slots[static_cast<size_t>(j)].cache == slot.cache)
        return Status::Error("forward: two decode slots share one KV cache");
    }
  }
  for (int64_t b = 0; b < n; b += kDecodeBatchRows) {
    const int64_t m = std::min<int64_t>(kDecodeBatchRows, n - b);
    MatView<float> part(logits.Row(b), m, logits.cols, logits.stride);
    if (Status s = DecodeRows(slots.subspan(static_cast<size_t>(b), static_cast<size_t>(m)), part,
                              pool, ws);
        !s.ok())
      return s;
  }
  return Status::Ok();
}

Status Model::DecodeRows(std::span<const DecodeSlot> slots, MatView<float> logits, ThreadPool& pool,
                         ForwardWorkspace& ws) const {
  const ModelConfig& c = config_;
  const int n = static_cast<int>(slots.size());
  const RowViews r = PrepareRows(c, n, ws);
  for (int i = 0; i < n; ++i) {
    const DecodeSlot& slot = slots[static_cast<size_t>(i)];
    ws.positions[static_cast<size_t>(i)] = slot.cache->NextPosition();
    EmbedRow(slot.token, r.x.Row(i));
  }
  const std::span<const int32_t> pos(ws.positions.data(), static_cast<size_t>(n));
  for (int l = 0; l < c.n_layers; ++l) {
    const AttnShape shape = Attention(l);
    ProjectQkv(*this, l, r, pos, pool);
    PRIMEKV_RETURN_IF_ERROR(CheckKeys(l, r.k));
    // Each row appends to and attends over its own cache, exactly as a one-token Forward.
    for (int i = 0; i < n; ++i) {
      const DecodeSlot& slot = slots[static_cast<size_t>(i)];
      const std::span<const int32_t> pi = pos.subspan(static_cast<size_t>(i), 1);
      const MatView<float> qi(r.q.Row(i), 1, r.q.cols), ai(r.attn.Row(i), 1, r.attn.cols);
      if (Status s = slot.cache->Append(l, MatView<const float>(r.k.Row(i), 1, r.k.cols),
                                        MatView<const float>(r.v.Row(i), 1, r.v.cols), pi);
          !s.ok())
        return s;
      if (slot.tap) slot.tap->OnQueries(l, pi, qi);
      if (!AttendCached(shape, qi, pi, *slot.cache, l, ai, pool, ws.attention))
        return AttentionFailed(l);
      if (slot.drop_expired && shape.window > 0)
        slot.cache->DropBefore(l, KvRetention::FirstVisible(int64_t{pi[0]} + 1, shape.window));
      if (slot.tap) slot.tap->OnAttentionOutput(l, ai);
    }
    FinishLayer(c, layers_[static_cast<size_t>(l)], r, pool, ws);
  }
  for (int i = 0; i < n; ++i) {
    slots[static_cast<size_t>(i)].cache->SetNextPosition(pos[static_cast<size_t>(i)] + 1);
  }
  OutputLogits(r.x, ws.h.data(), logits, pool);
  return Status::Ok();
}

}  // namespace primekv
