#include "primekv/compressor.h"

#include <algorithm>
#include <chrono>

#include "primekv/matmul.h"

namespace primekv {

PressCapture::PressCapture(const Model& model, const PressNeeds& needs)
    : model_(model), needs_(needs), layers_(static_cast<size_t>(model.config().n_layers)) {}

void PressCapture::Clear() {
  for (auto& l : layers_) l = Layer{};
}

void PressCapture::ClearFuture() {
  for (auto& l : layers_) l.future.clear();
}

void PressCapture::OnQueries(int layer, std::span<const int32_t> pos, MatView<const float> q) {
  Layer& L = layers_[static_cast<size_t>(layer)];
  const int width = static_cast<int>(q.cols);
  if (recording_future_) {
    if (!needs_.future_queries) return;
    for (int64_t r = 0; r < q.rows; ++r)
      L.future.insert(L.future.end(), q.Row(r), q.Row(r) + width);
    return;
  }
  if (needs_.window_queries > 0) {
    const int w = needs_.window_queries;
    // Keep only the newest w rows: old rows shift out, new rows append.
    for (int64_t r = std::max<int64_t>(0, q.rows - w); r < q.rows; ++r) {
      L.window.insert(L.window.end(), q.Row(r), q.Row(r) + width);
      L.window_pos.push_back(pos[static_cast<size_t>(r)]);
    }
    const int have = static_cast<int>(L.window_pos.size());
    if (have > w) {
      L.window.erase(L.window.begin(), L.window.begin() + static_cast<int64_t>(have - w) * width);
      L.window_pos.erase(L.window_pos.begin(), L.window_pos.begin() + (have - w));
    }
  }
  if (needs_.query_stats) {
    const ModelConfig& c = model_.config();
    const int d = c.head_dim;
    QueryStats& st = L.stats;
    if (st.sum.empty()) {
      st.sum.assign(static_cast<size_t>(c.n_heads) * d, 0.0);
      st.sum_sq.assign(static_cast<size_t>(c.n_heads) * d * d, 0.0);
    }
    // Statistics are of pre-RoPE queries: undo the rotation with negated positions.
    scratch_.resize(static_cast<size_t>(width));
    for (int64_t r = 0; r < q.rows; ++r) {
      const int32_t p = pos[static_cast<size_t>(r)];
      if (p < kStatsSinks) continue;
      std::copy(q.Row(r), q.Row(r) + width, scratch_.begin());
      const int32_t neg = -p;
      model_.ApplyRope(MatView<float>(scratch_.data(), 1, width), c.n_heads,
                       std::span<const int32_t>(&neg, 1));
      for (int h = 0; h < c.n_heads; ++h) {
        const float* x = scratch_.data() + static_cast<size_t>(h) * d;
        double* s = st.sum.data() + static_cast<size_t>(h) * d;
        double* ss = st.sum_sq.data() + static_cast<size_t>(h) * d * d;
        for (int a = 0; a < d; ++a) {
          s[a] += x[a];
          for (int b = 0; b < d; ++b)
            ss[static_cast<size_t>(a) * d + b] += static_cast<double>(x[a]) * x[b];
        }
      }
      ++st.count;
    }
  }
}

MatView<const float> PressCapture::Window(int layer) const {
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const int64_t width = model_.config().q_width();
  return {L.window.data(), static_cast<int64_t>(L.window_pos.size()), width};
}

std::span<const int32_t> PressCapture::WindowPositions(int layer) const {
  return layers_[static_cast<size_t>(layer)].window_pos;
}

const QueryStats* PressCapture::Stats(int layer) const {
  return &layers_[static_cast<size_t>(layer)].stats;
}

MatView<const float> PressCapture::Future(int layer) const {
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const int64_t width = model_.config().q_width();
  return {L.future.data(), static_cast<int64_t>(L.future.size()) / width, width};
}

Compressor::Compressor(const Model& model, Press press)
    : model_(model),
      press_(std::move(press)),
      grams_(static_cast<size_t>(model.config().n_layers)),
      gram_once_(static_cast<size_t>(model.config().n_layers)) {}

PressNeeds Compressor::Needs() const {
  return press_.scorer ? press_.scorer->Needs() : PressNeeds{};
}

std::span<const float> Compressor::Gram(int layer) const {
  std::call_once(gram_once_[static_cast<size_t>(layer)], [&] {
    const ModelConfig& c = model_.config();
    std::vector<float>& g = grams_[static_cast<size_t>(layer)];
    for (int h = 0; h < c.n_kv_heads; ++h) {
      auto one = model_.OutputGram(layer, h);
      g.insert(g.end(), one.begin(), one.end());
    }
  });
  return grams_[static_cast<size_t>(layer)];
}

Status Compressor::Compress(KvCache& cache, double ratio, const PressCapture* capture,
                            ThreadPool& pool, CompressStats* stats) const {
  if (!(ratio >= 0 && ratio < 1)) return Status::Error("compression ratio must be in [0, 1)");
  return Run(cache, ratio, -1, capture, pool, stats);
}

Status Compressor::CompressTo(KvCache& cache, int target, const PressCapture* capture,
                              ThreadPool& pool, CompressStats* stats) const {
  if (target < 1) return Status::Error("compression target must be >= 1 entry per head");
  return Run(cache, 0, target, capture, pool, stats);
}

Status Compressor::Run(KvCache& cache, double ratio, int target, const PressCapture* capture,
                       ThreadPool& pool, CompressStats* stats) const {
  const ModelConfig& c = model_.config();
  const auto t0 = std::chrono::steady_clock::now();
  if (stats) {
    stats->bytes_before = cache.BytesInUse();
    stats->kept_per_layer.assign(static_cast<size_t>(c.n_layers), 0);
  }
  const bool active = press_.scorer && (target > 0 || ratio > 0);
  const PressNeeds needs = Needs();
  if (active && (needs.window_queries > 0 || needs.query_stats || needs.future_queries) &&
      capture == nullptr) {
    return Status::Error("press " + press_.name +
                         " needs queries captured during the forward pass");
  }
  std::vector<Status> errors(static_cast<size_t>(c.n_layers));
  // Kept rows per layer and head; applied after scoring because the page pool is shared.
  std::vector<std::vector<std::vector<int32_t>>> kept_rows(static_cast<size_t>(c.n_layers));
  if (active) {
    // Layers are independent: one task each.
    pool.ParallelFor(c.n_layers, [&](int64_t begin, int64_t end, int) {
      std::vector<HeadEntries> heads(static_cast<size_t>(c.n_kv_heads));
      std::vector<float> wo;
      for (int64_t li = begin; li < end; ++li) {
        const int l = static_cast<int>(li);
        int max_len = 0;
        for (int h = 0; h < c.n_kv_heads; ++h) max_len = std::max(max_len, cache.Length(l, h));
        if (max_len == 0 || (target > 0 && max_len <= target)) continue;
        // A fixed target becomes the ratio that keeps exactly `target` of the longest head.
        const double r = target > 0 ? 1.0 - (target + 0.5) / max_len : ratio;
        for (int h = 0; h < c.n_kv_heads; ++h) {
          HeadEntries& e = heads[static_cast<size_t>(h)];
          cache.ReadHead(l, h, &e.keys, needs.values ? &e.values : nullptr, &e.positions);
        }
        LayerInput in;
        in.layer = l;
        in.n_layers = c.n_layers;
        in.n_heads = c.n_heads;
        in.n_kv_heads = c.n_kv_heads;
        in.head_dim = c.head_dim;
        in.d_model = c.d_model;
        in.rope_base = c.rope_base;
        in.rope_half = c.rope_style == RopeStyle::kHalf;
        in.rope_inv_freq = model_.rope_inv_freq();
        in.heads = heads;
        in.next_position = cache.NextPosition();
        if (capture) {
          // A capture shared by several presses may hold more rows than this one reads.
          const MatView<const float> win = capture->Window(l);
          const int64_t rows = std::min<int64_t>(win.rows, needs.window_queries);
          in.window_queries = {win.Row(win.rows - rows), rows, win.cols, win.stride};
          in.window_positions =
              capture->WindowPositions(l).subspan(static_cast<size_t>(win.rows - rows));
          in.query_stats = capture->Stats(l);
          in.future_queries = capture->Future(l);
        }
        if (needs.output_gram) in.output_gram = Gram(l);
        if (needs.future_queries) {
          const WeightView& w = model_.layer(l).wo;
          wo.resize(static_cast<size_t>(w.rows * w.cols));
          for (int64_t row = 0; row < w.rows; ++row) GetRow(w, row, wo.data() + row * w.cols);
          in.wo_rows = wo;
          if (in.future_queries.rows == 0) {
            errors[static_cast<size_t>(l)] =
                Status::Error("oracle press: no future queries were recorded");
            continue;
          }
        }
        HeadScores scores(static_cast<size_t>(c.n_kv_heads));
        for (int h = 0; h < c.n_kv_heads; ++h)
          scores[static_cast<size_t>(h)].assign(
              static_cast<size_t>(heads[static_cast<size_t>(h)].size()), 0.0f);
        press_.scorer->Score(in, scores);
        kept_rows[static_cast<size_t>(l)] = SelectForLayer(
            scores, r, press_.budget, press_.scorer->ComparableAcrossHeads(), l, c.n_layers);
      }
    });
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const auto& kept = kept_rows[static_cast<size_t>(l)];
    for (int h = 0; h < static_cast<int>(kept.size()); ++h) {
      if (static_cast<int>(kept[static_cast<size_t>(h)].size()) < cache.Length(l, h)) {
        cache.Retain(l, h, kept[static_cast<size_t>(h)]);
      }
    }
  }
  for (const Status& s : errors) {
    if (!s.ok()) return s;
  }
  if (stats) {
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h)
        stats->kept_per_layer[static_cast<size_t>(l)] += cache.Length(l, h);
    stats->bytes_after = cache.BytesInUse();
    stats->score_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  return Status::Ok();
}

}  // namespace primekv
