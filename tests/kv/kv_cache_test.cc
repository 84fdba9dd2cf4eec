#include "primekv/kv/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
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

// Every head's rows as stored, for comparing a cache before and after another cache's writes.
std::vector<std::vector<uint8_t>> Snapshot(const KvCache& c) {
  std::vector<std::vector<uint8_t>> out;
  for (int l = 0; l < c.n_layers(); ++l)
    for (int h = 0; h < c.n_kv_heads(); ++h) {
      std::vector<uint8_t> k, v;
      std::vector<int32_t> p;
      c.ReadHeadRaw(l, h, &k, &v, &p);
      k.insert(k.end(), v.begin(), v.end());
      const auto* pb = reinterpret_cast<const uint8_t*>(p.data());
      k.insert(k.end(), pb, pb + p.size() * sizeof(int32_t));
      out.push_back(std::move(k));
    }
  return out;
}

Status AppendRange(KvCache& c, int32_t first, int n, float salt) {
  const int w = c.n_kv_heads() * c.head_dim();
  auto k = Rows(n, c.n_kv_heads(), c.head_dim(), first, salt);
  auto v = Rows(n, c.n_kv_heads(), c.head_dim(), first, salt + 0.5f);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  std::iota(pos.begin(), pos.end(), first);
  for (int l = 0; l < c.n_layers(); ++l)
    PRIMEKV_RETURN_IF_ERROR(c.Append(l, {k.data(), n, w}, {v.data(), n, w}, pos));
  return Status::Ok();
}

TEST(KvCache, SharedPagesAreCountedOnceAndCopiedOnlyWhenWritten) {
  for (KvDType dt : {KvDType::kF32, KvDType::kF16, KvDType::kQ8_0}) {
    const int layers = 2, heads = 2, pt = 16;
    KvCache base(layers, heads, 32, {dt, pt, 0});
    ASSERT_TRUE(AppendRange(base, 0, 100, 0.0f).ok());  // 7 pages a head, the last one partly
    const auto base_rows = Snapshot(base);
    const size_t allocated = base.BytesAllocated();
    KvCache a = base.Share();
    KvCache b = base.Share();
    EXPECT_EQ(a.PoolUsers(), 3);
    EXPECT_EQ(a.BytesAllocated(), allocated) << "a share costs no pages";
    EXPECT_EQ(base.BytesShared(), base.BytesReserved());
    EXPECT_EQ(Snapshot(a), base_rows);
    const size_t page = base.BytesReserved() / (layers * heads * 7);

    // An append leaves the partly filled shared page as it is and starts a page of its own.
    ASSERT_TRUE(AppendRange(a, 100, 5, 7.0f).ok());
    EXPECT_EQ(a.NumPages(0, 0), 8);
    EXPECT_EQ(a.Page(0, 0, 6).rows, 4);
    EXPECT_EQ(a.Page(0, 0, 6).keys, base.Page(0, 0, 6).keys);
    EXPECT_EQ(a.Page(0, 0, 7).rows, 5);
    EXPECT_EQ(a.PositionAt(0, 0, 100), 100);
    EXPECT_EQ(a.PositionAt(0, 0, 99), 99);
    EXPECT_EQ(Snapshot(base), base_rows);
    EXPECT_EQ(Snapshot(b), base_rows);
    EXPECT_EQ(a.BytesShared(), a.BytesReserved() - layers * heads * page);
    EXPECT_EQ(a.Length(1, 1), 105);
    std::vector<float> keys;
    std::vector<int32_t> pos;
    a.ReadHead(1, 1, &keys, nullptr, &pos);
    EXPECT_EQ(pos[104], 104);
    EXPECT_NEAR(keys[104 * 32], 7.0f + 104 + 0.001f, 0.1f);
    EXPECT_NEAR(keys[99 * 32], 99 + 0.001f, 0.1f) << "the shared page's rows are read in place";

    // Compression compacts its own copies; the other caches read what they read before.
    std::vector<int32_t> odd;
    for (int r = 1; r < 100; r += 2) odd.push_back(r);
    base.Retain(0, 1, odd);
    EXPECT_EQ(Snapshot(b), base_rows);
    b.TruncateFrom(40);  // drops pages without writing any
    EXPECT_EQ(b.BytesShared(), b.BytesReserved());
    EXPECT_EQ(b.Length(0, 0), 40);

    // The shared pages outlive the cache that made them.
    const auto a_rows = Snapshot(a);
    base = KvCache(1, 1, 32, {dt, pt, 0});
    EXPECT_EQ(a.PoolUsers(), 2);
    EXPECT_EQ(Snapshot(a), a_rows);
    b.Clear();
    EXPECT_EQ(a.BytesShared(), 0u);
    EXPECT_EQ(a.BytesAllocated(), allocated) << "the pool keeps its chunks for its caches";
  }
}

