// KVzip (Kim et al., arXiv 2505.23416; kvpress presses/kvzip_press.py): after the prefill the
// model reads the context a second time, behind a "repeat the previous context" prompt, and an
// entry's score is the largest attention it receives from that pass (over the queries and the
// query heads of its KV head's group). The entries the model must look at to reproduce the
// context are the ones any later question may need, so the method is query-agnostic; it costs a
// second prefill. Scores are attention probabilities, comparable across heads and layers, so one
// threshold spends the budget over all layers (kvpress's default, layerwise=False). The first 4
// positions score 1 and are kept.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "press/scorer_util.h"
#include "press/scorers.h"
#include "primekv/attention/softmax_kernels.h"
#include "primekv/press/compressor.h"
#include "primekv/quant/dense.h"
#include "primekv/tokenizer/tokenizer.h"

namespace primekv {
namespace {

constexpr int kSinks = 4;
constexpr int kChunk = 2048;     // context tokens repeated per pass
constexpr int kCarry = 8;        // later chunks start from the previous chunk's last tokens
constexpr int kMinChunk = 64;    // below this the window has no useful room for the pass
constexpr int kQueryBlock = 64;  // query rows per logits tile
// kvpress's prompts; with no chat template its question suffix is a newline.
constexpr std::string_view kFirstPrompt = "\n\nRepeat the previous context exactly.\n";
constexpr std::string_view kNextPrompt =
    "\n\nRepeat the part of the previous context exactly, starting with";

// Scores the current chunk's entries from the queries of the pass that repeats it. The cache
// then holds the context (rows = positions 0..n_ctx-1) and this pass's rows after it.
class ReconstructionTap : public ForwardTap {
 public:
  ReconstructionTap(const ModelConfig& c, const KvCache& cache, int n_ctx, ThreadPool& pool)
      : c_(c), cache_(cache), n_ctx_(n_ctx), pool_(pool), scores_(c.n_layers) {
    for (auto& s : scores_) s.assign(static_cast<size_t>(c.n_kv_heads) * n_ctx, 0.0f);
  }

  void SetChunk(int begin, int end) {
    begin_ = begin;
    end_ = end;
  }
  std::vector<float>& Scores(int layer) { return scores_[static_cast<size_t>(layer)]; }

  void OnQueries(int layer, std::span<const int32_t> /*pos*/, MatView<const float> q) override {
    const int d = c_.head_dim, group = c_.group(), n_q = static_cast<int>(q.rows);
    const int sinks = std::min(kSinks, begin_), span = end_ - begin_;
    const int m = sinks + span + n_q;  // columns: sinks, the chunk, the repeat (causal)
    // K^T per KV head over those columns.
    std::vector<std::vector<float>> kt(static_cast<size_t>(c_.n_kv_heads));
    std::vector<float> keys;
    std::vector<int32_t> positions;
    for (int h = 0; h < c_.n_kv_heads; ++h) {
      cache_.ReadHead(layer, h, &keys, nullptr, &positions);
      Check(std::ssize(positions) == int64_t{n_ctx_} + n_q, "kvzip: unexpected cache rows");
      std::vector<float> rows(static_cast<size_t>(m) * d);
      auto copy = [&](int from, int count, int to) {
        std::copy_n(keys.data() + static_cast<int64_t>(from) * d, static_cast<int64_t>(count) * d,
                    rows.data() + static_cast<int64_t>(to) * d);
      };
      copy(0, sinks, 0);
      copy(begin_, span, sinks);
      copy(n_ctx_, n_q, sinks + span);
      kt[static_cast<size_t>(h)].resize(rows.size());
      dense::Transpose(rows.data(), m, d, d, kt[static_cast<size_t>(h)].data(), m);
    }
    // Each query head's largest probability per chunk entry, then the max over the group.
    std::vector<float> best(static_cast<size_t>(c_.n_heads) * span, 0.0f);
    const auto scale = static_cast<float>(c_.QkScale());
    // The attention kernels' exponential: the pass's probabilities as the forward computes them.
    const attention_internal::SoftmaxKernels& softmax = attention_internal::BestSoftmax();
    pool_.ParallelFor(c_.n_heads, [&](int64_t b, int64_t e, int) {
      std::vector<float> logits(static_cast<size_t>(kQueryBlock) * m);
      for (int64_t qh = b; qh < e; ++qh) {
        const float* k = kt[static_cast<size_t>(qh / group)].data();
        float* out = best.data() + qh * span;
        for (int t0 = 0; t0 < n_q; t0 += kQueryBlock) {
          const int rows = std::min(kQueryBlock, n_q - t0);
          dense::GemmNN(rows, m, d, scale, q.Row(t0) + qh * d, static_cast<int>(q.stride), k, m,
                        0.0f, logits.data(), m);
          for (int r = 0; r < rows; ++r) {
            float* x = logits.data() + static_cast<int64_t>(r) * m;
            const int visible = sinks + span + t0 + r + 1;  // repeat rows up to its own
            if (c_.attn_softcap > 0) {
              for (int i = 0; i < visible; ++i) x[i] = static_cast<float>(c_.SoftCap(x[i]));
            }
            const float mx = softmax.row_max(x, visible, -std::numeric_limits<float>::infinity());
            const float inv = 1.0f / softmax.exp_sum(x, visible, mx);
            for (int i = 0; i < span; ++i) out[i] = std::max(out[i], x[sinks + i] * inv);
          }
        }
      }
    });
    std::vector<float>& s = Scores(layer);
    for (int h = 0; h < c_.n_kv_heads; ++h) {
      float* dst = s.data() + static_cast<int64_t>(h) * n_ctx_ + begin_;
      for (int g = 0; g < group; ++g) {
        const float* src = best.data() + static_cast<int64_t>(h * group + g) * span;
        for (int i = 0; i < span; ++i) dst[i] = std::max(dst[i], src[i]);
      }
    }
  }

