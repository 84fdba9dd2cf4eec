// Random-model fixtures shared by the tests: the small shapes they use, and writing plus
// loading in one step.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/model/random_model.h"
#include "primekv/util/status.h"

namespace primekv {

// Built with the sanitizers (PRIMEKV_TEST_SANITIZED, tests/CMakeLists.txt): tests whose long
// workloads repeat the same code paths pick shorter ones there.
#if defined(PRIMEKV_TEST_SANITIZED)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// A one-block llama small enough for end-to-end runs: d_model 64, 2 heads sharing 1 KV head of
// 32, FFN 128, a synthetic vocabulary of 1024, context 2048.
inline RandomModelSpec TinyLlamaSpec(int n_layers = 1, uint64_t seed = 1) {
  RandomModelSpec s;
  s.n_layers = n_layers;
  s.d_model = 64;
  s.n_heads = 2;
  s.n_kv_heads = 1;
  s.head_dim = 32;
  s.d_ff = 128;
  s.vocab_size = 1024;
  s.seed = seed;
  return s;
}

// Two blocks of 2 heads with a KV head each (32 wide), d_model 64, FFN 128, a synthetic
// vocabulary of 512: the session-file tests' model (every KV head its own query head).
inline RandomModelSpec SessionFileSpec(int n_layers = 2) {
  RandomModelSpec s;
  s.n_layers = n_layers;
  s.d_model = 64;
  s.n_heads = 2;
  s.n_kv_heads = 2;
  s.head_dim = 32;
  s.d_ff = 128;
  s.vocab_size = 512;
  return s;
}

// A two-block llama with grouped heads (4 query heads sharing 2 KV heads of 32), d_model 128,
// FFN 256, a synthetic vocabulary of 512: every press and compression mode has work to do.
inline RandomModelSpec SmallLlamaSpec(uint64_t seed = 1) {
  RandomModelSpec s;
  s.n_layers = 2;
  s.d_model = 128;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 32;
  s.d_ff = 256;
  s.vocab_size = 512;
  s.seed = seed;
  return s;
}

// A two-block llama with grouped heads (4 query heads sharing 2 KV heads of 16), d_model 64,
// FFN 128, a synthetic vocabulary of 300: the smallest shape where per-head and per-layer
// press choices differ.
inline RandomModelSpec SmallGqaSpec(uint64_t seed) {
  RandomModelSpec s;
  s.n_layers = 2;
  s.d_model = 64;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 16;
  s.d_ff = 128;
  s.vocab_size = 300;
  s.seed = seed;
  return s;
}

// The cheapest llama that still has a KV cache, for 16K-token prefills: one block of 2 heads
// sharing 1 KV head of 16, d_model 32, FFN 64, a synthetic vocabulary of 512, context 32768.
inline RandomModelSpec LongPrefillSpec(uint64_t seed = 12) {
  RandomModelSpec s;
  s.n_layers = 1;
  s.d_model = 32;
  s.n_heads = 2;
  s.n_kv_heads = 1;
  s.head_dim = 16;
  s.d_ff = 64;
  s.vocab_size = 512;
  s.max_context = 32768;
  s.seed = seed;
  return s;
}

// A qwen3moe of the given shape: 4 heads sharing 2 KV heads, n_experts experts of width
// d_ff_expert per layer, n_used routed per token.
inline RandomModelSpec MoeSpec(int n_layers, int d_model, int head_dim, int n_experts, int n_used,
                               int d_ff_expert) {
  RandomModelSpec s;
  s.arch = Arch::kQwen3Moe;
  s.n_layers = n_layers;
  s.d_model = d_model;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = head_dim;
  s.n_experts = n_experts;
  s.n_experts_used = n_used;
  s.d_ff_expert = d_ff_expert;
  return s;
}

// `n` token ids drawn uniformly from [lo, hi] by a generator seeded with `seed`.
inline std::vector<Token> RandomTokenIds(int n, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<Token> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

// Writes `spec` to `path` and loads it; a failure aborts with its message (fixtures built in
// static initialisers have no test to fail).
inline Model WriteAndLoad(const RandomModelSpec& spec, const std::filesystem::path& path) {
  const Status written = WriteRandomModel(spec, path);
  Check(written.ok(), written.ok() ? "" : written.message().c_str());
  auto model = Model::Load(path);
  Check(model.ok(), model.ok() ? "" : model.message().c_str());
  return std::move(model).value();
}

// The same through a file of this process's own (`name` behind the pid in the temp directory),
// removed once it is mapped: the mapping outlives the name, and no run leaves a file behind.
inline Model WriteLoadAndRemove(const RandomModelSpec& spec, const std::string& name) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name);
  Model model = WriteAndLoad(spec, path);
  std::filesystem::remove(path);
  return model;
}

}  // namespace primekv