// DropBefore removes exactly the rows below a position: whole pages, then the front of the page
// that straddles it, whose live rows move to its start. A page another cache holds is copied
// first, and ShareLayer brings a layer back from such a cache.
TEST(KvCache, DropBeforeIsRowExactAndSparesSharedPages) {
  for (KvDType dt : {KvDType::kF32, KvDType::kF16, KvDType::kQ8_0}) {
    SCOPED_TRACE(KvDTypeName(dt));
    const int layers = 2, heads = 2, d = 32, pt = 16;
    KvCache c(layers, heads, d, {dt, pt, 0});
    ASSERT_TRUE(AppendRange(c, 0, 100, 0.0f).ok());
    std::vector<float> want_k, want_v;
    std::vector<int32_t> want_p;
    c.ReadHead(0, 1, &want_k, &want_v, &want_p);
    const KvCache mark = c.Share();
    const auto mark_rows = Snapshot(mark);
    const size_t entry = c.BytesPerEntry();
    for (int32_t cut : {0, 5, 21, 32, 70, 99}) {
      c.DropBefore(0, cut);
      ASSERT_EQ(c.Length(0, 1), 100 - cut) << cut;
      EXPECT_EQ(c.Length(1, 1), 100) << "other layers are left";
      EXPECT_EQ(c.BytesInUse(), (static_cast<size_t>(100 - cut) * heads + 100 * heads) * entry);
      std::vector<float> k, v;
      std::vector<int32_t> p;
      c.ReadHead(0, 1, &k, &v, &p);
      const auto from = static_cast<std::ptrdiff_t>(cut);
      EXPECT_EQ(p, std::vector<int32_t>(want_p.begin() + from, want_p.end())) << cut;
      EXPECT_EQ(k, std::vector<float>(want_k.begin() + from * d, want_k.end())) << cut;
      EXPECT_EQ(v, std::vector<float>(want_v.begin() + from * d, want_v.end())) << cut;
      for (int r = 0; r < c.Length(0, 1); r += 7) EXPECT_EQ(c.PositionAt(0, 1, r), cut + r);
      EXPECT_EQ(Snapshot(mark), mark_rows) << "the share reads what it read before";
    }
    EXPECT_EQ(c.ExpiredBelow(), 99);
    // The pages after the straddling one are whole: an append fills the first page's room
    // only when it is the last page.
    ASSERT_TRUE(AppendRange(c, 100, 40, 3.0f).ok());
    EXPECT_EQ(c.Length(0, 0), 41);
    EXPECT_EQ(c.PositionAt(0, 0, 40), 139);
    c.TruncateFrom(100);
    c.ShareLayer(mark, 0);
    EXPECT_EQ(Snapshot(c), mark_rows);
    EXPECT_EQ(c.BytesShared(), c.BytesReserved());
    c.ReleaseLayer(1);
    EXPECT_EQ(c.Length(1, 0), 0);
    EXPECT_EQ(c.TotalEntries(), int64_t{100} * heads);
  }
}

TEST(KvCache, ReservePredictsAnAppendAfterASharedPage) {
  KvCache base(1, 2, 32, {KvDType::kF16, 16, 0});
  ASSERT_TRUE(
      AppendRange(base, 0, 16 * 64 - 8, 0.0f).ok());  // every page of one chunk, less 8 rows
  KvCache share = base.Share();
  for (int extra : {1, 8, 9, 40}) {
    KvCache s = share.Share();
    const size_t predicted = s.BytesAllocatedAfterReserve(extra);
    s.Reserve(extra);
    EXPECT_EQ(s.BytesAllocated(), predicted) << extra;
    ASSERT_TRUE(AppendRange(s, 16 * 64 - 8, extra, 1.0f).ok());
    EXPECT_EQ(s.BytesAllocated(), predicted) << extra;
  }
}

