#include "primekv/util/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

namespace primekv {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.ParallelFor(n, [&](int64_t b, int64_t e, int t) {
        EXPECT_GE(t, 0);
        EXPECT_LT(t, threads);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, ReusableManyTimes) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 200; ++rep) {
    pool.ParallelFor(64, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
  }
  EXPECT_EQ(sum.load(), 200 * (63 * 64 / 2));
}

// Chunks shrink as the range is used up: each claim takes 1/(2 * threads) of what is left, never
// less than min_chunk, so whichever thread claims them the sequence of chunks is the same.
TEST(ThreadPool, GuidedChunksShrinkToTheMinimum) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    constexpr int64_t kN = 1000, kMin = 10;
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> chunks;
    pool.ParallelFor(
        kN,
        [&](int64_t b, int64_t e, int) {
          std::lock_guard<std::mutex> lock(mu);
          chunks.emplace_back(b, e);
        },
        kMin);
    std::sort(chunks.begin(), chunks.end());
    int64_t begin = 0;
    for (const auto& [b, e] : chunks) {
      ASSERT_EQ(b, begin);
      EXPECT_EQ(e - b, std::min(kN - b, std::max(kMin, (kN - b) / (2 * threads)))) << "at " << b;
      begin = e;
    }
    EXPECT_EQ(begin, kN);
    EXPECT_EQ(chunks.front().second, kN / (2 * threads));
    EXPECT_LE(chunks.back().second - chunks.back().first, kMin);
    EXPECT_EQ(chunks[chunks.size() - 2].second - chunks[chunks.size() - 2].first, kMin);
  }
}

}  // namespace
}  // namespace primekv
