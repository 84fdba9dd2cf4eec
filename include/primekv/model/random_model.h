// Random-weight GGUF models of real shapes, so tests and benchmarks need no downloads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "primekv/model/model.h"
#include "primekv/util/dtype.h"
#include "primekv/util/status.h"

namespace primekv {

// The shape is a ModelConfig. The writer reads arch, n_layers, d_model, n_heads, n_kv_heads,
// head_dim, d_ff, vocab_size, max_context, rope_base, tied_embeddings and, for qwen3moe, the
// three expert fields; the rest follows from the architecture as in real files (rope_dim =
// head_dim, rms_eps 1e-5 for llama and 1e-6 otherwise, qwen2 QKV biases, qwen3 q/k norms), and
// Model::Load fills it back in.
struct RandomModelSpec : ModelConfig {
  RandomModelSpec();  // llama, 2 layers, d_model 256, 4 heads (2 KV) of 64, FFN 688, vocab 1024
  GgmlType type = GgmlType::kF32;
  uint64_t seed = 1;
  std::string tokenizer = "llama";  // llama | gpt2: a synthetic tokenizer of vocab_size tokens
  // A Hugging Face tokenizer folder to import instead (vocab_size then only pads it).
  std::string hf_tokenizer;
  bool llama3_rope_scaling = false;
  // With type Q4_K: llama.cpp's Q4_K_M choice of Q5_K / Q6_K for some tensors.
  bool q4_k_m = false;
  // ModelConfig's sliding_window, long_rope (phi3: rope_factors_long/short with
  // rope_original_context) are written as the keys and tensors real files carry.
};

Status WriteRandomModel(const RandomModelSpec& spec, const std::filesystem::path& out);

}  // namespace primekv
