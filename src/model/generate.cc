#include "primekv/model/generate.h"

#include <string>

namespace primekv {

Result<DecodeResult> Decode(const Model& model, std::span<const float> logits,
                            const DecodeOptions& options, const std::function<Status(Token)>& feed,
                            const std::function<Status(int)>& after_feed) {
  DecodeResult r;
  r.tokens.reserve(static_cast<size_t>(std::max(0, options.reserve)));
  Sampler sampler(options.sampler);
  for (int i = 0; i < options.max_new_tokens; ++i) {
    auto sampled = sampler.Sample(logits);
    if (!sampled.ok())
      return Status::Error(options.label + "token " + std::to_string(i + 1) + ": " +
                           sampled.message());
    const Token next = *sampled;
    const bool end = model.tokenizer().IsEndOfGeneration(next);
    if (!end) r.tokens.push_back(next);
    const bool stop =
        end || (options.on_token && !options.on_token(next)) || i + 1 == options.max_new_tokens;
    r.stopped_at_end = end;
    if (stop && !options.feed_last) break;
    PRIMEKV_RETURN_IF_ERROR(feed(next));
    if (stop) break;
    if (after_feed) PRIMEKV_RETURN_IF_ERROR(after_feed(i));
  }
  return r;
}

}  // namespace primekv
