// The batched decode of `primekv serve` (server/decode_batcher.h) over a stand-in forward pass.
#include "server/decode_batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace primekv::server {
namespace {

constexpr int kVocab = 4;

// A forward pass that records its batch sizes, writes token * 10 + column as each row's logits,
// and holds its first pass until released.
struct FakeModel {
  std::mutex mu;
  std::mutex model_mutex;  // the batcher's model lock (the engine owns it in the server)
  std::condition_variable cv;
  bool release = false;
  std::chrono::milliseconds pass_time{0};  // how long each pass takes
  std::vector<size_t> batches;

  Status Forward(std::span<const DecodeSlot> slots, MatView<float> logits) {
    {
      std::unique_lock lock(mu);
      batches.push_back(slots.size());
      cv.notify_all();
      if (batches.size() == 1) cv.wait(lock, [&] { return release; });
    }
    std::this_thread::sleep_for(pass_time);
    for (size_t i = 0; i < slots.size(); ++i)
      for (int v = 0; v < kVocab; ++v)
        logits(static_cast<int64_t>(i), v) = static_cast<float>(slots[i].token * 10 + v);
    return slots.size() > 0 && slots[0].token < 0 ? Status::Error("negative token") : Status::Ok();
  }
  size_t passes() {
    std::lock_guard lock(mu);
    return batches.size();
  }
};

DecodeBatcher MakeBatcher(FakeModel& m, DecodeBatcher::WaitBounds wait = {}) {
  return DecodeBatcher([&m](std::span<const DecodeSlot> s, MatView<float> l,
                            ForwardWorkspace&) { return m.Forward(s, l); },
                       kVocab, m.model_mutex, wait);
}

template <typename Pred>
void WaitFor(Pred pred) {
  for (int i = 0; i < 2000 && !pred(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// Two turns hand in their tokens while a third turn's pass runs: the next pass runs both.
TEST(DecodeBatcher, TwoWaitingTurnsRunInOneForwardPass) {
  FakeModel m;
  DecodeBatcher b(MakeBatcher(m));
  for (int i = 0; i < 3; ++i) b.Enter();
  std::vector<std::vector<float>> logits(3, std::vector<float>(kVocab));
  std::vector<Status> status(3, Status::Error("not run"));
  const auto turn = [&](int i) {
    status[static_cast<size_t>(i)] = b.Step({.token = i + 1}, logits[static_cast<size_t>(i)]);
    b.Leave();
  };
  std::thread first(turn, 0);
  WaitFor([&] { return m.passes() == 1; });  // its pass holds the model
  std::thread second(turn, 1), third(turn, 2);
  WaitFor([&] { return b.queued() == 2; });
  EXPECT_EQ(b.queued(), 2u);
  {
    std::lock_guard lock(m.mu);
    m.release = true;
    m.cv.notify_all();
  }
  first.join();
  second.join();
  third.join();
  EXPECT_EQ(m.batches, (std::vector<size_t>{1, 2}));
  EXPECT_EQ(b.stats().batches, 2u);
  EXPECT_EQ(b.stats().rows, 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(status[static_cast<size_t>(i)].ok()) << status[static_cast<size_t>(i)].message();
    // Each turn gets its own row.
    EXPECT_EQ(logits[static_cast<size_t>(i)],
              (std::vector<float>{10.0f * (i + 1), 10.0f * (i + 1) + 1, 10.0f * (i + 1) + 2,
                                  10.0f * (i + 1) + 3}));
  }
}

// Two decoding turns hand in their tokens: the first waits for the other rather than running
// alone, and both run in one pass. The wait is 30 s here, so that how the threads are
// scheduled cannot decide the outcome (a busy machine can hold a thread longer than the
// server's 5 ms); the server's bounds are checked below.
TEST(DecodeBatcher, ATurnWaitsForTheOtherDecodingTurn) {
  FakeModel m;
  m.release = true;
  DecodeBatcher b(
      MakeBatcher(m, {.least = std::chrono::seconds(30), .most = std::chrono::seconds(30)}));
  std::vector<float> warm(kVocab);
  b.Enter();
  ASSERT_TRUE(b.Step({.token = 1}, warm).ok());  // the only turn inside: no wait
  b.Leave();
  ASSERT_EQ(m.batches, (std::vector<size_t>{1}));
  b.Enter();
  b.Enter();
  const auto turn = [&](Token t) {
    std::vector<float> logits(kVocab);
    EXPECT_TRUE(b.Step({.token = t}, logits).ok());
    EXPECT_EQ(logits[0], 10.0f * static_cast<float>(t));
    b.Leave();
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::thread one(turn, 2);
  WaitFor([&] { return b.queued() == 1; });
  EXPECT_EQ(m.passes(), 1u) << "the first turn ran alone instead of waiting";
  std::thread two(turn, 3);
  one.join();
  two.join();
  EXPECT_EQ(m.batches, (std::vector<size_t>{1, 2}));
  // The second token completed the batch: nobody waited out the 30 s.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

// A turn whose partner does not hand in runs alone once its wait is over, and not before.
TEST(DecodeBatcher, ALoneTurnRunsAfterItsWait) {
  FakeModel m;
  m.release = true;
  const auto wait = std::chrono::milliseconds(40);
  DecodeBatcher b(MakeBatcher(m, {.least = wait, .most = wait}));
  b.Enter();
  b.Enter();  // a second turn in its decode loop that hands in nothing (a slow client)
  std::vector<float> logits(kVocab);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(b.Step({.token = 2}, logits).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, wait);
  EXPECT_EQ(m.batches, (std::vector<size_t>{1}));
  EXPECT_EQ(logits[0], 20.0f);
  b.Leave();
  b.Leave();
}

TEST(DecodeBatcher, AFailedPassFailsItsTurns) {
  FakeModel m;
  m.release = true;
  DecodeBatcher b(MakeBatcher(m));
  b.Enter();
  std::vector<float> logits(kVocab);
  EXPECT_FALSE(b.Step({.token = -1}, logits).ok());
  EXPECT_TRUE(b.Step({.token = 2}, logits).ok());
  EXPECT_EQ(logits[0], 20.0f);
  b.Leave();
}

}  // namespace
}  // namespace primekv::server
