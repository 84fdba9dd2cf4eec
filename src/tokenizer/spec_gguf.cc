#include <optional>
#include <string>

#include "primekv/gguf.h"
#include "primekv/tokenizer.h"

namespace primekv {
namespace {

Status WrongType(std::string_view key, std::string_view expected) {
  return Status::Error(std::string(key) + " has the wrong type (expected " + std::string(expected) +
                       ")");
}

// Reads an optional value with `get`; present with another type is an error.
template <typename T, typename Getter>
Status ReadOptional(const GgufFile& file, std::string_view key, std::string_view expected,
                    Getter get, std::optional<T>& out) {
  out.reset();
  if (file.Find(key) == nullptr) return Status::Ok();
  out = get(key);
  if (!out) return WrongType(key, expected);
  return Status::Ok();
}

}  // namespace

Result<TokenizerSpec> TokenizerSpecFromGguf(const GgufFile& file) {
  TokenizerSpec spec;
  auto get_string = [&](std::string_view k) { return file.GetString(k); };
  auto get_int = [&](std::string_view k) { return file.GetInt(k); };
  auto get_bool = [&](std::string_view k) { return file.GetBool(k); };

  std::optional<std::string> str;
  if (Status s = ReadOptional(file, "tokenizer.ggml.model", "string", get_string, str); !s.ok()) {
    return s;
  }
  if (!str) return Status::Error("tokenizer.ggml.model is missing");
  spec.model = *str;
  if (Status s = ReadOptional(file, "tokenizer.ggml.pre", "string", get_string, str); !s.ok()) {
    return s;
  }
  spec.pre = str.value_or("default");

  std::optional<std::vector<std::string>> strings;
  auto get_strings = [&](std::string_view k) { return file.GetStringArray(k); };
  if (Status s = ReadOptional(file, "tokenizer.ggml.tokens", "string array", get_strings, strings);
      !s.ok()) {
    return s;
  }
  if (!strings) return Status::Error("tokenizer.ggml.tokens is missing");
  spec.tokens = std::move(*strings);
  if (Status s = ReadOptional(file, "tokenizer.ggml.merges", "string array", get_strings, strings);
      !s.ok()) {
    return s;
  }
  if (strings) spec.merges = std::move(*strings);

  std::optional<std::vector<float>> floats;
  auto get_floats = [&](std::string_view k) { return file.GetFloatArray(k); };
  if (Status s = ReadOptional(file, "tokenizer.ggml.scores", "float array", get_floats, floats);
      !s.ok()) {
    return s;
  }
  if (floats) spec.scores = std::move(*floats);

  std::optional<std::vector<int64_t>> ints;
  auto get_ints = [&](std::string_view k) { return file.GetIntArray(k); };
  if (Status s = ReadOptional(file, "tokenizer.ggml.token_type", "integer array", get_ints, ints);
      !s.ok()) {
    return s;
  }
  if (ints) {
    spec.token_types.reserve(ints->size());
    for (size_t i = 0; i < ints->size(); ++i) {
      const int64_t v = (*ints)[i];
      if (v < 0 || v > static_cast<int64_t>(TokenType::kByte)) {
        return Status::Error("tokenizer.ggml.token_type[" + std::to_string(i) +
                             "] = " + std::to_string(v) + " is not a valid token type (0..6)");
      }
      spec.token_types.push_back(static_cast<int32_t>(v));
    }
  }

  const auto n = static_cast<int64_t>(spec.tokens.size());
  struct IdKey {
    std::string_view key;
    Token* out;
  };
  const IdKey id_keys[] = {{"tokenizer.ggml.bos_token_id", &spec.bos},
                           {"tokenizer.ggml.eos_token_id", &spec.eos},
                           {"tokenizer.ggml.eot_token_id", &spec.eot},
                           {"tokenizer.ggml.unknown_token_id", &spec.unk},
                           {"tokenizer.ggml.padding_token_id", &spec.pad}};
  for (const IdKey& k : id_keys) {
    std::optional<int64_t> id;
    if (Status s = ReadOptional(file, k.key, "integer", get_int, id); !s.ok()) return s;
    // Converters write 0xFFFFFFFF (or another out-of-range value) for "no such token".
    *k.out = id && *id >= 0 && *id < n ? static_cast<Token>(*id) : -1;
  }
  if (file.Find("tokenizer.ggml.eot_token_id") == nullptr) {
    for (std::string_view text : {"<|eot_id|>", "<|im_end|>", "<|end|>"}) {
      for (int64_t i = 0; i < n && spec.eot < 0; ++i) {
        if (spec.tokens[static_cast<size_t>(i)] == text) spec.eot = static_cast<Token>(i);
      }
    }
  }

  const bool llama = spec.model == "llama";
  std::optional<bool> flag;
  if (Status s = ReadOptional(file, "tokenizer.ggml.add_bos_token", "bool", get_bool, flag);
      !s.ok()) {
    return s;
  }
  spec.add_bos = flag.value_or(llama);
  if (Status s = ReadOptional(file, "tokenizer.ggml.add_eos_token", "bool", get_bool, flag);
      !s.ok()) {
    return s;
  }
  spec.add_eos = flag.value_or(false);
  if (Status s = ReadOptional(file, "tokenizer.ggml.add_space_prefix", "bool", get_bool, flag);
      !s.ok()) {
    return s;
  }
  spec.add_space_prefix = flag.value_or(llama);
  if (Status s = ReadOptional(file, "tokenizer.chat_template", "string", get_string, str);
      !s.ok()) {
    return s;
  }
  spec.chat_template = str.value_or("");

  if (Status s = ValidateTokenizerSpec(spec); !s.ok()) return s;
  return spec;
}

}  // namespace primekv