// BytesAllocatedAlone is what BytesAllocatedAfterReserve becomes once the other caches of the
// pool are gone (the server refuses a turn up front by it), and equals it for a cache alone.
TEST(KvCache, AloneIsWhatAReserveCostsOnceTheSharesAreGone) {
  for (int extra : {1, 8, 9, 40, 1500}) {
    KvCache base(2, 2, 32, {KvDType::kF16, 16, 0});
    ASSERT_TRUE(AppendRange(base, 0, 16 * 40 - 8, 0.0f).ok());  // last page 8 rows short
    EXPECT_EQ(base.BytesAllocatedAlone(extra), base.BytesAllocatedAfterReserve(extra)) << extra;
    KvCache s = base.Share();
    std::vector<KvCache> others;
    for (int t = 0; t < 3; ++t) {
      others.push_back(base.Share());
      ASSERT_TRUE(AppendRange(others.back(), 16 * 40 - 8, 200, 2.0f + static_cast<float>(t)).ok());
    }
    base = KvCache(2, 2, 32, {KvDType::kF16, 16, 0});
    const size_t alone = s.BytesAllocatedAlone(extra);
    const size_t shared = s.BytesAllocatedAfterReserve(extra);
    if (extra == 1500) {
      EXPECT_LT(alone, shared) << "the others' pages would be free for it";
    } else {
      EXPECT_LE(alone, shared) << extra;
    }
    others.clear();
    EXPECT_EQ(s.BytesAllocatedAfterReserve(extra), alone) << extra;
    s.Reserve(extra);
    EXPECT_EQ(s.BytesAllocated(), alone) << extra;
  }
}

