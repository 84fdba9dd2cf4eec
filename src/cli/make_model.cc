#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "primekv/model.h"

namespace primekv::cli {

void AddMakeModel(CLI::App& app, Runner& run) {
  auto s = std::make_shared<RandomModelSpec>();
  auto out = std::make_shared<std::string>();
  auto type = std::make_shared<std::string>("F32");
  auto rope_scaling = std::make_shared<std::string>("none");
  auto* cmd = app.add_subcommand("make-model", "Write a random-weight GGUF model of a given shape");
  cmd->add_option("--arch", s->arch, "llama | qwen2 | qwen3")->capture_default_str();
  cmd->add_option("--layers", s->n_layers)->capture_default_str();
  cmd->add_option("--d-model", s->d_model)->capture_default_str();
  cmd->add_option("--heads", s->n_heads)->capture_default_str();
  cmd->add_option("--kv-heads", s->n_kv_heads)->capture_default_str();
  cmd->add_option("--head-dim", s->head_dim)->capture_default_str();
  cmd->add_option("--ffn", s->d_ff)->capture_default_str();
  cmd->add_option("--vocab", s->vocab_size)->capture_default_str();
  cmd->add_option("--context", s->context)->capture_default_str();
  cmd->add_option("--type", *type, "F32 | F16 | BF16 | Q8_0 | Q4_0")->capture_default_str();
  cmd->add_option("--seed", s->seed)->capture_default_str();
  cmd->add_option("--tokenizer", s->tokenizer, "llama | gpt2")->capture_default_str();
  cmd->add_option("--hf-tokenizer", s->hf_tokenizer,
                  "Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json) to "
                  "import with its chat template; --vocab then only pads the vocabulary");
  cmd->add_option("--rope-base", s->rope_base)->capture_default_str();
  cmd->add_option("--rope-scaling", *rope_scaling, "none | llama3")->capture_default_str();
  cmd->add_flag("--tied", s->tied_embeddings, "Share the output matrix with the embeddings");
  cmd->add_option("-o,--output", *out, "Output GGUF file")->required();
  cmd->callback([&run, s, out, type, rope_scaling] {
    run = [s, out, type, rope_scaling] {
      auto t = ParseGgmlType(*type);
      if (!t) return Fail("unknown --type '" + *type + "'");
      s->type = *t;
      if (*rope_scaling != "none" && *rope_scaling != "llama3") {
        return Fail("unknown --rope-scaling '" + *rope_scaling + "' (none, llama3)");
      }
      s->llama3_rope_scaling = *rope_scaling == "llama3";
      if (Status st = WriteRandomModel(*s, *out); !st.ok()) return Fail(st.message());
      std::fprintf(stderr, "wrote %s\n", out->c_str());
      return 0;
    };
  });
}

}  // namespace primekv::cli
