// Batched decode of `primekv serve`: one forward pass runs the next token of every decoding turn.
#include "server/decode_batcher.h"

#include <algorithm>
#include <chrono>

namespace primekv::server {

struct DecodeBatcher::Job {
  DecodeSlot slot;
  std::span<float> logits;
  std::chrono::steady_clock::time_point since;
  Status status = Status::Ok();
  bool done = false;
};

DecodeBatcher::DecodeBatcher(Forward forward, int vocab_size, std::mutex& model_mutex,
                             WaitBounds wait)
    : forward_(std::move(forward)),
      vocab_(static_cast<size_t>(vocab_size)),
      model_mu_(model_mutex),
      wait_(wait) {}

void DecodeBatcher::Enter() {
  std::lock_guard lock(mu_);
  ++decoders_;
}

void DecodeBatcher::Leave() {
  std::lock_guard lock(mu_);
  --decoders_;
  cv_.notify_all();  // the waiting turns may now all be in
}

DecodeBatcher::Stats DecodeBatcher::stats() const {
  std::lock_guard lock(mu_);
  return timing_.stats;
}

size_t DecodeBatcher::queued() const {
  std::lock_guard lock(mu_);
  return pending_.size();
}

Status DecodeBatcher::Step(const DecodeSlot& slot, std::span<float> logits) {
  Job job{slot, logits, std::chrono::steady_clock::now()};
  std::unique_lock lock(mu_);
  pending_.push_back(&job);
  // No wake-up here: the turn whose token completes the batch runs it itself (below), and the
  // others wait with the deadline of the oldest pending token, which a push does not move.
  // Waking every waiter on every push cost more than the step's sampling on a small model.
  while (!job.done) {
    if (running_ || pending_.empty()) {
      cv_.wait(lock);
      continue;
    }
    // Wait for the other decoding turns (their sampling and output take far less than a
    // step), but at most about one step: a turn that is slow to come back (a slow streaming
    // client) costs the others little. The wait starts when the last batch ended at the
    // earliest, so that its turns can come back before a token that came in during it runs.
    const auto wait =
        std::clamp(std::chrono::duration<double>(timing_.last_seconds), wait_.least, wait_.most);
    const auto deadline = std::max(pending_.front()->since, timing_.last_end) +
                          std::chrono::duration_cast<std::chrono::nanoseconds>(wait);
    if (static_cast<int>(pending_.size()) >= decoders_ ||
        std::chrono::steady_clock::now() >= deadline) {
      RunBatchLocked(lock);
    } else {
      cv_.wait_until(lock, deadline);
    }
  }
  return job.status;
}

void DecodeBatcher::RunBatchLocked(std::unique_lock<std::mutex>& lock) {
  // One batch runs at a time, so its buffers are reused (pending_ keeps the other one's).
  std::vector<Job*>& batch = batch_;
  batch.clear();
  batch.swap(pending_);
  running_ = true;
  lock.unlock();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = Status::Ok();
  {
    std::lock_guard model_lock(model_mu_);
    Buffers& b = buffers_;
    if (b.logits.size() < batch.size() * vocab_) b.logits.resize(batch.size() * vocab_);
    b.slots.clear();
    for (const Job* j : batch) b.slots.push_back(j->slot);
    st = forward_(b.slots,
                  MatView<float>(b.logits.data(), static_cast<int64_t>(batch.size()),
                                 static_cast<int64_t>(vocab_)),
                  b.ws);
    for (size_t i = 0; st.ok() && i < batch.size(); ++i)
      std::copy_n(b.logits.data() + i * vocab_, vocab_, batch[i]->logits.data());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  lock.lock();
  running_ = false;
  timing_.last_seconds = seconds;
  timing_.last_end = std::chrono::steady_clock::now();
  ++timing_.stats.batches;
  timing_.stats.rows += batch.size();
  for (Job* j : batch) {
    j->status = st;
    j->done = true;
  }
  cv_.notify_all();
}

}  // namespace primekv::server
