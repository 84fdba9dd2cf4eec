#include "primekv/kv/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

namespace primekv {
namespace {

// Fills [n, heads*d] rows whose values encode (position, head, column) so moves are checkable.
std::vector<float> Rows(int n, int heads, int d, int32_t first_pos, float salt) {
  std::vector<float> v(static_cast<size_t>(n) * heads * d);
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < heads; ++h)
      for (int c = 0; c < d; ++c)
        v[(static_cast<size_t>(i) * heads + h) * d + c] =
            salt + (first_pos + i) + 0.001f * h + 1e-5f * c;
  return v;
}

TEST(KvCache, AppendRetainKeepsRowsAndPositions) {
  for (KvDType dt : {KvDType::kF32, KvDType::kF16}) {
    const int heads = 2, d = 8, n = 100;
    KvCache cache(1, heads, d, {dt, 16, 0});
    auto k = Rows(n, heads, d, 0, 0.0f), v = Rows(n, heads, d, 0, 0.5f);
    std::vector<int32_t> pos(n);
    std::iota(pos.begin(), pos.end(), 0);
    ASSERT_TRUE(cache.Append(0, {k.data(), n, heads * d}, {v.data(), n, heads * d}, pos).ok());
    EXPECT_EQ(cache.Length(0, 0), n);
    EXPECT_EQ(cache.NextPosition(), n);
    EXPECT_EQ(cache.BytesInUse(), static_cast<size_t>(n) * heads * cache.BytesPerEntry());
    // Head 0 keeps the even rows, head 1 the multiples of 7.
    std::vector<int32_t> even, seven;
    for (int i = 0; i < n; ++i) {
      if (i % 2 == 0) even.push_back(i);
      if (i % 7 == 0) seven.push_back(i);
    }
    const size_t reserved_before = cache.BytesReserved();
    cache.Retain(0, 0, even);
    cache.Retain(0, 1, seven);
    EXPECT_LT(cache.BytesReserved(), reserved_before);
    EXPECT_EQ(cache.Length(0, 0), 50);
    EXPECT_EQ(cache.Length(0, 1), 15);
    EXPECT_EQ(cache.NextPosition(), n) << "compression must not move the next position";
    std::vector<float> keys, values;
    std::vector<int32_t> p;
    cache.ReadHead(0, 1, &keys, &values, &p);
    for (int r = 0; r < 15; ++r) {
      EXPECT_EQ(p[r], 7 * r);
      EXPECT_NEAR(keys[static_cast<size_t>(r) * d], 7 * r + 0.001f, 0.05f);
      EXPECT_NEAR(values[static_cast<size_t>(r) * d + 3], 7 * r + 0.5f + 0.001f + 3e-5f, 0.05f);
    }
    // Appending after compression continues from the original length.
    auto k2 = Rows(3, heads, d, n, 0.0f);
    std::vector<int32_t> pos2{n, n + 1, n + 2};
    ASSERT_TRUE(cache.Append(0, {k2.data(), 3, heads * d}, {k2.data(), 3, heads * d}, pos2).ok());
    EXPECT_EQ(cache.Length(0, 1), 18);
    EXPECT_EQ(cache.PositionAt(0, 1, 17), n + 2);
    EXPECT_EQ(cache.NextPosition(), n + 3);
  }
}

// q8_0 rows are ggml's Q8_0 blocks: each value within half a step (block max / 127 / 2, the
// scale itself rounded to fp16) of what was written, in 34 bytes per 32 values.
TEST(KvCache, Q8_0RowsAreWithinHalfAStepOfTheirBlock) {
  const int heads = 2, d = 64, n = 70;
  KvCache cache(1, heads, d, {KvDType::kQ8_0, 32, 0});
  EXPECT_EQ(cache.BytesPerEntry(), 2u * 2 * 34 + sizeof(int32_t));
  EXPECT_EQ(KvRowBytes(KvDType::kF16, d), 128u);
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::vector<float> k(static_cast<size_t>(n) * heads * d), v(k.size());
  for (auto& x : k) x = g(rng);
  for (auto& x : v) x = g(rng);
  k[5] = 40.0f;  // one outlier: its block's step is large, the other blocks' are not
  std::vector<int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  ASSERT_TRUE(cache.Append(0, {k.data(), n, heads * d}, {v.data(), n, heads * d}, pos).ok());
  for (int h = 0; h < heads; ++h) {
    std::vector<float> keys, values;
    cache.ReadHead(0, h, &keys, &values, nullptr);
    for (const auto& [got, src] : {std::pair{&keys, &k}, std::pair{&values, &v}}) {
      for (int i = 0; i < n; ++i) {
        for (int b = 0; b < d; b += 32) {
          const float* x = src->data() + (static_cast<size_t>(i) * heads + h) * d + b;
          float amax = 0;
          for (int c = 0; c < 32; ++c) amax = std::max(amax, std::abs(x[c]));
          const float step = amax / 127.0f;
          for (int c = 0; c < 32; ++c) {
            ASSERT_NEAR((*got)[static_cast<size_t>(i) * d + b + c], x[c],
                        0.5f * step * 1.002f + 1e-6f)
                << "head " << h << " row " << i << " column " << b + c;
          }
        }
      }
    }
  }
  // A head dimension the blocks do not divide is refused with a message, before any cache.
  const Status s = CheckKvDType(KvDType::kQ8_0, 8);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("multiple of 32"), std::string::npos) << s.message();
  EXPECT_TRUE(CheckKvDType(KvDType::kF16, 8).ok());
  EXPECT_STREQ(KvDTypeName(KvDType::kQ8_0), "q8_0");
}

