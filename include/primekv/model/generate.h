// The decode loop: sample a token from the last logits, hand it on, feed it back, repeat. The
// pipeline (press/pipeline.cc) runs every answer through it; the caller's `feed` runs the
// forward pass (with whatever tap or accounting it needs) and refreshes the logits.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/model/sampler.h"

namespace primekv {

struct DecodeOptions {
  int max_new_tokens = 128;
  SamplerOptions sampler;
  // Feed the final token (the end token, or the last one allowed) into the cache too, so the
  // whole answer stays there (multi-turn); otherwise the loop stops before that forward.
  bool feed_last = false;
  // Called with each generated token that is not an end token; return false to stop.
  std::function<bool(Token)> on_token;
  int reserve = 0;    // tokens reserved up front, so the loop itself allocates nothing
  std::string label;  // prepended to sampling errors, e.g. "turn 2, "
};

struct DecodeResult {
  std::vector<Token> tokens;  // generated ids, without the end-of-generation token
  bool stopped_at_end = false;
};

// Decodes from `logits` (the distribution after the prompt). `feed(token)` must run the token
// through the model and leave the next logits in `logits`; `after_feed(i)`, when given, runs
// after the i-th token (0-based) was fed and more will follow (decode-time compression).
// Sampling errors read label + "token N: ..."; errors of feed and after_feed pass unchanged.
Result<DecodeResult> Decode(const Model& model, std::span<const float> logits,
                            const DecodeOptions& options, const std::function<Status(Token)>& feed,
                            const std::function<Status(int)>& after_feed = {});

}  // namespace primekv
