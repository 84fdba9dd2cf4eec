#include "primekv/press/compressor.h"

#include <algorithm>
#include <chrono>

#include "press/scorer_util.h"
#include "primekv/press/mean_query.h"
#include "primekv/press/output_gram.h"
#include "primekv/press/profile_locator.h"
#include "primekv/quant/matmul.h"

namespace primekv {

PressCapture::PressCapture(const Model& model, const PressNeeds& needs)
    : model_(model), needs_(needs), layers_(model.config().n_layers) {}

void PressCapture::Clear() {
  for (auto& l : layers_) l = Layer{};
}

void PressCapture::ClearFuture() {
  for (auto& l : layers_) l.future.clear();
}

void PressCapture::OnQueries(int layer, std::span<const int32_t> pos, MatView<const float> q) {
  Layer& L = layers_[layer];
  if (recording_future_) {
    if (!needs_.future_queries) return;
    for (int64_t r = 0; r < q.rows; ++r)
      L.future.insert(L.future.end(), q.Row(r), q.Row(r) + q.cols);
    return;
  }
  if (needs_.window_queries > 0) KeepWindow(L, pos, q);
  if (needs_.query_stats) AddQueryStats(L.stats, pos, q);
}

void PressCapture::KeepWindow(Layer& L, std::span<const int32_t> pos, MatView<const float> q) {
  const int64_t w = needs_.window_queries;
  // Keep only the newest w rows: old rows shift out, new rows append.
  for (int64_t r = std::max<int64_t>(0, q.rows - w); r < q.rows; ++r) {
    L.window.insert(L.window.end(), q.Row(r), q.Row(r) + q.cols);
    L.window_pos.push_back(pos[r]);
  }
  const int64_t have = std::ssize(L.window_pos);
  if (have > w) {
    L.window.erase(L.window.begin(), L.window.begin() + (have - w) * q.cols);
    L.window_pos.erase(L.window_pos.begin(), L.window_pos.begin() + (have - w));
  }
}

void PressCapture::AddQueryStats(QueryStats& st, std::span<const int32_t> pos,
                                 MatView<const float> q) {
  const ModelConfig& c = model_.config();
  const int d = c.head_dim;
  if (st.sum.empty()) {
    st.sum.assign(static_cast<size_t>(c.n_heads) * d, 0.0);
    st.sum_sq.assign(static_cast<size_t>(c.n_heads) * d * d, 0.0);
  }
  // Statistics are of pre-RoPE queries: undo the rotation with negated positions.
  scratch_.resize(q.cols);
  const MatView<double> sum(st.sum.data(), c.n_heads, d);
  for (int64_t r = 0; r < q.rows; ++r) {
    if (pos[r] < kStatsSinks) continue;
    std::copy(q.Row(r), q.Row(r) + q.cols, scratch_.begin());
    const int32_t neg = -pos[r];
    model_.ApplyRope(MatView<float>(scratch_.data(), 1, q.cols), c.n_heads,
                     std::span<const int32_t>(&neg, 1));
    for (int h = 0; h < c.n_heads; ++h) {
      const float* x = scratch_.data() + static_cast<int64_t>(h) * d;
      const MatView<double> outer(st.sum_sq.data() + static_cast<int64_t>(h) * d * d, d, d);
      for (int a = 0; a < d; ++a) {
        sum(h, a) += x[a];
        for (int b = 0; b < d; ++b) outer(a, b) += static_cast<double>(x[a]) * x[b];
      }
    }
    ++st.count;
  }
}

MatView<const float> PressCapture::Window(int layer) const {
  const Layer& L = layers_[layer];
  return {L.window.data(), std::ssize(L.window_pos), model_.config().q_width()};
}

std::span<const int32_t> PressCapture::WindowPositions(int layer) const {
  return layers_[layer].window_pos;
}

const QueryStats* PressCapture::Stats(int layer) const { return &layers_[layer].stats; }

MatView<const float> PressCapture::Future(int layer) const {
  const Layer& L = layers_[layer];
  const int64_t width = model_.config().q_width();
  return {L.future.data(), std::ssize(L.future) / width, width};
}

Compressor::Compressor(const Model& model, Press press)
    : model_(model),
      press_(std::move(press)),
      grams_(model.config().n_layers),
      gram_once_(model.config().n_layers),
      mean_query_(model.config().n_layers),
      mean_query_once_(model.config().n_layers) {
  if (press_.budget.profile == nullptr) return;
  if (Status fits = press_.budget.profile->CheckModel(model); !fits.ok())
    fits_ = Status::Error("press " + press_.resolved + ": " + fits.message());
}

PressNeeds Compressor::Needs() const {
  return press_.scorer ? press_.scorer->Needs() : PressNeeds{};
}

std::span<const float> Compressor::Gram(int layer) const {
  std::call_once(gram_once_[layer], [&] {
    std::vector<float>& g = grams_[layer];
    for (int h = 0; h < model_.config().n_kv_heads; ++h) {
      auto one = OutputGram(model_, layer, h);
      g.insert(g.end(), one.begin(), one.end());
    }
  });
  return grams_[layer];
}

std::span<const MeanQueryMap> Compressor::MeanQueryMaps(int layer) const {
  std::call_once(mean_query_once_[layer], [&] {
    for (int h = 0; h < model_.config().n_kv_heads; ++h)
      mean_query_[layer].push_back(MeanQueryMapOf(model_, layer, h));
  });
  return mean_query_[layer];
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

void Compressor::FillInput(LayerInput& in, const KvCache& cache, const PressCapture* capture,
                           std::vector<float>& wo) const {
  const PressNeeds needs = Needs();
  in.rope_inv_freq = model_.rope_inv_freq();
  in.next_position = cache.NextPosition();
  if (capture) {
    // A capture shared by several presses may hold more rows than this one reads.
    const MatView<const float> win = capture->Window(in.layer);
    const int64_t rows = std::min<int64_t>(win.rows, needs.window_queries);
    in.window_queries = {win.Row(win.rows - rows), rows, win.cols, win.stride};
    in.window_positions = capture->WindowPositions(in.layer).subspan(win.rows - rows);
    in.query_stats = capture->Stats(in.layer);
    in.future_queries = capture->Future(in.layer);
    if (needs.reconstruction) in.reconstruction = capture->Reconstruction(in.layer);
  }
  if (needs.output_gram) in.output_gram = Gram(in.layer);
  if (needs.mean_query) in.mean_query = MeanQueryMaps(in.layer);
  if (needs.output_weights) {
    const WeightView& w = model_.layer(in.layer).wo;
    wo.resize(w.rows * w.cols);
    for (int64_t row = 0; row < w.rows; ++row) GetRow(w, row, wo.data() + row * w.cols);
    in.output_weights = {wo.data(), w.rows, w.cols};
  }
}

// A profile's keep counts for a layer's heads. The share applies to the tokens seen so far
// (the cache's next position), and a fixed target stands for the ratio it keeps of them, as the
// conversation sets targets (KeepCount of the tokens seen).
std::vector<int> Compressor::ProfileKeeps(const KvCache& cache, int layer, double ratio,
                                          int target) const {
  const BudgetProfile& profile = *press_.budget.profile;
  const int seen = std::max(static_cast<int>(cache.NextPosition()), 1);
  const double r = target > 0 ? std::clamp(1.0 - (target + 0.5) / seen, 0.0, 1.0) : ratio;
  std::vector<int> keep(static_cast<size_t>(cache.n_kv_heads()));
  for (int h = 0; h < cache.n_kv_heads(); ++h) keep[h] = profile.Keep(seen, r, layer, h);
  return keep;
}

Result<Compressor::ScoredLayer> Compressor::ScoreLayer(const KvCache& cache, int layer,
                                                       double ratio, int target,
                                                       const PressCapture* capture,
                                                       LayerScratch& scratch) const {
  const ModelConfig& c = model_.config();
  int max_len = 0;
  for (int h = 0; h < c.n_kv_heads; ++h) max_len = std::max(max_len, cache.Length(layer, h));
  if (max_len == 0) return ScoredLayer{};
  const BudgetProfile* profile = press_.budget.profile.get();
  std::vector<int> keep;  // per head, with a profile
  if (profile != nullptr) {
    // Heads keep different shares, so a head under `target` may still be over its own.
    keep = ProfileKeeps(cache, layer, ratio, target);
    bool over = false;
    for (int h = 0; h < c.n_kv_heads; ++h) over = over || cache.Length(layer, h) > keep[h];
    if (!over) return ScoredLayer{};
  } else if (target > 0 && max_len <= target) {
    return ScoredLayer{};
  }
  // Where windowed layers alternate with global ones (gemma2), a windowed layer already holds
  // at most its window: compressed only when asked. Where every layer is windowed (phi3, whose
  // window is about its trained context), they are the layers to compress.
  if (c.LocalLayer(layer) && !c.swa_every_layer && !press_.budget.compress_local)
    return ScoredLayer{};
  // A fixed target becomes the ratio that keeps exactly `target` of the longest head.
  const double r = target > 0 ? 1.0 - (target + 0.5) / max_len : ratio;
  const bool values = Needs().values;
  const auto* per_head = dynamic_cast<const press_internal::HeadScorer*>(press_.scorer.get());
  auto read = [&](int h, HeadEntries& e) {
    cache.ReadHead(layer, h, &e.keys, values ? &e.values : nullptr, &e.positions);
  };
  if (!per_head) {
    for (int h = 0; h < c.n_kv_heads; ++h) read(h, scratch.heads[h]);
  }
  LayerInput in(c);
  in.layer = layer;
  in.heads = scratch.heads;
  FillInput(in, cache, capture, scratch.wo);
  if (Needs().future_queries && in.future_queries.rows == 0)
    return Status::Error(press_.name + " press: no future queries were recorded");
  if (Needs().reconstruction) {
    // The pass scored the entries as they were then; any other set cannot use its scores.
    int64_t total = 0;
    for (int h = 0; h < c.n_kv_heads; ++h) total += cache.Length(layer, h);
    if (std::ssize(in.reconstruction) != total || total != int64_t{max_len} * c.n_kv_heads)
      return Status::Error(press_.name +
                           " press: the cache is not the context its reconstruction pass scored");
  }
  PRIMEKV_RETURN_IF_ERROR(CheckLayerInput(Needs(), in, press_.name));
  ScoredLayer out{HeadScores(c.n_kv_heads), r, std::move(keep)};
  if (per_head) {
    // A head's scores read only that head, so one float copy of a head is enough: a layer's
    // copies (n_kv_heads times as many bytes per scoring thread) were most of chunked mode's
    // memory above the cache. The one buffer visits each head's slot; the others stay empty.
    for (int h = 0; h < c.n_kv_heads; ++h) {
      HeadEntries& slot = scratch.heads[h];
      std::swap(slot, scratch.one);
      read(h, slot);
      out.scores[h].assign(slot.positions.size(), 0.0f);
      per_head->ScoreHead(in, h, out.scores[h]);
      std::swap(slot, scratch.one);
    }
    return out;
  }
  for (int h = 0; h < c.n_kv_heads; ++h)
    out.scores[h].assign(scratch.heads[h].positions.size(), 0.0f);
  press_.scorer->Score(in, out.scores);
  return out;
}

// budget=shared keeps one set of positions everywhere, so every head must hold the same ones.
Status Compressor::CheckSamePositions(const KvCache& cache) const {
  const int n = cache.Length(0, 0);
  for (int l = 0; l < model_.config().n_layers; ++l) {
    for (int h = 0; h < cache.n_kv_heads(); ++h) {
      bool same = cache.Length(l, h) == n;
      for (int row = 0; same && row < n; ++row)
        same = cache.PositionAt(l, h, row) == cache.PositionAt(0, 0, row);
      if (!same)
        return Status::Error("press " + press_.name +
                             ": budget=shared needs every head to hold the same positions; it "
                             "compresses a context once (not chunked, decode or multi-turn)");
    }
  }
  return Status::Ok();
}

Status Compressor::Run(KvCache& cache, double ratio, int target, const PressCapture* capture,
                       ThreadPool& pool, CompressStats* stats) const {
  const int n_layers = model_.config().n_layers;
  const auto t0 = std::chrono::steady_clock::now();
  if (stats) {
    stats->bytes_before = cache.BytesInUse();
    stats->kept_per_layer.assign(n_layers, 0);
  }
  const bool active = press_.scorer && (target > 0 || ratio > 0);
  if (active) PRIMEKV_RETURN_IF_ERROR(fits_);
  if (active && (Needs().ReadsQueries() || Needs().reconstruction) && capture == nullptr) {
    return Status::Error("press " + press_.name +
                         " needs queries captured during the forward pass");
  }
  std::vector<Status> errors(n_layers);
  // Kept rows per layer and head; applied after scoring because the page pool is shared.
  std::vector<std::vector<std::vector<int32_t>>> kept_rows(n_layers);
  // A global or shared budget selects only once every layer is scored; the others per layer.
  const bool shared = press_.budget.kind == BudgetKind::kShared;
  const bool global = press_.budget.kind == BudgetKind::kGlobal || shared;
  if (active && shared) PRIMEKV_RETURN_IF_ERROR(CheckSamePositions(cache));
  std::vector<HeadScores> scores(global ? n_layers : 0);
  std::vector<double> ratios(n_layers, 0.0);
  if (active) {
    // Scoring layers is independent: one task each.
    pool.ParallelFor(n_layers, [&](int64_t begin, int64_t end, int) {
      LayerScratch scratch{std::vector<HeadEntries>(model_.config().n_kv_heads), {}, {}};
      for (int64_t l = begin; l < end; ++l) {
        auto scored = ScoreLayer(cache, static_cast<int>(l), ratio, target, capture, scratch);
        if (!scored.ok()) {
          errors[l] = scored.status();
        } else if (global) {
          scores[l] = std::move(scored->scores);
          ratios[l] = scored->ratio;
        } else if (!scored->keep.empty()) {
          for (size_t h = 0; h < scored->scores.size(); ++h)
            kept_rows[l].push_back(SelectTopK(scored->scores[h], scored->keep[h]));
        } else {
          kept_rows[l] =
              SelectForLayer(scored->scores, scored->ratio, press_.budget,
                             press_.scorer->ComparableAcrossHeads(), static_cast<int>(l), n_layers);
        }
      }
    });
  }
  if (shared && active) {
    kept_rows = SelectSharedPositions(scores, ratios);
  } else if (global) {
    kept_rows = SelectAcrossLayers(scores, ratios, press_.budget);
  }
  for (int l = 0; l < n_layers; ++l) {
    const auto& kept = kept_rows[l];
    for (int h = 0; h < std::ssize(kept); ++h) {
      if (std::ssize(kept[h]) < cache.Length(l, h)) cache.Retain(l, h, kept[h]);
    }
  }
  for (const Status& s : errors) PRIMEKV_RETURN_IF_ERROR(s);
  if (stats) {
    for (int l = 0; l < n_layers; ++l)
      for (int h = 0; h < cache.n_kv_heads(); ++h) stats->kept_per_layer[l] += cache.Length(l, h);
    stats->bytes_after = cache.BytesInUse();
    stats->score_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  return Status::Ok();
}

Result<std::vector<Compressor>> MakeCompressors(const Model& model,
                                                std::span<const std::string> presses,
                                                PressNeeds* needs) {
  std::vector<Compressor> out;
  for (const std::string& name : presses) {
    PRIMEKV_ASSIGN_OR_RETURN(const std::string text, ResolveAutoProfile(name, model.path()));
    PRIMEKV_ASSIGN_OR_RETURN(const PressSpec spec, ParsePressSpec(text));
    PRIMEKV_ASSIGN_OR_RETURN(Press press, MakePress(spec));
    out.emplace_back(model, std::move(press));
    PRIMEKV_RETURN_IF_ERROR(out.back().CheckModel());
    if (needs) *needs = UnionNeeds(*needs, out.back().Needs());
  }
  return out;
}

}  // namespace primekv
