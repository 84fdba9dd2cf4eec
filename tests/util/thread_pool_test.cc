#include "primekv/util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
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

}  // namespace
}  // namespace primekv
