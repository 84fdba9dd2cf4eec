// Hugging Face tokenizer folder -> TokenizerSpec, with the metadata choices llama.cpp's
// converter makes (token types, pre-tokenizer name, special ids, add_bos, chat template).
#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "primekv/tokenizer.h"

namespace primekv {
namespace {

using Json = nlohmann::json;

Result<Json> ReadJson(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot open " + path.string());
  std::stringstream buf;
  buf << in.rdbuf();
  Json j = Json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Error(path.string() + " is not valid JSON");
  return j;
}

// The pre-tokenizer regular expressions of the byte-level BPE families we implement, as
// tokenizer.json spells them, and the tokenizer.ggml.pre names llama.cpp gives them.
struct KnownSplit {
  std::string_view regex;
  std::string_view pre;
};
constexpr KnownSplit kKnownSplits[] = {
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "llama-bpe"},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "qwen2"},
};

// tokenizer.ggml.pre from the pre_tokenizer section: a Split with a known regex followed by a
// ByteLevel without its own regex, or a lone ByteLevel with the GPT-2 regex.
Result<std::string> PreTokenizerName(const Json& pre) {
  if (pre.is_object() && pre.value("type", "") == "ByteLevel" && pre.value("use_regex", true)) {
    return std::string("gpt-2");
  }
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers")) {
    for (const Json& p : pre["pretokenizers"]) {
      if (p.value("type", "") != "Split" || !p.contains("pattern")) continue;
      const std::string regex = p["pattern"].value("Regex", "");
      for (const KnownSplit& k : kKnownSplits) {
        if (regex == k.regex) return std::string(k.pre);
      }
      return Status::Error("unsupported pre-tokenizer regex " + regex +
                           " (known: the Llama 3 and Qwen2 splits)");
    }
  }
  return Status::Error("unsupported pre_tokenizer " + pre.dump().substr(0, 200));
}

// A token named in tokenizer_config.json: a string or an AddedToken object; "" if absent/null.
std::string ConfigToken(const Json& config, std::string_view key) {
  auto it = config.find(std::string(key));
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return it->value("content", "");
  return "";
}

// llama.cpp treats added tokens spelled like <|...|> as control tokens even when not special.
bool LooksSpecial(std::string_view t) {
  return (t.starts_with("<|") && t.ends_with("|>")) ||
         (t.starts_with("<\xEF\xBD\x9C") && t.ends_with("\xEF\xBD\x9C>")) || t == "<pad>" ||
         t == "<mask>";
}

// A byte-level BPE model without byte fallback; the pre-tokenizer and normalizer we implement.
// Errors are prefixed by the caller.
Status ReadModelKind(const Json& tj, TokenizerSpec& spec) {
  const Json& model = tj.contains("model") ? tj["model"] : Json();
  if (model.value("type", "") != "BPE") {
    return Status::Error("only BPE models are supported (got \"" + model.value("type", "?") +
                         "\")");
  }
  if (model.value("byte_fallback", false)) {
    return Status::Error(
        "SentencePiece-style BPE (byte_fallback) is not supported; "
        "convert such models with llama.cpp");
  }
  spec.model = "gpt2";
  PRIMEKV_ASSIGN_OR_RETURN(spec.pre, PreTokenizerName(tj.value("pre_tokenizer", Json())));
  const Json& norm = tj.contains("normalizer") ? tj["normalizer"] : Json();
  if (!norm.is_null() && norm.value("type", "") != "NFC") {
    return Status::Error("unsupported normalizer " + norm.dump().substr(0, 200));
  }
  if (norm.is_object() && spec.pre != "qwen2") {
    return Status::Error("an NFC normalizer is only supported with the qwen2 split");
  }
  return Status::Ok();
}