 private:
  const ModelConfig& c_;
  const KvCache& cache_;
  const int n_ctx_;
  ThreadPool& pool_;
  int begin_ = 0, end_ = 0;
  std::vector<std::vector<float>> scores_;  // [layer][n_kv_heads * n_ctx]
};

}  // namespace

Status ReconstructContext(const Model& model, KvCache& cache, std::span<const Token> context,
                          int window, ThreadPool& pool, PressCapture& capture) {
  const ModelConfig& c = model.config();
  const int n_ctx = static_cast<int>(context.size());
  if (n_ctx == 0) return Status::Error("kvzip: empty context");
  // Every head holds n_ctx rows: none longer, and none shorter.
  if (cache.NextPosition() != n_ctx || cache.MaxLength() != n_ctx ||
      cache.TotalEntries() != int64_t{n_ctx} * c.n_layers * c.n_kv_heads)
    return Status::Error("kvzip: the cache must hold exactly the prefilled context");
  const std::vector<Token> first = model.tokenizer().Encode(kFirstPrompt, false);
  const std::vector<Token> next = model.tokenizer().Encode(kNextPrompt, false);
  // The pass runs at positions after the context: they stay inside the run's window (past the
  // trained context only when the run was allowed there, --ctx-size with --allow-ctx-overflow).
  const int64_t prompt = static_cast<int64_t>(std::max(first.size(), next.size() + kCarry));
  int64_t chunk = kChunk;
  if (window <= 0) window = c.max_context;
  if (window > 0) {
    const int64_t room = int64_t{window} - n_ctx - prompt;
    if (room < std::min<int64_t>(n_ctx, kMinChunk)) {
      return Status::Error("kvzip: a context of " + std::to_string(n_ctx) +
                           " tokens leaves no room in a context size of " + std::to_string(window) +
                           " tokens for the pass that repeats it (it needs " +
                           std::to_string(prompt + std::min<int64_t>(n_ctx, kMinChunk)) +
                           " more; --ctx-size with --allow-ctx-overflow runs it past the trained "
                           "context)");
    }
    chunk = std::min(chunk, room);
  }
  ReconstructionTap tap(c, cache, n_ctx, pool);
  ForwardWorkspace ws;
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  for (int b = 0; b < n_ctx; b += static_cast<int>(chunk)) {
    const int e = static_cast<int>(std::min<int64_t>(n_ctx, b + chunk));
    std::vector<Token> tokens = b == 0 ? first : next;
    if (b > 0)
      tokens.insert(tokens.end(), context.begin() + std::max(0, b - kCarry), context.begin() + b);
    tokens.insert(tokens.end(), context.begin() + b, context.begin() + e);
    tap.SetChunk(b, e);
    const Status s = model.Forward(tokens, cache, {},
                                   MatView<float>(logits.data(), 1, c.vocab_size), pool, ws, &tap);
    cache.TruncateFrom(n_ctx);
    PRIMEKV_RETURN_IF_ERROR(s);
  }
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<float>& s = tap.Scores(l);
    for (int h = 0; h < c.n_kv_heads; ++h)
      std::fill_n(s.begin() + static_cast<int64_t>(h) * n_ctx, std::min(kSinks, n_ctx), 1.0f);
    capture.SetReconstruction(l, std::move(s));
  }
  return Status::Ok();
}

namespace press_internal {
namespace {

class KvzipScorer : public HeadScorer {
 public:
  PressNeeds Needs() const override { return {.reconstruction = true}; }
  bool ComparableAcrossHeads() const override { return true; }
  bool ComparableAcrossLayers() const override { return true; }

  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    const size_t n = s.size();
    std::copy_n(in.reconstruction.begin() + static_cast<int64_t>(h) * static_cast<int64_t>(n), n,
                s.begin());
  }
};

}  // namespace

ScorerResult MakeKvzipScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<KvzipScorer>(p, press);
}

}  // namespace press_internal
}  // namespace primekv
