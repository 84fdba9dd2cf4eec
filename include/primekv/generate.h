// The generation loop: prefill a prompt, then sample token by token over the cache.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "primekv/model.h"
#include "primekv/sampler.h"

namespace primekv {

struct GenerateOptions {
  int max_new_tokens = 128;
  SamplerOptions sampler;
  bool stop_at_end_of_generation = true;
  // Called after each generated token; return false to stop.
  std::function<bool(Token)> on_token;
};

struct GenerateResult {
  std::vector<Token> tokens;  // generated ids (including the end token, if one was sampled)
  bool stopped_at_end = false;
  double prefill_ms = 0;
  double decode_ms = 0;
};

// Prefills `prompt` (may be empty if the cache already ends with the prompt and `first_logits`
// holds its last logits) and generates up to max_new_tokens.
Result<GenerateResult> Generate(const Model& model, KvCache& cache, std::span<const Token> prompt,
                                const GenerateOptions& options, ThreadPool& pool,
                                ForwardWorkspace& ws);

}  // namespace primekv
