// KVzip's scores (ReconstructContext) against a reference written from kvpress's description:
// the context is fed again, in chunks, behind its prompt; an entry's score is the largest softmax
// probability any query of its chunk's pass (any head of the group) gives it, where a query sees
// the first 4 entries, its chunk's entries and the pass's own tokens up to itself. Here every
// probability comes from a double softmax over the whole cache with the other rows masked. (That
// the pipeline runs KVzip only where it compresses once is Kvzip.* in tests/session.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "common/random_models.h"
#include "primekv/attention/attention.h"
#include "primekv/press/compressor.h"

namespace primekv {
namespace {

struct RecordQueries : ForwardTap {
  std::vector<std::vector<float>> q;  // [layer][rows * n_heads * d]
  void OnQueries(int layer, std::span<const int32_t>, MatView<const float> x) override {
    if (std::ssize(q) <= layer) q.resize(layer + 1);
    for (int64_t r = 0; r < x.rows; ++r)
      q[layer].insert(q[layer].end(), x.Row(r), x.Row(r) + x.cols);
  }
};

std::vector<std::vector<float>> KvzipReference(const Model& m, std::span<const Token> ctx,
                                               int chunk, ThreadPool& pool) {
  const ModelConfig& c = m.config();
  const int n = static_cast<int>(ctx.size()), d = c.head_dim;
  const auto first = m.tokenizer().Encode("\n\nRepeat the previous context exactly.\n", false);
  const auto later = m.tokenizer().Encode(
      "\n\nRepeat the part of the previous context exactly, starting with", false);
  std::vector<std::vector<float>> ref(c.n_layers, std::vector<float>(size_t(c.n_kv_heads) * n));
  KvCache cache = m.NewCache();
  ForwardWorkspace ws;
  std::vector<float> logits(c.vocab_size);
  const MatView<float> out(logits.data(), 1, c.vocab_size);
  Check(m.Forward(ctx, cache, {}, out, pool, ws).ok(), "prefill");
  for (int b = 0; b < n; b += chunk) {
    const int e = std::min(n, b + chunk);
    std::vector<Token> t = b == 0 ? first : later;
    if (b > 0) t.insert(t.end(), ctx.begin() + std::max(0, b - 8), ctx.begin() + b);
    t.insert(t.end(), ctx.begin() + b, ctx.begin() + e);
    RecordQueries rec;
    Check(m.Forward(t, cache, {}, out, pool, ws, &rec).ok(), "repeat");
    for (int l = 0; l < c.n_layers; ++l) {
      for (int h = 0; h < c.n_kv_heads; ++h) {
        std::vector<float> keys;
        std::vector<int32_t> pos;
        cache.ReadHead(l, h, &keys, nullptr, &pos);
        const MatView<const float> k(keys.data(), std::ssize(pos), d);
        std::vector<double> p(pos.size());
        for (int g = 0; g < c.group(); ++g) {
          const int qh = h * c.group() + g;
          for (size_t r = 0; r < t.size(); ++r) {
            const float* q = rec.q[l].data() + (r * c.n_heads + qh) * d;
            for (size_t j = 0; j < pos.size(); ++j) {
              const bool seen = pos[j] < std::min(4, b) || (pos[j] >= b && pos[j] < e) ||
                                (pos[j] >= n && pos[j] <= n + static_cast<int>(r));
              p[j] = seen ? DotF64(q, k.Row(j), d) / std::sqrt(double(d))
                          : -std::numeric_limits<double>::infinity();
            }
            MaskedSoftmax(p);
            for (int i = b; i < e; ++i) {
              float& s = ref[l][size_t(h) * n + i];
              s = std::max(s, static_cast<float>(p[i]));
            }
          }
        }
      }
    }
    cache.TruncateFrom(n);
  }
  for (auto& layer : ref)
    for (int h = 0; h < c.n_kv_heads; ++h) std::fill_n(layer.begin() + h * n, 4, 1.0f);
  return ref;
}

TEST(Kvzip, ScoresMatchTheReconstructionReference) {
  // Two layers, GQA 2:1: each KV head's score is the largest over its group's queries.
  const Model m = WriteLoadAndRemove(SmallLlamaSpec(/*seed=*/11), "primekv_kvzip_test.gguf");
  ThreadPool pool(2);
  const auto ctx = RandomTokenIds(150, 31, 3, 500);
  const int prompt = static_cast<int>(
      m.tokenizer()
          .Encode("\n\nRepeat the part of the previous context exactly, starting with", false)
          .size() +
      8);
  // One pass over the whole context, then a window that leaves room for chunks of 64 only.
  for (const auto& [window, chunk] : {std::pair{0, 150}, std::pair{150 + prompt + 64, 64}}) {
    SCOPED_TRACE(::testing::Message() << "chunk " << chunk);
    const auto ref = KvzipReference(m, ctx, chunk, pool);
    KvCache cache = m.NewCache();
    PressCapture capture(m, {.reconstruction = true});
    ForwardWorkspace ws;
    std::vector<float> logits(m.config().vocab_size);
    ASSERT_TRUE(
        m.Forward(ctx, cache, {}, {logits.data(), 1, m.config().vocab_size}, pool, ws).ok());
    ASSERT_TRUE(ReconstructContext(m, cache, ctx, window, pool, capture).ok());
    EXPECT_EQ(cache.NextPosition(), 150);  // the pass leaves the cache as it found it
    EXPECT_EQ(cache.Length(0, 0), 150);
    for (int l = 0; l < m.config().n_layers; ++l) {
      const auto got = capture.Reconstruction(l);
      ASSERT_EQ(got.size(), ref[l].size());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i)
        worst = std::max(worst, double(std::abs(got[i] - ref[l][i])));
      EXPECT_LT(worst, 1e-5) << "layer " << l;
    }
  }
}

}  // namespace
}  // namespace primekv