// Tokens and their types: the BPE vocabulary, then added tokens (which may overwrite), then
// "[PADn]" unused tokens up to vocab_size.
Status ReadVocabulary(const Json& tj, int vocab_size, TokenizerSpec& spec) {
  const Json& model = tj["model"];
  std::map<int64_t, std::pair<std::string, TokenType>> by_id;
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return Status::Error("model.vocab is missing");
  }
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      return Status::Error("vocab id of \"" + text + "\" is not a non-negative integer");
    }
    by_id[id.get<int64_t>()] = {text, TokenType::kNormal};
  }
  for (const Json& a : tj.value("added_tokens", Json::array())) {
    const std::string text = a.value("content", "");
    const int64_t id = a.value("id", int64_t{-1});
    if (id < 0 || text.empty()) return Status::Error("malformed added token " + a.dump());
    const bool control = a.value("special", false) || LooksSpecial(text);
    by_id[id] = {text, control ? TokenType::kControl : TokenType::kUserDefined};
  }
  const int64_t n_tokens = by_id.empty() ? 0 : by_id.rbegin()->first + 1;
  const int64_t n = std::max<int64_t>(n_tokens, vocab_size);
  if (n > (int64_t{1} << 24)) return Status::Error("vocabulary too large");
  spec.tokens.resize(static_cast<size_t>(n));
  spec.token_types.assign(static_cast<size_t>(n), static_cast<int32_t>(TokenType::kUnused));
  for (int64_t i = 0; i < n; ++i)
    spec.tokens[static_cast<size_t>(i)] = "[PAD" + std::to_string(i) + "]";
  for (const auto& [id, entry] : by_id) {
    spec.tokens[static_cast<size_t>(id)] = entry.first;
    spec.token_types[static_cast<size_t>(id)] = static_cast<int32_t>(entry.second);
  }
  return Status::Ok();
}

// Merges as "a b" strings or ["a", "b"] pairs.
Status ReadMerges(const Json& tj, TokenizerSpec& spec) {
  for (const Json& m : tj["model"].value("merges", Json::array())) {
    if (m.is_string()) {
      spec.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return Status::Error("malformed merge " + m.dump());
    }
  }
  return Status::Ok();
}

// add_bos: the config's flag, else whether the post-processor template starts with BOS.
bool AddsBos(const Json& tj, const Json& cfg) {
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
    return cfg["add_bos_token"].get<bool>();
  }
  bool add_bos = false;
  std::vector<const Json*> procs;
  const Json& post = tj.contains("post_processor") ? tj["post_processor"] : Json();
  if (post.is_object()) procs.push_back(&post);
  if (post.is_object() && post.contains("processors")) {
    for (const Json& p : post["processors"]) procs.push_back(&p);
  }
  for (const Json* p : procs) {
    if (p->value("type", "") != "TemplateProcessing" || !p->contains("single")) continue;
    const Json& single = (*p)["single"];
    if (!single.empty() && single[0].contains("SpecialToken")) add_bos = true;
  }
  return add_bos;
}

// Special ids, BOS/EOS flags and the chat template from tokenizer_config.json.
void ReadConfig(const Json& tj, const Json& cfg, TokenizerSpec& spec) {
  std::unordered_map<std::string, Token> ids;
  for (size_t i = 0; i < spec.tokens.size(); ++i)
    ids.emplace(spec.tokens[i], static_cast<Token>(i));
  auto id_of = [&](std::string_view key) -> Token {
    const std::string t = ConfigToken(cfg, key);
    auto it = ids.find(t);
    return t.empty() || it == ids.end() ? -1 : it->second;
  };
  spec.bos = id_of("bos_token");
  spec.eos = id_of("eos_token");
  spec.unk = id_of("unk_token");
  spec.pad = id_of("pad_token");
  spec.add_bos = AddsBos(tj, cfg);
  spec.add_eos = cfg.value("add_eos_token", false);
  spec.add_space_prefix = false;
  if (cfg.contains("chat_template")) {
    const Json& ct = cfg["chat_template"];
    if (ct.is_string()) {
      spec.chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const Json& t : ct) {
        if (t.value("name", "") == "default") spec.chat_template = t.value("template", "");
      }
    }
  }
}

Result<TokenizerSpec> SpecFromJson(const Json& tj, const Json& cfg, int vocab_size) {
  TokenizerSpec spec;
  PRIMEKV_RETURN_IF_ERROR(ReadModelKind(tj, spec));
  PRIMEKV_RETURN_IF_ERROR(ReadVocabulary(tj, vocab_size, spec));
  PRIMEKV_RETURN_IF_ERROR(ReadMerges(tj, spec));
  ReadConfig(tj, cfg, spec);
  PRIMEKV_RETURN_IF_ERROR(ValidateTokenizerSpec(spec));
  return spec;
}

}  // namespace

Result<TokenizerSpec> TokenizerSpecFromHfDir(const std::filesystem::path& dir, int vocab_size) {
  PRIMEKV_ASSIGN_OR_RETURN(const Json tj, ReadJson(dir / "tokenizer.json"));
  PRIMEKV_ASSIGN_OR_RETURN(const Json cfg, ReadJson(dir / "tokenizer_config.json"));
  auto spec = SpecFromJson(tj, cfg, vocab_size);
  if (!spec.ok()) return Status::Error((dir / "tokenizer.json").string() + ": " + spec.message());
  return spec;
}

}  // namespace primekv
