// A fixed pool of worker threads with a blocking ParallelFor. Passed explicitly, never global.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace primekv {

class ThreadPool {
 public:
  // n_threads <= 0 means std::thread::hardware_concurrency(). The caller's thread also works,
  // so n_threads - 1 workers are started.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end, thread_index) over disjoint chunks covering [0, n); blocks until done.
  // Chunks shrink as the range is used up (thread_pool.cc), none shorter than min_chunk but the
  // last. thread_index is in [0, size()) and lets callers use per-thread scratch. `fn` is borrowed,
  // not copied, so a call allocates nothing (the decode loop relies on that).
  template <typename Fn>
  void ParallelFor(int64_t n, Fn&& fn, int64_t min_chunk = 1) {
    using F = std::remove_reference_t<Fn>;
    Run(n,
        RangeFn{const_cast<void*>(static_cast<const void*>(&fn)),
                [](void* f, int64_t b, int64_t e, int t) { (*static_cast<F*>(f))(b, e, t); }},
        min_chunk);
  }

 private:
  struct RangeFn {  // a non-owning reference to a callable
    void* object;
    void (*call)(void*, int64_t, int64_t, int);
    void operator()(int64_t b, int64_t e, int t) const { call(object, b, e, t); }
  };
  void Run(int64_t n, RangeFn fn, int64_t min_chunk);
  void WorkerLoop(int index);
  void RunShare(int index);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  // Workers and the caller poll the atomics (yielding) a short while before sleeping on the
  // condition variables: a decode step makes hundreds of calls a few microseconds apart, and a
  // sleep and wake-up per call cost about 10 us each (docs/performance.md).
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  // The job, written by the caller before it publishes a new generation (release) and read by
  // workers after they see it (acquire).
  RangeFn job_{nullptr, nullptr};
  int64_t job_n_ = 0;
  int64_t job_min_chunk_ = 1;           // the smallest chunk a claim takes
  std::atomic<int64_t> next_index_{0};  // the first index not yet claimed
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace primekv
