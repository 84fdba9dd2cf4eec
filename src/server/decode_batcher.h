// Batched decode of `primekv serve`: every running turn hands its next token to Step, and one
// forward pass runs the tokens of all turns that are waiting, once each turn in its decode loop
// has handed its token in, or a step's time after the first one was.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <vector>

#include "primekv/model/model.h"

namespace primekv::server {

// How long a handed-in token waits for the other decoding turns: the last pass's time, kept
// within these bounds (a slow client costs the others at most `most`).
struct DecodeWaitBounds {
  std::chrono::duration<double> least{5e-5};
  std::chrono::duration<double> most{5e-3};
};

class DecodeBatcher {
 public:
  // One batched forward pass (Model::ForwardDecodeBatch): logits is [slots, vocab]; `ws` is the
  // batcher's, used under the model mutex.
  using Forward = std::function<Status(std::span<const DecodeSlot> slots, MatView<float> logits,
                                       ForwardWorkspace& ws)>;
  struct Stats {
    uint64_t batches = 0;  // forward passes
    uint64_t rows = 0;     // tokens they ran
  };

  using WaitBounds = DecodeWaitBounds;

  // `model_mutex`: the model's lock, whose owner (the engine, with the model) outlives this.
  DecodeBatcher(Forward forward, int vocab_size, std::mutex& model_mutex,
                WaitBounds wait = WaitBounds{});

  // A turn enters and leaves its decode loop: a batch waits for every turn inside to hand in.
  void Enter();
  void Leave();
  // Runs `slot`'s token in the next batch and writes its logits (vocab floats).
  Status Step(const DecodeSlot& slot, std::span<float> logits);
  Stats stats() const;
  size_t queued() const;  // tokens waiting for a batch

 private:
  struct Job;
  void RunBatchLocked(std::unique_lock<std::mutex>& lock);

  struct Buffers {  // under model_mu_
    ForwardWorkspace ws;
    std::vector<float> logits;
    std::vector<DecodeSlot> slots;
  };
  struct Timing {  // under mu_
    double last_seconds = 0;
    std::chrono::steady_clock::time_point last_end;
    Stats stats;
  };

  const Forward forward_;
  const size_t vocab_;
  std::mutex& model_mu_;
  const WaitBounds wait_;
  Buffers buffers_;
  mutable std::mutex mu_;  // the queue below
  std::condition_variable cv_;
  std::vector<Job*> pending_;
  std::vector<Job*> batch_;  // the running batch's jobs (its leader's only)
  int decoders_ = 0;         // turns in their decode loop
  bool running_ = false;
  Timing timing_;
};

}  // namespace primekv::server
