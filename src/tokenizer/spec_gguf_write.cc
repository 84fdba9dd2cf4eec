// TokenizerSpec -> GGUF metadata (the inverse of spec_gguf.cc).
#include <utility>

#include "primekv/gguf/gguf.h"
#include "primekv/tokenizer/tokenizer.h"

namespace primekv {

void AddTokenizerMetadata(GgufWriter& w, const TokenizerSpec& t) {
  w.Add("tokenizer.ggml.model", GgufValue::String(t.model));
  if (!t.pre.empty()) w.Add("tokenizer.ggml.pre", GgufValue::String(t.pre));
  w.Add("tokenizer.ggml.tokens", GgufValue::StringArray(t.tokens));
  if (!t.scores.empty()) w.Add("tokenizer.ggml.scores", GgufValue::Float32Array(t.scores));
  if (!t.token_types.empty()) {
    w.Add("tokenizer.ggml.token_type", GgufValue::Int32Array(t.token_types));
  }
  if (!t.merges.empty()) w.Add("tokenizer.ggml.merges", GgufValue::StringArray(t.merges));
  const std::pair<const char*, Token> ids[] = {{"tokenizer.ggml.bos_token_id", t.bos},
                                               {"tokenizer.ggml.eos_token_id", t.eos},
                                               {"tokenizer.ggml.eot_token_id", t.eot},
                                               {"tokenizer.ggml.unknown_token_id", t.unk},
                                               {"tokenizer.ggml.padding_token_id", t.pad}};
  for (const auto& [key, id] : ids) {
    if (id >= 0) w.Add(key, GgufValue::Uint32(static_cast<uint32_t>(id)));
  }
  w.Add("tokenizer.ggml.add_bos_token", GgufValue::Bool(t.add_bos));
  if (t.add_eos) w.Add("tokenizer.ggml.add_eos_token", GgufValue::Bool(true));
  if (t.model == "llama") {
    w.Add("tokenizer.ggml.add_space_prefix", GgufValue::Bool(t.add_space_prefix));
  }
  if (!t.chat_template.empty()) {
    w.Add("tokenizer.chat_template", GgufValue::String(t.chat_template));
  }
}

}  // namespace primekv
