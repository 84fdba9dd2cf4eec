// One generation request after validation, and what its turn answers.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "primekv/model/sampler.h"
#include "primekv/tokenizer/tokenizer.h"

namespace primekv::server {

// One generation request after validation.
struct TurnRequest {
  std::vector<Token> prompt;
  std::string tenant;      // from the API key (TenantOfAuthorization)
  std::string cache_salt;  // prefix matching only among sessions made with the same salt
  std::string session_id;  // explicit `session`, or empty for prefix matching
  std::string press;       // press spec text
  double ratio = 0;
  int max_tokens = 0;
  std::string max_tokens_param = "max_tokens";  // the field that set it, for errors
  SamplerOptions sampler{0.0f, 0, 1.0f, 0};
  std::vector<std::string> stop;
};

struct TurnOutcome {
  std::string session_id;
  std::string text;
  std::vector<Token> tokens;    // the answer's ids, without an end-of-generation token
  std::vector<Token> appended;  // every id added to the session after the prompt (end included)
  std::string finish_reason;    // stop | length | cancelled
  int prompt_tokens = 0;
  int cached_tokens = 0;  // prompt tokens whose K/V came from the session (not prefilled)
  int prefilled_tokens = 0;
  // With a session store: whether the store holds this turn (false: a failed or refused save).
  std::optional<bool> saved;
  // Wall times: prefill without the compressions it ran, every compression of the turn, decode.
  double prefill_ms = 0, compress_ms = 0, decode_ms = 0;
};

// Returns false when the client is gone: generation stops.
using TextSink = std::function<bool(const std::string& delta)>;
// Asked before every decode step: false when the client is gone (generation stops).
using AliveCheck = std::function<bool()>;

}  // namespace primekv::server
