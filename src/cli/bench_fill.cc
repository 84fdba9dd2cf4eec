#include "cli/bench_fill.h"

#include <algorithm>
#include <span>
#include <vector>

#include "primekv/press/press.h"
#include "primekv/session/conversation.h"

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

namespace {

// Hands the cache back to the caller however the fill ends.
struct CacheLoan {
  KvCache& home;
  Conversation& conv;
  ~CacheLoan() { home = conv.TakeCache(); }
};

}  // namespace

Status FillDepth(const Model& model, const Compressor& compressor, const DepthFillOptions& options,
                 int depth, KvCache& cache, ThreadPool& pool, ForwardWorkspace& ws,
                 std::mt19937_64& rng, DepthFillStats* stats,
                 const std::function<void(int, const KvCache&)>& after_chunk) {
  const Schedule& schedule = options.schedule;
  const bool chunked = schedule.mode == ScheduleMode::kChunked;
  cache.Clear();
  Conversation conv(model, compressor, pool, {.schedule = schedule, .cache = std::move(cache)}, {},
                    {.workspace = &ws});
  const CacheLoan loan{cache, conv};
  // Synthetic rows bring no queries, so the press must be one the schedule runs without them.
  if (conv.Compressing()) PRIMEKV_RETURN_IF_ERROR(CheckSchedule(compressor.press(), schedule));
  DepthFillStats local;
  DepthFillStats& st = stats != nullptr ? *stats : local;
  st = DepthFillStats{};
  if (depth <= 0) return Status::Ok();
  KvCache& filled = conv.cache();

  const ModelConfig& c = model.config();
  // Pieces: the chunk in chunked mode; otherwise the prefill micro-batch, or 256 synthetic rows.
  const int piece = std::max(1, chunked                                  ? schedule.chunk
                                : options.source == FillSource::kPrefill ? schedule.ubatch
                                                                         : 256);
  SyntheticRows rows(c.kv_width(), rng);
  std::uniform_int_distribution<int> token(0, c.vocab_size - 1);
  std::vector<Token> tokens;
  const auto note_peak = [&] {
    st.kv_bytes_peak = std::max(st.kv_bytes_peak, filled.BytesInUse());
    st.kv_allocated_peak = std::max(st.kv_allocated_peak, filled.BytesAllocated());
  };
  for (int done = 0; done < depth;) {
    const int n = std::min(piece, depth - done);
    if (options.source == FillSource::kPrefill) {
      tokens.resize(static_cast<size_t>(n));
      for (auto& t : tokens) t = token(rng);
      // The conversation runs a chunk larger than the micro-batch in micro-batches (the workspace
      // is sized by the micro-batch); the compression still waits for the whole chunk.
      PRIMEKV_RETURN_IF_ERROR(conv.Prefill(tokens));
      st.workspace_peak = std::max(st.workspace_peak, ws.Bytes());
    } else {
      PRIMEKV_RETURN_IF_ERROR(rows.Append(filled, n));
    }
    done += n;
    note_peak();
    // Chunked: the schedule's chunk rule; context: the ratio of the whole depth at once.
    PRIMEKV_RETURN_IF_ERROR(chunked         ? conv.AfterChunk()
                            : done == depth ? conv.CompressContext(depth)
                                            : Status::Ok());
    note_peak();
    if (after_chunk) after_chunk(done, filled);
  }
  st.compressions = conv.stats().compressions;
  st.score_ms = conv.stats().score_ms;
  const double entries = static_cast<double>(depth) * c.n_layers * c.n_kv_heads;
  st.kept_fraction = static_cast<double>(filled.TotalEntries()) / entries;
  return Status::Ok();
}

}  // namespace primekv::cli
