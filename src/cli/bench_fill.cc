#include "cli/bench_fill.h"

#include <algorithm>
#include <span>
#include <vector>

#include "primekv/press/press.h"

namespace primekv::cli {

namespace {

// Fresh N(0, 1) rows for each piece, so a press scoring them never sees repeated entries; one
// draw serves every layer.
class SyntheticRows {
 public:
  SyntheticRows(int width, std::mt19937_64& rng) : width_(width), rng_(rng) {}

  Status Append(KvCache& cache, int count) {
    const size_t n = static_cast<size_t>(count) * width_;
    k_.resize(n);
    v_.resize(n);
    pos_.resize(static_cast<size_t>(count));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& x : k_) x = normal(rng_);
    for (auto& x : v_) x = normal(rng_);
    const int32_t p0 = cache.NextPosition();
    for (int j = 0; j < count; ++j) pos_[static_cast<size_t>(j)] = p0 + j;
    MatView<const float> k(k_.data(), count, width_);
    MatView<const float> v(v_.data(), count, width_);
    for (int l = 0; l < cache.n_layers(); ++l) {
      PRIMEKV_RETURN_IF_ERROR(cache.Append(l, k, v, pos_));
    }
    cache.SetNextPosition(p0 + count);
    return Status::Ok();
  }

 private:
  int width_;
  std::mt19937_64& rng_;
  std::vector<float> k_, v_;
  std::vector<int32_t> pos_;
};

}  // namespace

Status FillDepth(const Model& model, const Compressor& compressor, const DepthFillOptions& options,
                 int depth, KvCache& cache, ThreadPool& pool, ForwardWorkspace& ws,
                 std::mt19937_64& rng, DepthFillStats* stats,
                 const std::function<void(int)>& after_chunk) {
  const bool chunked = options.mode == FillMode::kChunked;
  const bool compressing = compressor.enabled() && options.ratio > 0;
  if (chunked && compressing && !compressor.press().query_free) {
    return Status::Error("press " + compressor.press().name +
                         " reads queries, so it cannot compress during chunked prefill");
  }
  DepthFillStats local;
  DepthFillStats& st = stats != nullptr ? *stats : local;
  st = DepthFillStats{};
  cache.Clear();
  cache.SetNextPosition(0);
  if (depth <= 0) return Status::Ok();

  const ModelConfig& c = model.config();
  // Pieces: the chunk in chunked mode; otherwise the prefill micro-batch, or 256 synthetic rows.
  const int piece = std::max(1, chunked                                  ? options.chunk
                                : options.source == FillSource::kPrefill ? options.ubatch
                                                                         : 256);
  SyntheticRows rows(c.kv_width(), rng);
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  MatView<float> logits_view(logits.data(), 1, c.vocab_size);
  std::uniform_int_distribution<int> token(0, c.vocab_size - 1);
  std::vector<Token> tokens;
  const auto note_peak = [&] {
    st.kv_bytes_peak = std::max(st.kv_bytes_peak, cache.BytesInUse());
    st.kv_allocated_peak = std::max(st.kv_allocated_peak, cache.BytesAllocated());
  };
  for (int done = 0; done < depth;) {
    const int n = std::min(piece, depth - done);
    if (options.source == FillSource::kPrefill) {
      tokens.resize(static_cast<size_t>(n));
      for (auto& t : tokens) t = token(rng);
      // A chunk larger than the micro-batch goes through in micro-batches (the workspace is
      // sized by the micro-batch); the compression still waits for the whole chunk.
      const size_t ub = static_cast<size_t>(std::max(1, options.ubatch));
      for (size_t i = 0; i < tokens.size(); i += ub) {
        const auto part =
            std::span<const Token>(tokens).subspan(i, std::min(ub, tokens.size() - i));
        PRIMEKV_RETURN_IF_ERROR(model.Forward(part, cache, {}, logits_view, pool, ws));
      }
    } else {
      PRIMEKV_RETURN_IF_ERROR(rows.Append(cache, n));
    }
    done += n;
    note_peak();
    if (compressing && (chunked || done == depth)) {
      // As RunPipeline's chunked mode: the forward buffers go before the press's scratch.
      if (chunked) ws = ForwardWorkspace{};
      // Chunked: every head over the budget of the tokens so far comes down to it, as
      // RunPipeline's chunked mode does; context: the ratio of the whole depth at once.
      PRIMEKV_RETURN_IF_ERROR(
          chunked ? compressor.CompressTo(cache, KeepCount(done, options.ratio), nullptr, pool)
                  : compressor.Compress(cache, options.ratio, nullptr, pool));
      ++st.compressions;
      note_peak();
    }
    if (after_chunk) after_chunk(done);
  }
  const double filled = static_cast<double>(depth) * c.n_layers * c.n_kv_heads;
  st.kept_fraction = static_cast<double>(cache.TotalEntries()) / filled;
  return Status::Ok();
}

}  // namespace primekv::cli
