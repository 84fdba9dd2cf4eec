// `primekv bench --mode chunked`: filling a cache chunk by chunk and compressing after each
// keeps the KV memory at the final budget plus one chunk, never the full depth (issue 13's
// peak-RSS line); context mode, which compresses once at the end, holds the full depth.
#include "cli/bench_fill.h"

#include <gtest/gtest.h>

#include <string>

#include "common/random_models.h"
#include "primekv/press/press.h"

namespace primekv::cli {
namespace {

constexpr int kDepth = 4096;
constexpr int kChunk = 128;
constexpr double kRatio = 0.75;

class BenchFill : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RandomModelSpec spec = SmallGqaSpec(7);
    spec.max_context = 2 * kDepth;
    model_ = new Model(WriteLoadAndRemove(spec, "primekv_bench_fill.gguf"));
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  static Compressor MakeCompressor(const std::string& name) {
    auto spec = ParsePressSpec(name);
    Check(spec.ok(), "press spec");
    auto press = MakePress(*spec);
    Check(press.ok(), "press");
    return Compressor(*model_, std::move(press).value());
  }

  static size_t Heads(const KvCache& c) {
    return static_cast<size_t>(c.n_layers()) * c.n_kv_heads();
  }

  static Model* model_;
  ThreadPool pool_{2};
  ForwardWorkspace ws_;
  std::mt19937_64 rng_{99};
};

Model* BenchFill::model_ = nullptr;

TEST_F(BenchFill, ChunkedKeepsKvWithinBudgetPlusOneChunk) {
  const Compressor compressor = MakeCompressor("primekv");
  const int budget = KeepCount(kDepth, kRatio);  // entries per head at the end
  for (FillSource source : {FillSource::kSynthetic, FillSource::kPrefill}) {
    SCOPED_TRACE(source == FillSource::kPrefill ? "prefill" : "synthetic");
    KvCache cache = model_->NewCache();
    // What the pool costs when every head holds the budget plus one chunk.
    const size_t allocated_bound = model_->NewCache().BytesAllocatedAfterReserve(budget + kChunk);
    const size_t in_use_bound = Heads(cache) * (budget + kChunk) * cache.BytesPerEntry();
    DepthFillOptions o;
    o.source = source;
    o.schedule.mode = ScheduleMode::kChunked;
    o.schedule.chunk = kChunk;
    o.schedule.ratio = kRatio;
    int calls = 0;
    const auto after_chunk = [&](int tokens, const KvCache& cache) {
      ++calls;
      EXPECT_EQ(tokens, calls * kChunk);
      const int keep = KeepCount(tokens, kRatio);
      for (int l = 0; l < cache.n_layers(); ++l)
        for (int h = 0; h < cache.n_kv_heads(); ++h) EXPECT_EQ(cache.Length(l, h), keep);
      EXPECT_EQ(cache.BytesInUse(), Heads(cache) * keep * cache.BytesPerEntry());
      EXPECT_LE(cache.BytesAllocated(), allocated_bound) << "after " << tokens << " tokens";
    };
    DepthFillStats st;
    const Status s =
        FillDepth(*model_, compressor, o, kDepth, cache, pool_, ws_, rng_, &st, after_chunk);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(calls, kDepth / kChunk);
    EXPECT_EQ(st.compressions, kDepth / kChunk);
    EXPECT_EQ(cache.NextPosition(), kDepth);
    EXPECT_DOUBLE_EQ(st.kept_fraction, static_cast<double>(budget) / kDepth);
    EXPECT_LE(st.kv_bytes_peak, in_use_bound);
    EXPECT_LE(st.kv_allocated_peak, allocated_bound);
    // The peak is a full chunk above the budget (the last chunk before its compression).
    EXPECT_EQ(st.kv_bytes_peak,
              Heads(cache) * (KeepCount(kDepth - kChunk, kRatio) + kChunk) * cache.BytesPerEntry());
  }
}

// The bound above bites: compressing once at the end holds the whole depth first.
TEST_F(BenchFill, ContextModeHoldsTheFullDepthBeforeCompressing) {
  const Compressor compressor = MakeCompressor("primekv");
  const int budget = KeepCount(kDepth, kRatio);
  KvCache cache = model_->NewCache();
  const size_t allocated_bound = model_->NewCache().BytesAllocatedAfterReserve(budget + kChunk);
  DepthFillOptions o;
  o.source = FillSource::kSynthetic;
  o.schedule.mode = ScheduleMode::kContext;
  o.schedule.ratio = kRatio;
  DepthFillStats st;
  const Status s = FillDepth(*model_, compressor, o, kDepth, cache, pool_, ws_, rng_, &st);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(st.compressions, 1);
  EXPECT_EQ(st.kv_bytes_peak, Heads(cache) * kDepth * cache.BytesPerEntry());
  EXPECT_GT(st.kv_allocated_peak, 2 * allocated_bound);
  EXPECT_EQ(cache.MaxLength(), budget);
}

TEST_F(BenchFill, WithoutAPressTheDepthIsFilledWhole) {
  const Compressor compressor = MakeCompressor("none");
  KvCache cache = model_->NewCache();
  DepthFillOptions o;
  o.schedule.mode = ScheduleMode::kChunked;
  o.schedule.chunk = 1000;  // not a divisor of the depth: the last chunk is short
  o.schedule.ratio = kRatio;
  DepthFillStats st;
  const Status s = FillDepth(*model_, compressor, o, kDepth, cache, pool_, ws_, rng_, &st);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(st.compressions, 0);
  EXPECT_EQ(cache.MaxLength(), kDepth);
  EXPECT_EQ(cache.PositionAt(0, 0, kDepth - 1), kDepth - 1);
  EXPECT_DOUBLE_EQ(st.kept_fraction, 1.0);
}

TEST_F(BenchFill, ChunkedRefusesAPressThatReadsQueries) {
  const Compressor compressor = MakeCompressor("snapkv");
  KvCache cache = model_->NewCache();
  DepthFillOptions o;
  o.schedule.mode = ScheduleMode::kChunked;
  o.schedule.ratio = kRatio;
  const Status s = FillDepth(*model_, compressor, o, kDepth, cache, pool_, ws_, rng_);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("snapkv"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace primekv::cli
