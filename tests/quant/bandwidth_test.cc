// The bandwidth probe of `primekv bench` (primekv/quant/bandwidth.h): the dispatched word sum
// agrees with its scalar twin, and a measurement gives a positive rate.
#include "primekv/quant/bandwidth.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace primekv::quant {
namespace {

TEST(Bandwidth, SumWordsMatchesScalarTwin) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> words(4096 + 16);
  for (auto& w : words) w = rng();
  // Whole blocks of 16 words: the SIMD loop and the scalar twin give the same value.
  for (size_t n : {size_t{0}, size_t{16}, size_t{160}, size_t{4096}}) {
    EXPECT_EQ(SumWords(words.data(), n), SumWordsScalar(words.data(), n)) << n;
  }
  // A length under one group of four is the tail alone: a plain sum.
  EXPECT_EQ(SumWordsScalar(words.data(), 3), words[0] + words[1] + words[2]);
}

TEST(Bandwidth, MeasuresAPositiveRate) {
  ThreadPool pool(2);
  EXPECT_GT(MeasureHeapBandwidth(8, pool), 0.0);
  std::vector<uint8_t> region(1 << 20, 1);
  EXPECT_GT(MeasureBandwidth(region, pool, 2), 0.0);
}

}  // namespace
}  // namespace primekv::quant
