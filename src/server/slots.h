// The --slots of `primekv serve`: how many requests may run at once (the others wait).
#pragma once

#include <condition_variable>
#include <mutex>

namespace primekv::server {

class Slots {
 public:
  explicit Slots(int n) : free_(n) {}
  // Waits for a free slot and takes it.
  void Take() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  void Give() {
    std::lock_guard lock(mu_);
    ++free_;
    cv_.notify_one();
  }
  int free() const {
    std::lock_guard lock(mu_);
    return free_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int free_;
};

}  // namespace primekv::server
