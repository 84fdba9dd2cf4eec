#include <optional>
#include <string>

#include "primekv/gguf/gguf.h"
#include "primekv/tokenizer/tokenizer.h"
#include "tokenizer/pretokenizer.h"

namespace primekv {
namespace {

// Optional keys of one file: absent gives nullopt, present with another type is an error.
class KeyReader {
 public:
  explicit KeyReader(const GgufFile& file) : file_(file) {}

  Result<std::optional<std::string>> String(std::string_view key) const {
    return Read(key, "string", [&] { return file_.GetString(key); });
  }
  Result<std::optional<std::vector<std::string>>> Strings(std::string_view key) const {
    return Read(key, "string array", [&] { return file_.GetStringArray(key); });
  }
  Result<std::optional<std::vector<float>>> Floats(std::string_view key) const {
    return Read(key, "float array", [&] { return file_.GetFloatArray(key); });
  }
  Result<std::optional<std::vector<int64_t>>> Ints(std::string_view key) const {
    return Read(key, "integer array", [&] { return file_.GetIntArray(key); });
  }
  Result<std::optional<int64_t>> Int(std::string_view key) const {
    return Read(key, "integer", [&] { return file_.GetInt(key); });
  }
  Result<std::optional<bool>> Bool(std::string_view key) const {
    return Read(key, "bool", [&] { return file_.GetBool(key); });
  }

 private:
  template <typename Get>
  Result<decltype(std::declval<Get>()())> Read(std::string_view key, std::string_view expected,
                                               Get get) const {
    using Optional = decltype(get());
    if (file_.Find(key) == nullptr) return Optional{};
    Optional out = get();
    if (!out) {
      return Status::Error(std::string(key) + " has the wrong type (expected " +
                           std::string(expected) + ")");
    }
    return out;
  }
  const GgufFile& file_;
};

Status ReadTokenTypes(const KeyReader& keys, TokenizerSpec& spec) {
  PRIMEKV_ASSIGN_OR_RETURN(const auto ints, keys.Ints("tokenizer.ggml.token_type"));
  if (!ints) return Status::Ok();
  spec.token_types.reserve(ints->size());
  for (size_t i = 0; i < ints->size(); ++i) {
    const int64_t v = (*ints)[i];
    if (v < 0 || v > static_cast<int64_t>(TokenType::kByte)) {
      return Status::Error("tokenizer.ggml.token_type[" + std::to_string(i) +
                           "] = " + std::to_string(v) + " is not a valid token type (0..6)");
    }
    spec.token_types.push_back(static_cast<int32_t>(v));
  }
  return Status::Ok();
}

// BOS, EOS, EOT, UNK and PAD ids; -1 when absent or out of range. Without an EOT key, the
// EOT is the first of the usual end-of-turn tokens the vocabulary has.
Status ReadSpecialIds(const GgufFile& file, const KeyReader& keys, TokenizerSpec& spec) {
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
    PRIMEKV_ASSIGN_OR_RETURN(const std::optional<int64_t> id, keys.Int(k.key));
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
  return Status::Ok();
}

// add_bos / add_space_prefix default to true for SentencePiece ("llama") vocabularies; add_bos
// also for the byte-level pre-tokenizers llama.cpp adds BOS for (PreTokenizerAddsBos).
Status ReadFlagsAndTemplate(const KeyReader& keys, TokenizerSpec& spec) {
  const bool llama = spec.model == "llama";
  PRIMEKV_ASSIGN_OR_RETURN(const auto add_bos, keys.Bool("tokenizer.ggml.add_bos_token"));
  spec.add_bos = add_bos.value_or(llama || (spec.model == "gpt2" && PreTokenizerAddsBos(spec.pre)));
  PRIMEKV_ASSIGN_OR_RETURN(const auto add_eos, keys.Bool("tokenizer.ggml.add_eos_token"));
  spec.add_eos = add_eos.value_or(false);
  PRIMEKV_ASSIGN_OR_RETURN(const auto space, keys.Bool("tokenizer.ggml.add_space_prefix"));
  spec.add_space_prefix = space.value_or(llama);
  PRIMEKV_ASSIGN_OR_RETURN(const auto chat_template, keys.String("tokenizer.chat_template"));
  spec.chat_template = chat_template.value_or("");
  return Status::Ok();
}

}  // namespace

Result<TokenizerSpec> TokenizerSpecFromGguf(const GgufFile& file) {
  const KeyReader keys(file);
  TokenizerSpec spec;
  PRIMEKV_ASSIGN_OR_RETURN(const auto model, keys.String("tokenizer.ggml.model"));
  if (!model) return Status::Error("tokenizer.ggml.model is missing");
  spec.model = *model;
  PRIMEKV_ASSIGN_OR_RETURN(const auto pre, keys.String("tokenizer.ggml.pre"));
  spec.pre = pre.value_or("default");
  PRIMEKV_ASSIGN_OR_RETURN(auto tokens, keys.Strings("tokenizer.ggml.tokens"));
  if (!tokens) return Status::Error("tokenizer.ggml.tokens is missing");
  spec.tokens = std::move(*tokens);
  PRIMEKV_ASSIGN_OR_RETURN(auto merges, keys.Strings("tokenizer.ggml.merges"));
  if (merges) spec.merges = std::move(*merges);
  PRIMEKV_ASSIGN_OR_RETURN(auto scores, keys.Floats("tokenizer.ggml.scores"));
  if (scores) spec.scores = std::move(*scores);
  PRIMEKV_RETURN_IF_ERROR(ReadTokenTypes(keys, spec));
  PRIMEKV_RETURN_IF_ERROR(ReadSpecialIds(file, keys, spec));
  PRIMEKV_RETURN_IF_ERROR(ReadFlagsAndTemplate(keys, spec));
  PRIMEKV_RETURN_IF_ERROR(ValidateTokenizerSpec(spec));
  return spec;
}

}  // namespace primekv
