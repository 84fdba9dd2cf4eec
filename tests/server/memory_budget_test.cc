// The KV budget of `primekv serve` (server/memory_budget.h) over a stand-in for the session
// store: reservations, eviction, refusal, waiting for a running turn, and giving way.
#include "server/memory_budget.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace primekv::server {
namespace {

using Outcome = MemoryBudget::Outcome;
using GiveWay = MemoryBudget::GiveWay;
using Clock = std::chrono::steady_clock;

// What the store of one request saw and did.
struct Store final : MemoryBudget::Claimant {
  std::vector<size_t> idle;  // bytes of idle sessions, evicted from the back
  bool tenant_fits = true;
  size_t session_bytes = 0;       // what releasing the request's session frees
  std::atomic<int> released{-1};  // -1: not released; else whether it gave way
  std::atomic<bool> taken{false};
  std::vector<bool> own_only;  // as asked by each eviction
  size_t need = 0;             // what the turn would add now
  size_t shrink = 0;  // what each eviction takes off `need` (a session sharing its pool)

  size_t Need() override { return need; }
  bool TenantFits(size_t) override { return tenant_fits; }
  std::optional<size_t> EvictOne(bool own) override {
    own_only.push_back(own);
    if (idle.empty()) return std::nullopt;
    const size_t b = idle.back();
    idle.pop_back();
    need -= std::min(need, shrink);
    return b;
  }
  size_t Release(bool gave_way) override {
    released = gave_way ? 1 : 0;
    return session_bytes;
  }
  void Taken(size_t bytes) override {
    taken = true;
    taken_bytes = bytes;
  }
  size_t taken_bytes = 0;
};

MemoryBudget::Request Ask(Store& st, size_t bytes, GiveWay give_way = GiveWay::kNo,
                          double wait_s = 10) {
  MemoryBudget::Request r;
  st.need = bytes;
  r.give_way = give_way;
  r.deadline = Clock::now() +
               std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
  r.claimant = &st;
  return r;
}

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

TEST(MemoryBudget, ReservesWhatFitsAndGivesItBackWhenTheTurnEnds) {
  MemoryBudget b(100);
  Store st;
  b.Enter();
  b.Replace(0, 30);  // the request's session as it is
  EXPECT_EQ(b.Reserve(Ask(st, 50)), Outcome::kTaken);
  EXPECT_TRUE(st.taken);
  EXPECT_EQ(st.released, -1);
  EXPECT_EQ(b.used(), 80u);
  EXPECT_EQ(b.running(), 1);
  b.TurnEnded(80, 45);  // the session keeps what its cache holds after the turn
  EXPECT_EQ(b.used(), 45u);
  EXPECT_EQ(b.running(), 0);
}

TEST(MemoryBudget, EvictsIdleSessionsUntilTheRequestFits) {
  MemoryBudget b(100);
  b.Replace(0, 90);  // three idle sessions of 30
  Store st;
  st.idle = {30, 30, 30};
  b.Enter();
  EXPECT_EQ(b.Reserve(Ask(st, 50)), Outcome::kTaken);
  EXPECT_EQ(st.idle.size(), 1u) << "two evictions make room, a third is not needed";
  EXPECT_EQ(b.used(), 80u);
  // Over the tenant's cap only its own sessions are asked for.
  MemoryBudget capped(1000);
  Store own;
  own.tenant_fits = false;
  capped.Enter();
  EXPECT_EQ(capped.Reserve(Ask(own, 10)), Outcome::kRefusedTenant);
  ASSERT_FALSE(own.own_only.empty());
  EXPECT_TRUE(own.own_only.front());
}

TEST(MemoryBudget, ARequestAloneThatCannotFitIsRefusedAtOnce) {
  MemoryBudget b(100);
  Store st;
  st.session_bytes = 20;
  b.Enter();
  b.Replace(0, 20);
  const auto t0 = Clock::now();
  EXPECT_EQ(b.Reserve(Ask(st, 90)), Outcome::kRefusedBudget);
  EXPECT_LT(SecondsSince(t0), 5) << "waited for memory no one else holds";
  EXPECT_EQ(st.released, 0);  // refused, not giving way
  EXPECT_FALSE(st.taken);
  EXPECT_EQ(b.used(), 0u);
  EXPECT_EQ(b.waiting(), 0u);
}

// A request larger than the whole budget (with what its own session holds) is refused before
// any idle session is evicted for it: evicting could never make it fit.
TEST(MemoryBudget, ARequestThatCanNeverFitEvictsNothing) {
  MemoryBudget b(100);
  b.Replace(0, 60);  // two idle sessions of 30
  Store st;
  st.idle = {30, 30};
  st.session_bytes = 10;
  b.Enter();
  b.Replace(0, 10);  // the request's own session
  auto r = Ask(st, 95);
  r.alone = 105;  // its session's 10 and the request's 95
  EXPECT_EQ(b.Reserve(r), Outcome::kRefusedBudget);
  EXPECT_EQ(st.idle.size(), 2u) << "evicted sessions for a request that can never fit";
  EXPECT_TRUE(st.own_only.empty());
  EXPECT_EQ(st.released, 0);
  EXPECT_EQ(b.used(), 60u);
  EXPECT_EQ(b.waiting(), 0u);
  // One that fits once both are evicted still evicts them.
  Store fits;
  fits.idle = {30, 30};
  b.Enter();
  auto r2 = Ask(fits, 90);
  EXPECT_EQ(b.Reserve(r2), Outcome::kTaken);
  EXPECT_TRUE(fits.idle.empty());
}

// A session whose cache shares a pool with others: the pool stays allocated as they are
// evicted (they free no bytes), but their pages become free for this turn, so it needs less.
// It is taken once the others are gone; counting the whole pool as its own would refuse it.
TEST(MemoryBudget, APrefixSharedTurnNeedsLessAsTheOthersGo) {
  MemoryBudget b(100);
  b.Replace(0, 90);  // the pool, counted once
  Store st;
  st.idle = {0, 0, 0};  // three idle sessions sharing it
  st.shrink = 8;
  b.Enter();
  auto r = Ask(st, 24);
  r.alone = 90;  // the pool: its free pages hold what the turn appends
  EXPECT_EQ(b.Reserve(r), Outcome::kTaken);
  EXPECT_EQ(st.idle.size(), 1u) << "evicts only until the turn fits";
  EXPECT_EQ(st.taken_bytes, 8u);
  EXPECT_EQ(b.used(), 98u);
}

TEST(MemoryBudget, WaitsForARunningTurnToEnd) {
  MemoryBudget b(100);
  Store first, second;
  b.Enter();
  ASSERT_EQ(b.Reserve(Ask(first, 80)), Outcome::kTaken);
  Outcome got = Outcome::kRefusedBudget;
  b.Enter();
  std::thread waiter([&] { got = b.Reserve(Ask(second, 50)); });
  for (int i = 0; i < 1000 && b.waiting() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(b.waiting(), 1u);
  EXPECT_FALSE(second.taken) << "reserved beyond the budget";
  b.TurnEnded(80, 0);
  waiter.join();
  EXPECT_EQ(got, Outcome::kTaken);
  EXPECT_EQ(b.used(), 50u);
}

// Two beginning requests each hold a session that leaves too little room for the other, and
// no turn runs: the one that cannot give way goes on, the other releases its session, and
// begins again once the first one's turn has ended.
TEST(MemoryBudget, WhenAllWaitOnEachOtherOneGoesOnAndTheOtherGivesWay) {
  MemoryBudget b(100);
  Store stays, yields;
  yields.session_bytes = 60;
  b.Enter();
  b.Enter();
  b.Replace(0, 60);
  b.Replace(0, 60);
  Outcome first = Outcome::kRefusedBudget, second = Outcome::kRefusedBudget;
  std::thread a([&] { first = b.Reserve(Ask(stays, 10, GiveWay::kNo, 20)); });
  for (int i = 0; i < 1000 && b.waiting() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto t0 = Clock::now();
  std::thread c([&] { second = b.Reserve(Ask(yields, 10, GiveWay::kForget, 20)); });
  a.join();
  EXPECT_EQ(first, Outcome::kTaken);
  EXPECT_EQ(yields.released, 1);
  EXPECT_EQ(b.used(), 70u);  // the first session and its reservation
  b.TurnEnded(70, 60);
  c.join();
  EXPECT_EQ(second, Outcome::kRetry);
  EXPECT_FALSE(yields.taken);
  EXPECT_LT(SecondsSince(t0), 10) << "waited out the deadline";
}

}  // namespace
}  // namespace primekv::server
