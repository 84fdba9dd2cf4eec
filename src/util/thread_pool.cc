#include "primekv/util/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace primekv {
namespace {

// How long a waiting thread polls before it sleeps on a condition variable. A decode step runs
// a ParallelFor every few tens of microseconds, and waking a sleeping thread (a futex wake; on
// a virtual machine, an idle vCPU) takes about as long as a small product, so the second core
// joined each one late (1B Q4_0 decode at 2 threads on a 2-core Zen 5 VM: 51-60 tokens/s
// sleeping at once, 61-79 polling). The poller yields between checks, so on a busy machine it
// hands its core to the thread it waits for: a pure pause-spin made decode 3x slower there.
// Bounded, so an idle pool sleeps.
constexpr std::chrono::microseconds kPoll{100};

// Polls `done` until it holds or kPoll has passed; returns its last value.
template <typename Pred>
bool PollUntil(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + kPoll;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (done()) return true;
      std::this_thread::yield();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0)
    n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

// Guided chunks: each claim takes 1/(2 * threads) of what is left, at least job_min_chunk_. The
// first chunks are large (few claims) and the last ones small, so the threads finish within a
// small chunk of each other: with equal shares, a thread one share behind leaves the others idle
// for a whole share, an eighth of the work at 2 threads (docs/performance.md).
void ThreadPool::RunShare(int index) {
  const int64_t parts = 2 * static_cast<int64_t>(n_threads_);
  int64_t begin = next_index_.load(std::memory_order_relaxed);
  for (;;) {
    if (begin >= job_n_) return;
    const int64_t size = std::max(job_min_chunk_, (job_n_ - begin) / parts);
    const int64_t end = std::min(job_n_, begin + size);
    if (!next_index_.compare_exchange_weak(begin, end, std::memory_order_relaxed)) continue;
    job_(begin, end, index);
    begin = next_index_.load(std::memory_order_relaxed);
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    auto ready = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!PollUntil(ready)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, ready);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    RunShare(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Under the mutex, so a caller that checked pending_ and is about to wait cannot miss it.
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::Run(int64_t n, RangeFn fn, int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  if (n_threads_ == 1 || n <= min_chunk) {
    fn(0, n, 0);
    return;
  }
  job_ = fn;
  job_n_ = n;
  job_min_chunk_ = min_chunk;
  next_index_.store(0, std::memory_order_relaxed);
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    // Under the mutex, so a worker between its check and its wait cannot miss the new job.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  RunShare(0);
  auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!PollUntil(finished)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, finished);
  }
  job_ = RangeFn{nullptr, nullptr};
}

}  // namespace primekv
