#include "primekv/generate.h"

#include <chrono>
#include <string>

namespace primekv {

namespace {
double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Result<GenerateResult> Generate(const Model& model, KvCache& cache, std::span<const Token> prompt,
                                const GenerateOptions& options, ThreadPool& pool,
                                ForwardWorkspace& ws) {
  if (prompt.empty()) return Status::Error("generate: empty prompt");
  const int vocab = model.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(vocab));
  MatView<float> out(logits.data(), 1, vocab);
  GenerateResult result;
  result.tokens.reserve(static_cast<size_t>(std::max(0, options.max_new_tokens)));

  auto t0 = std::chrono::steady_clock::now();
  if (Status s = model.Forward(prompt, cache, {}, out, pool, ws); !s.ok()) return s;
  result.prefill_ms = MsSince(t0);

  Sampler sampler(options.sampler);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < options.max_new_tokens; ++i) {
    auto sampled = sampler.Sample(logits);
    if (!sampled.ok())
      return Status::Error("token " + std::to_string(i + 1) + ": " + sampled.message());
    const Token next = *sampled;
    result.tokens.push_back(next);
    if (options.on_token && !options.on_token(next)) break;
    if (options.stop_at_end_of_generation && model.tokenizer().IsEndOfGeneration(next)) {
      result.stopped_at_end = true;
      break;
    }
    if (i + 1 == options.max_new_tokens) break;  // the last token needs no forward
    if (Status s = model.Forward(std::span<const Token>(&next, 1), cache, {}, out, pool, ws);
        !s.ok()) {
      return s;
    }
  }
  result.decode_ms = MsSince(t0);
  return result;
}

}  // namespace primekv