// Caches that share a pool change on their own threads (TSan checks the pool's guard).
TEST(KvCache, SharesChangeOnTheirOwnThreads) {
  KvCache base(2, 2, 32, {KvDType::kF16, 16, 0});
  ASSERT_TRUE(AppendRange(base, 0, 300, 0.0f).ok());
  const auto base_rows = Snapshot(base);
  std::vector<KvCache> shares;
  for (int t = 0; t < 4; ++t) shares.push_back(base.Share());
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      KvCache& c = shares[static_cast<size_t>(t)];
      int32_t next = 300;
      for (int round = 0; round < 20; ++round) {
        if (!AppendRange(c, next, 7 + t, static_cast<float>(t)).ok()) ++failures[t];
        next += 7 + t;
        std::vector<int32_t> keep;
        for (int r = 0; r < c.Length(0, 0); ++r)
          if (r % 5 != t) keep.push_back(r);
        for (int l = 0; l < 2; ++l)
          for (int h = 0; h < 2; ++h) c.Retain(l, h, keep);
        KvCache extra = c.Share();  // made and dropped on this thread while others run
        if (extra.Length(1, 1) != c.Length(1, 1)) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
  EXPECT_EQ(Snapshot(base), base_rows);
  // Each thread's cache holds what its own operations made, whatever the others did.
  for (int t = 0; t < 4; ++t) {
    std::vector<int32_t> pos;
    shares[static_cast<size_t>(t)].ReadPositions(1, 0, &pos);
    std::vector<int32_t> expect(300);
    std::iota(expect.begin(), expect.end(), 0);
    int32_t next = 300;
    for (int round = 0; round < 20; ++round) {
      for (int i = 0; i < 7 + t; ++i) expect.push_back(next + i);
      next += 7 + t;
      std::vector<int32_t> kept;
      for (size_t r = 0; r < expect.size(); ++r)
        if (static_cast<int>(r) % 5 != t) kept.push_back(expect[r]);
      expect = kept;
    }
    EXPECT_EQ(pos, expect) << t;
  }
}

TEST(KvCache, MoveAssignmentReleasesTheOldPages) {
  KvCache base(1, 1, 32, {KvDType::kF32, 8, 0});
  ASSERT_TRUE(AppendRange(base, 0, 20, 0.0f).ok());
  KvCache other = base.Share();
  EXPECT_EQ(base.BytesShared(), base.BytesReserved());
  other = KvCache(1, 1, 32, {KvDType::kF32, 8, 0});
  EXPECT_EQ(base.BytesShared(), 0u);
  EXPECT_EQ(base.PoolUsers(), 1);
  KvCache moved = std::move(base);
  EXPECT_EQ(moved.Length(0, 0), 20);
  EXPECT_EQ(moved.BytesShared(), 0u);
}

// Random operations on caches that share one pool, against a model that copies everything:
// every head's rows and pages read what the model holds after every step. Each append writes
// rows of its own salt, and keys and values are both read, so a write into a page another
// cache holds (a missed copy) shows as that cache reading another's rows.
TEST(KvCache, SharingCachesMatchACopyingModel) {
  const int layers = 2, heads = 2, d = 32, pt = 8;
  struct Row {
    int32_t pos;
    float salt;
  };
  using Model = std::vector<std::vector<Row>>;  // rows per (layer, head)
  int appends = 0;
  std::mt19937 rng(7);
  std::vector<KvCache> caches;
  std::vector<Model> models;
  caches.emplace_back(layers, heads, d, KvCacheOptions{KvDType::kF32, pt, 0});
  models.emplace_back(layers * heads);
  const auto check = [&](int step) {
    for (size_t c = 0; c < caches.size(); ++c) {
      for (int i = 0; i < layers * heads; ++i) {
        const int l = i / heads, h = i % heads;
        std::vector<float> keys, values;
        std::vector<int32_t> pos;
        caches[c].ReadHead(l, h, &keys, &values, &pos);
        const auto& want = models[c][static_cast<size_t>(i)];
        std::vector<int32_t> want_pos;
        for (const Row& r : want) want_pos.push_back(r.pos);
        ASSERT_EQ(pos, want_pos) << "step " << step << " cache " << c;
        int rows = 0;
        for (int p = 0; p < caches[c].NumPages(l, h); ++p) {
          const KvPage& page = caches[c].Page(l, h, p);
          ASSERT_GT(page.rows, 0);
          ASSERT_EQ(page.positions[0], pos[static_cast<size_t>(rows)]);
          rows += page.rows;
        }
        ASSERT_EQ(rows, caches[c].Length(l, h));
        for (size_t r = 0; r < pos.size(); ++r) {  // Rows(): salt + position + 0.001 h + 1e-5 c
          const float key = want[r].salt + static_cast<float>(pos[r]) + 0.001f * h;
          ASSERT_NEAR(keys[r * d], key, 1e-3) << "step " << step << " cache " << c << " row " << r;
          ASSERT_NEAR(values[r * d + d - 1], key + 0.5f + 1e-5f * (d - 1), 1e-3)
              << "step " << step << " cache " << c << " row " << r;
        }
        if (!pos.empty()) {
          ASSERT_EQ(caches[c].PositionAt(l, h, static_cast<int>(pos.size()) / 2),
                    pos[pos.size() / 2]);
        }
      }
    }
  };
  for (int step = 0; step < 400; ++step) {
    const size_t c = rng() % caches.size();
    const int op = static_cast<int>(rng() % 10);
    if (op < 2 && caches.size() < 6) {
      caches.push_back(caches[c].Share());
      models.push_back(models[c]);
    } else if (op < 5) {
      const int n = 1 + static_cast<int>(rng() % 20);
      const int32_t first = caches[c].NextPosition();
      const float salt = 0.125f * static_cast<float>(++appends % 7);
      ASSERT_TRUE(AppendRange(caches[c], first, n, salt).ok());
      for (auto& m : models[c])
        for (int i = 0; i < n; ++i) m.push_back({first + i, salt});
    } else if (op < 8) {
      const int i = static_cast<int>(rng() % (layers * heads));
      auto& m = models[c][static_cast<size_t>(i)];
      std::vector<int32_t> keep;
      std::vector<Row> kept_rows;
      const unsigned drop = 2 + rng() % 6;  // drop about one row in `drop`
      for (size_t r = 0; r < m.size(); ++r)
        if (rng() % drop != 0) {
          keep.push_back(static_cast<int32_t>(r));
          kept_rows.push_back(m[r]);
        }
      caches[c].Retain(i / heads, i % heads, keep);
      m = kept_rows;
    } else if (op < 9) {
      const int32_t cut =
          caches[c].NextPosition() > 0 ? static_cast<int32_t>(rng() % caches[c].NextPosition()) : 0;
      caches[c].TruncateFrom(cut);
      for (auto& m : models[c]) std::erase_if(m, [&](const Row& r) { return r.pos >= cut; });
    } else if (caches.size() > 1) {
      caches.erase(caches.begin() + static_cast<std::ptrdiff_t>(c));
      models.erase(models.begin() + static_cast<std::ptrdiff_t>(c));
    }
    check(step);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace primekv
