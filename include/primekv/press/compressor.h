// Runs a press on a model's KV cache: gathers what the scorer needs (window queries, query
// statistics, W_O and its Gram matrices, future queries), scores each layer, selects, and
// compacts. Nothing here knows a press by name: each asks through PressNeeds.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/press/press.h"

namespace primekv {

// A ForwardTap that keeps what presses read from the forward pass: the last `window` query
// rows per layer, running statistics of pre-RoPE queries, and (when recording) future queries.
class PressCapture : public ForwardTap {
 public:
  // Query statistics leave out the first positions (ExpectedAttention's n_sink: attention sinks).
  static constexpr int kStatsSinks = 4;
  PressCapture(const Model& model, const PressNeeds& needs);
  void OnQueries(int layer, std::span<const int32_t> pos, MatView<const float> q) override;

  // Future-query recording for the oracle: while on, queries go to the future buffer instead.
  void RecordFuture(bool on) { recording_future_ = on; }
  void ClearFuture();
  void Clear();  // drop everything (a new context)

  int window() const { return needs_.window_queries; }
  MatView<const float> Window(int layer) const;
  std::span<const int32_t> WindowPositions(int layer) const;
  const QueryStats* Stats(int layer) const;
  MatView<const float> Future(int layer) const;
  // KVzip's scores of a layer, [n_kv_heads, n] (empty until ReconstructContext ran).
  std::span<const float> Reconstruction(int layer) const { return layers_[layer].reconstruction; }
  void SetReconstruction(int layer, std::vector<float> scores) {
    layers_[layer].reconstruction = std::move(scores);
  }

 private:
  struct Layer;
  void KeepWindow(Layer& L, std::span<const int32_t> pos, MatView<const float> q);
  void AddQueryStats(QueryStats& st, std::span<const int32_t> pos, MatView<const float> q);

  const Model& model_;
  PressNeeds needs_;
  bool recording_future_ = false;
  struct Layer {
    std::vector<float> window;  // ring of the last rows, [<= w, n_heads * d], oldest first
    std::vector<int32_t> window_pos;
    QueryStats stats;
    std::vector<float> future;          // [t, n_heads * d]
    std::vector<float> reconstruction;  // [n_kv_heads, n]
  };
  std::vector<Layer> layers_;
  std::vector<float> scratch_;
};

struct CompressStats {
  size_t bytes_before = 0;
  size_t bytes_after = 0;
  std::vector<int64_t> kept_per_layer;  // entries kept, summed over KV heads
  double score_ms = 0;                  // scoring + selection time
};

class Compressor {
 public:
  Compressor(const Model& model, Press press);
  const Press& press() const { return press_; }
  PressNeeds Needs() const;
  bool enabled() const { return press_.scorer != nullptr; }
  // Whether the press applies to the model (a budget profile's shape and model identity). Every
  // compression returns this error too; callers check it first so that a mismatch is refused
  // before the prefill rather than after it.
  const Status& CheckModel() const { return fits_; }

  // Removes the fraction `ratio` of each head's entries (KVPress semantics).
  Status Compress(KvCache& cache, double ratio, const PressCapture* capture, ThreadPool& pool,
                  CompressStats* stats = nullptr) const;
  // Compresses every head longer than `target` entries down to `target` (multi-turn, chunked
  // and decode-time budgets). Heads at or under the target are untouched.
  Status CompressTo(KvCache& cache, int target, const PressCapture* capture, ThreadPool& pool,
                    CompressStats* stats = nullptr) const;

 private:
  // Per-thread buffers of one layer's scoring.
  struct LayerScratch {
    std::vector<HeadEntries> heads;  // [n_kv_heads]; only one filled at a time per-head
    std::vector<float> wo;
    HeadEntries one;  // the buffer of per-head scoring
  };
  Status Run(KvCache& cache, double ratio, int target, const PressCapture* capture,
             ThreadPool& pool, CompressStats* stats) const;
  // One layer's scores per head and the ratio its budget uses (no heads when the layer is
  // left alone).
  struct ScoredLayer {
    HeadScores scores;
    double ratio = 0;
    std::vector<int> keep;  // per head, when a budget profile sets the counts
  };
  Result<ScoredLayer> ScoreLayer(const KvCache& cache, int layer, double ratio, int target,
                                 const PressCapture* capture, LayerScratch& scratch) const;
  Status CheckSamePositions(const KvCache& cache) const;
  std::vector<int> ProfileKeeps(const KvCache& cache, int layer, double ratio, int target) const;
  // What the scorer asked for besides the heads' entries.
  void FillInput(LayerInput& in, const KvCache& cache, const PressCapture* capture,
                 std::vector<float>& wo) const;
  std::span<const float> Gram(int layer) const;  // [n_kv_heads, d, d], computed once
  std::span<const MeanQueryMap> MeanQueryMaps(int layer) const;  // [n_kv_heads], computed once

  const Model& model_;
  Press press_;
  Status fits_;
  std::vector<float> rope_inv_freq_;
  mutable std::vector<std::vector<float>> grams_;
  mutable std::vector<std::once_flag> gram_once_;
  mutable std::vector<std::vector<MeanQueryMap>> mean_query_;
  mutable std::vector<std::once_flag> mean_query_once_;
};

// KVzip's pass (src/press/kvzip.cc): `cache` holds exactly `context`, prefilled; the context is
// fed again after a "repeat the previous context" prompt, in chunks whose positions stay below
// `window` (0 = the model's trained context), and each entry's largest attention from those queries
// (over a query head's group and the chunk's queries) goes to `capture`. The cache is left as it
// was found.
Status ReconstructContext(const Model& model, KvCache& cache, std::span<const Token> context,
                          int window, ThreadPool& pool, PressCapture& capture);

// Compressors for a list of --press values, and (when `needs` is given) the union of what they
// read, so one prefill's capture serves them all.
Result<std::vector<Compressor>> MakeCompressors(const Model& model,
                                                std::span<const std::string> presses,
                                                PressNeeds* needs = nullptr);

}  // namespace primekv
