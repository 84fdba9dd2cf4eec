// Every position's logits of a GGUF model as llama.cpp computes them, for the engine's
// reference checks. Built outside the project against a llama.cpp checkout (build.sh), never
// linked into the engine.
//
//   arch_logits MODEL.gguf TOKENS N_CTX OUT.f32
//
// TOKENS: comma-separated ids, run as one batch at positions 0..n-1 with an F32 KV cache and no
// flash attention. N_CTX is the context llama.cpp is created with: it picks Phi-3's LongRoPE
// factors (long when N_CTX exceeds the model's original context). OUT gets n x vocab
// little-endian float32, row-major.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

namespace {

std::vector<llama_token> ParseTokens(const std::string& text) {
  std::vector<llama_token> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(static_cast<llama_token>(std::stol(text.substr(start, end - start))));
    start = end + 1;
  }
  return out;
}

void Quiet(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL.gguf TOKENS N_CTX OUT.f32\n", argv[0]);
    return 2;
  }
  llama_log_set(Quiet, nullptr);
  llama_backend_init();
  const std::vector<llama_token> tokens = ParseTokens(argv[2]);
  const int n = static_cast<int>(tokens.size());
  const int n_ctx = std::atoi(argv[3]);
  if (n == 0 || n_ctx < n) {
    std::fprintf(stderr, "need 1..N_CTX tokens\n");
    return 2;
  }

  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(n_ctx);
  cp.n_batch = static_cast<uint32_t>(n);
  cp.n_ubatch = static_cast<uint32_t>(n);
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn = false;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "cannot create a context\n");
    return 1;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    batch.token[i] = tokens[static_cast<size_t>(i)];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = n;
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "llama_decode failed\n");
    return 1;
  }
  FILE* out = std::fopen(argv[4], "wb");
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", argv[4]);
    return 1;
  }
  for (int i = 0; i < n; ++i) {
    const float* row = llama_get_logits_ith(ctx, i);
    if (!row || std::fwrite(row, sizeof(float), static_cast<size_t>(vocab), out) !=
                    static_cast<size_t>(vocab)) {
      std::fprintf(stderr, "no logits at %d\n", i);
      return 1;
    }
  }
  std::fclose(out);
  std::printf("%d positions x %d vocabulary -> %s\n", n, vocab, argv[4]);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
