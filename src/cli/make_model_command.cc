#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "primekv/model/random_model.h"

namespace primekv::cli {

namespace {

// Experts of a qwen3moe model (other architectures have none), with make-model's defaults.
struct ExpertOptions {
  int count = 8;
  int used = 2;
  int ffn = 128;
};

}  // namespace

void AddMakeModel(CLI::App& app, Runner& run) {
  auto s = std::make_shared<RandomModelSpec>();
  auto out = std::make_shared<std::string>();
  auto type = std::make_shared<std::string>("F32");
  auto rope_scaling = std::make_shared<std::string>("none");
  auto arch = std::make_shared<std::string>("llama");
  auto experts = std::make_shared<ExpertOptions>();
  auto* cmd = app.add_subcommand("make-model", "Write a random-weight GGUF model of a given shape");
  cmd->add_option("--arch", *arch,
                  "llama | qwen2 | qwen3 | qwen3moe | granite | phi3 | gemma | gemma2")
      ->capture_default_str();
  cmd->add_option("--layers", s->n_layers)->check(IntegerIn(1, 4096))->capture_default_str();
  cmd->add_option("--d-model", s->d_model)->check(IntegerIn(1, 1 << 20))->capture_default_str();
  cmd->add_option("--heads", s->n_heads)->check(IntegerIn(1, 65536))->capture_default_str();
  cmd->add_option("--kv-heads", s->n_kv_heads)->check(IntegerIn(1, 65536))->capture_default_str();
  cmd->add_option("--head-dim", s->head_dim)->check(IntegerIn(2, 65536))->capture_default_str();
  cmd->add_option("--ffn", s->d_ff)->check(IntegerIn(1, 1 << 24))->capture_default_str();
  cmd->add_option("--vocab", s->vocab_size)->check(IntegerIn(1, 1 << 24))->capture_default_str();
  cmd->add_option("--experts", experts->count, "qwen3moe: experts per layer")
      ->check(IntegerIn(0, 4096))
      ->capture_default_str();
  cmd->add_option("--experts-used", experts->used, "qwen3moe: experts routed per token")
      ->check(IntegerIn(0, 4096))
      ->capture_default_str();
  cmd->add_option("--expert-ffn", experts->ffn, "qwen3moe: FFN width of one expert")
      ->check(IntegerIn(0, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--context", s->max_context)->check(IntegerIn(1, 1 << 28))->capture_default_str();
  cmd->add_option(
         "--type", *type,
         "F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | IQ4_NL (row lengths multiples "
         "of 32) | Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_XS (multiples of 256) | Q4_K_M (Q4_K "
         "with llama.cpp's Q5_K/Q6_K choices)")
      ->capture_default_str();
  cmd->add_option("--seed", s->seed)->check(Seed())->capture_default_str();
  cmd->add_option("--tokenizer", s->tokenizer, "llama | gpt2")->capture_default_str();
  cmd->add_option("--hf-tokenizer", s->hf_tokenizer,
                  "Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json) to "
                  "import with its chat template; --vocab then only pads the vocabulary");
  cmd->add_option("--rope-base", s->rope_base)
      ->check(RealIn(0, 1e30, /*lo_open=*/true))
      ->capture_default_str();
  cmd->add_option("--rope-scaling", *rope_scaling, "none | llama3")->capture_default_str();
  cmd->add_flag("--tied", s->tied_embeddings, "Share the output matrix with the embeddings");
  cmd->add_option("--sliding-window", s->sliding_window,
                  "gemma2 (even layers), phi3 (every layer): tokens a query sees; 0 = none")
      ->check(IntegerIn(0, kMaxSlidingWindow))
      ->capture_default_str();
  cmd->add_option("--long-rope", s->rope_original_context,
                  "phi3: write LongRoPE factors for this original context (below --context)")
      // At 1 the attention factor, sqrt(1 + ln(scale) / ln(original)), divides by ln 1 = 0.
      ->check(IntegerIn(2, 1 << 28));
  cmd->add_option("-o,--output", *out, "Output GGUF file")->required();
  cmd->callback([&run, s, out, type, rope_scaling, arch, experts] {
    run = [s, out, type, rope_scaling, arch, experts] {
      s->q4_k_m = *type == "Q4_K_M";
      auto t = ParseGgmlType(s->q4_k_m ? std::string("Q4_K") : *type);
      if (!t) return Fail("unknown --type '" + *type + "'");
      s->type = *t;
      s->long_rope = s->rope_original_context > 0;
      if (*rope_scaling != "none" && *rope_scaling != "llama3") {
        return Fail("unknown --rope-scaling '" + *rope_scaling + "' (none, llama3)");
      }
      s->llama3_rope_scaling = *rope_scaling == "llama3";
      const std::optional<Arch> a = ArchFromName(*arch);
      if (!a)
        return Fail("make-model: unknown --arch '" + *arch +
                    "' (llama, qwen2, qwen3, qwen3moe, granite, phi3, gemma, gemma2)");
      s->arch = *a;
      if (*a == Arch::kQwen3Moe) {
        s->n_experts = experts->count;
        s->n_experts_used = experts->used;
        s->d_ff_expert = experts->ffn;
      }
      if (Status st = WriteRandomModel(*s, *out); !st.ok()) return Fail(st.message());
      std::fprintf(stderr, "wrote %s\n", out->c_str());
      return 0;
    };
  });
}

}  // namespace primekv::cli
