// Batched decode of `primekv serve`: one forward pass runs the next token of every decoding turn.
#include <algorithm>
#include <chrono>

#include "server/server_internal.h"

namespace primekv::server {

struct Engine::DecodeJob {
  DecodeSlot slot;
  std::span<float> logits;
  std::chrono::steady_clock::time_point since;
  Status status = Status::Ok();
  bool done = false;
};

void Engine::EnterDecode() {
  std::lock_guard lock(batch_mu_);
  ++decoders_;
}

void Engine::LeaveDecode() {
  std::lock_guard lock(batch_mu_);
  --decoders_;
  batch_cv_.notify_all();  // the waiting turns may now all be in
}

Status Engine::DecodeStep(const DecodeSlot& slot, std::span<float> logits) {
  DecodeJob job{slot, logits, std::chrono::steady_clock::now()};
  std::unique_lock lock(batch_mu_);
  pending_.push_back(&job);
  // No wake-up here: the turn whose token completes the batch runs it itself (below), and the
  // others wait with the deadline of the oldest pending token, which a push does not move.
  // Waking every waiter on every push cost more than the step's sampling on a small model.
  while (!job.done) {
    if (batch_running_ || pending_.empty()) {
      batch_cv_.wait(lock);
      continue;
    }
    // Wait for the other decoding turns (their sampling and output take far less than a
    // step), but at most about one step: a turn that is slow to come back (a slow streaming
    // client) costs the others little. The wait starts when the last batch ended at the
    // earliest, so that its turns can come back before a token that came in during it runs.
    const auto wait = std::chrono::duration<double>(std::clamp(last_batch_seconds_, 5e-5, 5e-3));
    const auto deadline = std::max(pending_.front()->since, last_batch_end_) +
                          std::chrono::duration_cast<std::chrono::nanoseconds>(wait);
    if (static_cast<int>(pending_.size()) >= decoders_ ||
        std::chrono::steady_clock::now() >= deadline) {
      RunBatchLocked(lock);
    } else {
      batch_cv_.wait_until(lock, deadline);
    }
  }
  return job.status;
}

void Engine::RunBatchLocked(std::unique_lock<std::mutex>& lock) {
  // One batch runs at a time, so its buffers are reused (pending_ keeps the other one's).
  std::vector<DecodeJob*>& batch = batch_jobs_;
  batch.clear();
  batch.swap(pending_);
  batch_running_ = true;
  lock.unlock();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = Status::Ok();
  {
    std::lock_guard model_lock(model_mu_);
    const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
    if (batch_logits_.size() < batch.size() * vocab) batch_logits_.resize(batch.size() * vocab);
    batch_slots_.clear();
    for (const DecodeJob* j : batch) batch_slots_.push_back(j->slot);
    st = model_->ForwardDecodeBatch(
        batch_slots_,
        MatView<float>(batch_logits_.data(), static_cast<int64_t>(batch.size()),
                       static_cast<int64_t>(vocab)),
        *pool_, decode_ws_);
    for (size_t i = 0; st.ok() && i < batch.size(); ++i)
      std::copy_n(batch_logits_.data() + i * vocab, vocab, batch[i]->logits.data());
  }
  const double seconds = SecondsSince(t0);
  lock.lock();
  batch_running_ = false;
  last_batch_seconds_ = seconds;
  last_batch_end_ = std::chrono::steady_clock::now();
  ++decode_batches_;
  decode_batch_rows_ += batch.size();
  for (DecodeJob* j : batch) {
    j->status = st;
    j->done = true;
  }
  batch_cv_.notify_all();
}

}  // namespace primekv::server
