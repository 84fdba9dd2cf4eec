// Next-token choice: greedy, or temperature with top-k and top-p, seeded.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "primekv/util/status.h"
#include "primekv/tokenizer/tokenizer.h"

namespace primekv {

struct SamplerOptions {
  float temperature = 0.8f;  // <= 0 means greedy
  int top_k = 40;            // <= 0 means the whole vocabulary
  float top_p = 0.95f;       // >= 1 means no nucleus cut
  uint64_t seed = 0;
};

// Options a sampler can use: finite temperature >= 0, top_k >= 0, top_p in (0, 1].
Status ValidateSamplerOptions(const SamplerOptions& options);

class Sampler {
 public:
  explicit Sampler(SamplerOptions options);
  // The next token, or an error when the options are invalid or any logit is NaN or infinite
  // (a broken model or input: sampling from it would emit an arbitrary token forever).
  Result<Token> Sample(std::span<const float> logits);

 private:
  SamplerOptions options_;
  Status options_status_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, Token>> candidates_;  // reused across calls
};

// Index of the largest logit; ties go to the lowest id.
Token Argmax(std::span<const float> logits);

}  // namespace primekv