TEST(KvCache, RejectsNonIncreasingPositionsAndOverflow) {
  KvCache cache(1, 1, 4, {KvDType::kF32, 4, 5});
  std::vector<float> r(4 * 6, 1.0f);
  std::vector<int32_t> p{0, 1, 2};
  ASSERT_TRUE(cache.Append(0, {r.data(), 3, 4}, {r.data(), 3, 4}, p).ok());
  std::vector<int32_t> back{2};
  EXPECT_FALSE(cache.Append(0, {r.data(), 1, 4}, {r.data(), 1, 4}, back).ok());
  std::vector<int32_t> three{3, 4, 5};
  Status s = cache.Append(0, {r.data(), 3, 4}, {r.data(), 3, 4}, three);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("KV cache full"), std::string::npos);
}

// Rows as stored (session files): another cache of the same type takes them bit for bit, across
// page boundaries; a stored f16 value or q8_0 scale that is Inf or NaN is refused.
TEST(KvCache, StoredRowsRoundTripAndNonFiniteOnesAreRefused) {
  for (KvDType t : {KvDType::kF32, KvDType::kF16, KvDType::kQ8_0}) {
    SCOPED_TRACE(KvDTypeName(t));
    KvCache a(1, 2, 32, {t, 4, 0}), b(1, 2, 32, {t, 4, 0});
    const auto rows = Rows(11, 2, 32, 0, 0.25f);
    std::vector<int32_t> pos(11);
    std::iota(pos.begin(), pos.end(), 0);
    ASSERT_TRUE(a.Append(0, {rows.data(), 11, 64}, {rows.data(), 11, 64}, pos).ok());
    std::vector<uint8_t> k, v, k2, v2;
    std::vector<int32_t> p, p2;
    a.ReadHeadRaw(0, 1, &k, &v, &p);
    ASSERT_EQ(k.size(), 11 * KvRowBytes(t, 32));
    ASSERT_TRUE(b.AppendHeadRaw(0, 1, k, v, p).ok());
    b.ReadHeadRaw(0, 1, &k2, &v2, &p2);
    EXPECT_EQ(k, k2);
    EXPECT_EQ(v, v2);
    EXPECT_EQ(p, p2);
    EXPECT_EQ(b.Length(0, 0), 0);
    // The last row's first stored value (f32, f16) or block scale (q8_0) made NaN.
    const size_t last = 10 * KvRowBytes(t, 32);
    if (t == KvDType::kF32) {
      const float nan = std::nanf("");
      std::memcpy(&v[last], &nan, 4);
    } else {
      v[last] = 0x00;
      v[last + 1] = 0x7E;  // f16 NaN
    }
    KvCache c(1, 2, 32, {t, 4, 0});
    const Status bad = c.AppendHeadRaw(0, 1, k, v, p);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.message().find("Inf or NaN"), std::string::npos) << bad.message();
    EXPECT_FALSE(c.AppendHeadRaw(0, 1, std::span(k).first(k.size() - 1), v, p).ok());
  }
}

TEST(KvCache, FreedPagesAreReused) {
  KvCache cache(1, 2, 4, {KvDType::kF16, 8, 0});
  std::vector<float> r(64 * 8, 0.25f);
  std::vector<int32_t> p(64);
  std::iota(p.begin(), p.end(), 0);
  ASSERT_TRUE(cache.Append(0, {r.data(), 64, 8}, {r.data(), 64, 8}, p).ok());
  const size_t full = cache.BytesReserved();
  std::vector<int32_t> keep{0, 1, 2, 3};
  cache.Retain(0, 0, keep);
  cache.Retain(0, 1, keep);
  // Growing again up to the old size must not take more pages than before.
  std::vector<int32_t> p2(60);
  std::iota(p2.begin(), p2.end(), 64);
  ASSERT_TRUE(cache.Append(0, {r.data(), 60, 8}, {r.data(), 60, 8}, p2).ok());
  EXPECT_LE(cache.BytesReserved(), full);
}

TEST(KvCache, CloneIsDeepAndTruncateUndoes) {
  KvCache cache(2, 1, 4, {KvDType::kF32, 4, 0});
  std::vector<float> r(10 * 4);
  std::iota(r.begin(), r.end(), 0.0f);
  std::vector<int32_t> p(10);
  std::iota(p.begin(), p.end(), 0);
  for (int l = 0; l < 2; ++l)
    ASSERT_TRUE(cache.Append(l, {r.data(), 10, 4}, {r.data(), 10, 4}, p).ok());
  KvCache copy = cache.Clone();
  std::vector<int32_t> keep{1, 5};
  cache.Retain(0, 0, keep);
  EXPECT_EQ(copy.Length(0, 0), 10);
  EXPECT_EQ(cache.Length(0, 0), 2);
  copy.TruncateFrom(6);
  EXPECT_EQ(copy.Length(1, 0), 6);
  EXPECT_EQ(copy.NextPosition(), 6);
  std::vector<float> keys;
  copy.ReadHead(1, 0, &keys, nullptr, nullptr);
  EXPECT_EQ(keys[5 * 4 + 2], 22.0f);
}

}  // namespace
}  // namespace primekv
