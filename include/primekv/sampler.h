// Next-token choice: greedy, or temperature with top-k and top-p, seeded.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "primekv/tokenizer.h"

namespace primekv {

struct SamplerOptions {
  float temperature = 0.8f;  // <= 0 means greedy
  int top_k = 40;            // <= 0 means the whole vocabulary
  float top_p = 0.95f;       // >= 1 means no nucleus cut
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplerOptions options);
  Token Sample(std::span<const float> logits);

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, Token>> candidates_;  // reused across calls
};

// Index of the largest logit; ties go to the lowest id.
Token Argmax(std::span<const float> logits);

}  // namespace primekv
