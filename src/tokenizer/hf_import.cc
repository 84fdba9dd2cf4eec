// Hugging Face tokenizer folder -> TokenizerSpec, with the metadata choices llama.cpp's
// converter makes (token types, pre-tokenizer name, special ids, add_bos, chat template).
// Both files are untrusted: they are read capped (regular files only), depth-checked before
// parsing, and every field is read through JsonNode, so a wrongly typed field is a message
// naming its path.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "primekv/util/file_io.h"
#include "primekv/util/json_read.h"
#include "primekv/util/text.h"
#include "primekv/tokenizer/tokenizer.h"

namespace primekv {
namespace {

using Json = nlohmann::json;

// Ids beyond the vocabulary entries and added tokens that an id may reach (ids need not be
// dense), unless --vocab asks for a larger vocabulary anyway. Without it one added token with
// id 16777215 would pad the vocabulary to 16.7M entries.
constexpr int64_t kMaxIdSlack = 1024;
// The largest vocabulary make-model writes (its --vocab limit).
constexpr int64_t kMaxVocabulary = int64_t{1} << 24;

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

std::string Quoted(std::string_view s) {
  std::string out(1, '"');  // appended: GCC 12 -Wrestrict false positive on "\"" + string
  out += Printable(s, 80);
  out += '"';
  return out;
}

// The "type" of a pre-tokenizer or normalizer object, for messages: never the object itself,
// which may be megabytes.
std::string Describe(const JsonNode& node) {
  if (!node.is_object()) return JsonKindName(node.raw());
  const auto it = node.raw().find("type");
  if (it == node.raw().end() || !it->is_string()) return "an object without a type";
  return "of type " + Quoted(it->get<std::string>());
}

// tokenizer.ggml.pre from the pre_tokenizer section: a Split with a known regex followed by a
// ByteLevel without its own regex, or a lone ByteLevel with the GPT-2 regex.
Result<std::string> PreTokenizerName(const std::optional<JsonNode>& pre) {
  if (!pre) return Status::Error("pre_tokenizer: missing (a byte-level BPE needs one)");
  if (pre->is_object()) {
    PRIMEKV_ASSIGN_OR_RETURN(const std::string type, pre->StringOr("type", ""));
    if (type == "ByteLevel") {
      PRIMEKV_ASSIGN_OR_RETURN(const bool use_regex, pre->BoolOr("use_regex", true));
      if (use_regex) return std::string("gpt-2");
    }
    if (type == "Sequence") {
      PRIMEKV_ASSIGN_OR_RETURN(const JsonNode list, pre->Field("pretokenizers"));
      PRIMEKV_ASSIGN_OR_RETURN(const std::vector<JsonNode> items, list.Elements());
      for (const JsonNode& p : items) {
        PRIMEKV_ASSIGN_OR_RETURN(const std::string ptype, p.StringOr("type", ""));
        PRIMEKV_ASSIGN_OR_RETURN(const auto pattern, p.Optional("pattern"));
        if (ptype != "Split" || !pattern) continue;
        PRIMEKV_ASSIGN_OR_RETURN(const std::string regex, pattern->StringOr("Regex", ""));
        for (const KnownSplit& k : kKnownSplits) {
          if (regex == k.regex) return std::string(k.pre);
        }
        return pattern->Error("unsupported pre-tokenizer regex " + Quoted(regex) +
                              " (known: the Llama 3 and Qwen2 splits)");
      }
    }
  }
  return pre->Error("unsupported pre-tokenizer " + Describe(*pre) +
                    " (known: ByteLevel, or a Sequence with the Llama 3 or Qwen2 Split)");
}

// A token named in tokenizer_config.json: a string or an AddedToken object; "" if absent/null.
Result<std::string> ConfigToken(const JsonNode& config, std::string_view key) {
  PRIMEKV_ASSIGN_OR_RETURN(const auto node, config.Optional(key));
  if (!node) return std::string();
  if (node->is_object()) return node->StringOr("content", "");
  return node->String();
}

// llama.cpp treats added tokens spelled like <|...|> as control tokens even when not special.
bool LooksSpecial(std::string_view t) {
  return (t.starts_with("<|") && t.ends_with("|>")) ||
         (t.starts_with("<\xEF\xBD\x9C") && t.ends_with("\xEF\xBD\x9C>")) || t == "<pad>" ||
         t == "<mask>";
}

// A byte-level BPE model without byte fallback; the pre-tokenizer and normalizer we implement.
Status ReadModelKind(const JsonNode& tj, TokenizerSpec& spec) {
  PRIMEKV_ASSIGN_OR_RETURN(const JsonNode model, tj.Field("model"));
  PRIMEKV_ASSIGN_OR_RETURN(const auto type, model.Optional("type"));
  if (!type) return model.Error("no type (only BPE models are supported)");
  PRIMEKV_ASSIGN_OR_RETURN(const std::string type_name, type->String());
  if (type_name != "BPE") {
    return type->Error("only BPE models are supported (got " + Quoted(type_name) + ")");
  }
  PRIMEKV_ASSIGN_OR_RETURN(const bool byte_fallback, model.BoolOr("byte_fallback", false));
  if (byte_fallback) {
    return Status::Error(
        "model.byte_fallback: SentencePiece-style BPE (byte_fallback) is not supported; "
        "convert such models with llama.cpp");
  }
  spec.model = "gpt2";
  PRIMEKV_ASSIGN_OR_RETURN(const auto pre, tj.Optional("pre_tokenizer"));
  PRIMEKV_ASSIGN_OR_RETURN(spec.pre, PreTokenizerName(pre));
  PRIMEKV_ASSIGN_OR_RETURN(const auto norm, tj.Optional("normalizer"));
  if (norm) {
    if (!norm->is_object()) {
      return norm->Error("expected an object, got " + JsonKindName(norm->raw()));
    }
    PRIMEKV_ASSIGN_OR_RETURN(const std::string norm_type, norm->StringOr("type", ""));
    if (norm_type != "NFC") {
      return norm->Error("unsupported normalizer " + Describe(*norm) + " (known: NFC)");
    }
    if (spec.pre != "qwen2") {
      return norm->Error("an NFC normalizer is only supported with the qwen2 split");
    }
  }
  return Status::Ok();
}

// Tokens and their types: the BPE vocabulary, then added tokens (which may overwrite), then
// "[PADn]" unused tokens up to vocab_size.
Status ReadVocabulary(const JsonNode& tj, int vocab_size, TokenizerSpec& spec) {
  PRIMEKV_ASSIGN_OR_RETURN(const JsonNode model, tj.Field("model"));
  PRIMEKV_ASSIGN_OR_RETURN(const JsonNode vocab, model.Field("vocab"));
  PRIMEKV_ASSIGN_OR_RETURN(const auto entries, vocab.Members());
  std::vector<JsonNode> added;
  PRIMEKV_ASSIGN_OR_RETURN(const auto added_node, tj.Optional("added_tokens"));
  if (added_node) {
    PRIMEKV_ASSIGN_OR_RETURN(added, added_node->Elements());
  }
  // Ids may leave small gaps, never more than kMaxIdSlack beyond what the entries fill.
  const int64_t max_id = std::min<int64_t>(
      kMaxVocabulary - 1,
      std::max<int64_t>(static_cast<int64_t>(entries.size() + added.size()) + kMaxIdSlack,
                        vocab_size) -
          1);
  std::map<int64_t, std::pair<std::string, TokenType>> by_id;
  for (const auto& [text, id_node] : entries) {
    PRIMEKV_ASSIGN_OR_RETURN(const int64_t id, id_node.Integer(0, max_id));
    by_id[id] = {text, TokenType::kNormal};
  }
  for (const JsonNode& a : added) {
    PRIMEKV_ASSIGN_OR_RETURN(const JsonNode content, a.Field("content"));
    PRIMEKV_ASSIGN_OR_RETURN(const std::string text, content.String());
    if (text.empty()) return content.Error("empty added token");
    PRIMEKV_ASSIGN_OR_RETURN(const JsonNode id_node, a.Field("id"));
    PRIMEKV_ASSIGN_OR_RETURN(const int64_t id, id_node.Integer(0, max_id));
    PRIMEKV_ASSIGN_OR_RETURN(const bool special, a.BoolOr("special", false));
    const bool control = special || LooksSpecial(text);
    by_id[id] = {text, control ? TokenType::kControl : TokenType::kUserDefined};
  }
  const int64_t n_tokens = by_id.empty() ? 0 : by_id.rbegin()->first + 1;
  const int64_t n = std::max<int64_t>(n_tokens, vocab_size);
  if (n > kMaxVocabulary) return Status::Error("vocabulary too large");
  spec.tokens.resize(static_cast<size_t>(n));
  spec.token_types.assign(static_cast<size_t>(n), static_cast<int32_t>(TokenType::kUnused));
  for (int64_t i = 0; i < n; ++i)
    spec.tokens[static_cast<size_t>(i)] = "[PAD" + std::to_string(i) + "]";
  for (auto& [id, entry] : by_id) {
    spec.tokens[static_cast<size_t>(id)] = std::move(entry.first);
    spec.token_types[static_cast<size_t>(id)] = static_cast<int32_t>(entry.second);
  }
  return Status::Ok();
}

// Merges as "a b" strings or ["a", "b"] pairs.
Status ReadMerges(const JsonNode& tj, TokenizerSpec& spec) {
  PRIMEKV_ASSIGN_OR_RETURN(const JsonNode model, tj.Field("model"));
  PRIMEKV_ASSIGN_OR_RETURN(const auto merges, model.Optional("merges"));
  if (!merges) return Status::Ok();
  PRIMEKV_ASSIGN_OR_RETURN(const std::vector<JsonNode> items, merges->Elements());
  spec.merges.reserve(items.size());
  for (const JsonNode& m : items) {
    if (m.is_string()) {
      spec.merges.push_back(m.raw().get<std::string>());
      continue;
    }
    if (m.is_array() && m.raw().size() == 2 && m.raw()[0].is_string() && m.raw()[1].is_string()) {
      spec.merges.push_back(m.raw()[0].get<std::string>() + " " + m.raw()[1].get<std::string>());
      continue;
    }
    return m.Error("expected \"a b\" or [\"a\", \"b\"], got " + JsonKindName(m.raw()));
  }
  return Status::Ok();
}

// add_bos from the post-processor: whether a TemplateProcessing's single template starts with a
// special token.
Result<bool> PostProcessorAddsBos(const JsonNode& tj) {
  PRIMEKV_ASSIGN_OR_RETURN(const auto post, tj.Optional("post_processor"));
  if (!post) return false;
  if (!post->is_object()) {
    return post->Error("expected an object, got " + JsonKindName(post->raw()));
  }
  std::vector<JsonNode> procs = {*post};
  PRIMEKV_ASSIGN_OR_RETURN(const auto list, post->Optional("processors"));
  if (list) {
    PRIMEKV_ASSIGN_OR_RETURN(const std::vector<JsonNode> items, list->Elements());
    procs.insert(procs.end(), items.begin(), items.end());
  }
  bool add_bos = false;
  for (const JsonNode& p : procs) {
    PRIMEKV_ASSIGN_OR_RETURN(const std::string type, p.StringOr("type", ""));
    if (type != "TemplateProcessing") continue;
    PRIMEKV_ASSIGN_OR_RETURN(const auto single, p.Optional("single"));
    if (!single) continue;
    PRIMEKV_ASSIGN_OR_RETURN(const std::vector<JsonNode> pieces, single->Elements());
    if (pieces.empty()) continue;
    if (!pieces[0].is_object()) {
      return pieces[0].Error("expected an object, got " + JsonKindName(pieces[0].raw()));
    }
    if (pieces[0].raw().contains("SpecialToken")) add_bos = true;
  }
  return add_bos;
}

// The chat template: a string, or a list of {name, template} with the "default" one used.
Result<std::string> ChatTemplate(const JsonNode& cfg) {
  PRIMEKV_ASSIGN_OR_RETURN(const auto ct, cfg.Optional("chat_template"));
  if (!ct) return std::string();
  if (ct->is_string()) return ct->String();
  if (!ct->is_array()) {
    return ct->Error("expected a string or a list of {name, template}, got " +
                     JsonKindName(ct->raw()));
  }
  PRIMEKV_ASSIGN_OR_RETURN(const std::vector<JsonNode> items, ct->Elements());
  std::string out;
  for (const JsonNode& t : items) {
    PRIMEKV_ASSIGN_OR_RETURN(const std::string name, t.StringOr("name", ""));
    PRIMEKV_ASSIGN_OR_RETURN(const std::string text, t.StringOr("template", ""));
    if (name == "default") out = text;
  }
  return out;
}

// Special ids, BOS/EOS flags and the chat template from tokenizer_config.json.
Status ReadConfig(const JsonNode& cfg, bool post_processor_adds_bos, TokenizerSpec& spec) {
  std::unordered_map<std::string_view, Token> ids;
  for (size_t i = 0; i < spec.tokens.size(); ++i)
    ids.emplace(spec.tokens[i], static_cast<Token>(i));
  auto id_of = [&](std::string_view key) -> Result<Token> {
    PRIMEKV_ASSIGN_OR_RETURN(const std::string t, ConfigToken(cfg, key));
    auto it = ids.find(t);
    return t.empty() || it == ids.end() ? Token{-1} : it->second;
  };
  PRIMEKV_ASSIGN_OR_RETURN(spec.bos, id_of("bos_token"));
  PRIMEKV_ASSIGN_OR_RETURN(spec.eos, id_of("eos_token"));
  PRIMEKV_ASSIGN_OR_RETURN(spec.unk, id_of("unk_token"));
  PRIMEKV_ASSIGN_OR_RETURN(spec.pad, id_of("pad_token"));
  // add_bos: the config's flag, else whether the post-processor template starts with BOS.
  PRIMEKV_ASSIGN_OR_RETURN(const auto add_bos, cfg.Optional("add_bos_token"));
  if (add_bos) {
    PRIMEKV_ASSIGN_OR_RETURN(spec.add_bos, add_bos->Bool());
  } else {
    spec.add_bos = post_processor_adds_bos;
  }
  PRIMEKV_ASSIGN_OR_RETURN(spec.add_eos, cfg.BoolOr("add_eos_token", false));
  spec.add_space_prefix = false;
  PRIMEKV_ASSIGN_OR_RETURN(spec.chat_template, ChatTemplate(cfg));
  return Status::Ok();
}

Status Prefixed(const Status& s, std::string_view name) {
  return s.ok() ? s : Status::Error(std::string(name) + ": " + s.message());
}

// Both documents parsed; errors name the file they come from (`tj_name`, `cfg_name`).
Result<TokenizerSpec> SpecFromTexts(std::string_view tj_text, const std::string& tj_name,
                                    std::string_view cfg_text, const std::string& cfg_name,
                                    int vocab_size) {
  PRIMEKV_ASSIGN_OR_RETURN(const Json tj_doc, ParseJson(tj_text, tj_name));
  PRIMEKV_ASSIGN_OR_RETURN(const Json cfg_doc, ParseJson(cfg_text, cfg_name));
  if (!tj_doc.is_object()) {
    return Status::Error(tj_name + ": expected an object, got " + JsonKindName(tj_doc));
  }
  if (!cfg_doc.is_object()) {
    return Status::Error(cfg_name + ": expected an object, got " + JsonKindName(cfg_doc));
  }
  const JsonNode tj(tj_doc, ""), cfg(cfg_doc, "");
  TokenizerSpec spec;
  PRIMEKV_RETURN_IF_ERROR(Prefixed(ReadModelKind(tj, spec), tj_name));
  PRIMEKV_RETURN_IF_ERROR(Prefixed(ReadVocabulary(tj, vocab_size, spec), tj_name));
  PRIMEKV_RETURN_IF_ERROR(Prefixed(ReadMerges(tj, spec), tj_name));
  auto post_adds_bos = PostProcessorAddsBos(tj);
  PRIMEKV_RETURN_IF_ERROR(Prefixed(post_adds_bos.status(), tj_name));
  PRIMEKV_RETURN_IF_ERROR(Prefixed(ReadConfig(cfg, *post_adds_bos, spec), cfg_name));
  PRIMEKV_RETURN_IF_ERROR(Prefixed(ValidateTokenizerSpec(spec), tj_name));
  return spec;
}

}  // namespace

Result<TokenizerSpec> TokenizerSpecFromHfJson(std::string_view tokenizer_json,
                                              std::string_view config_json, int vocab_size) {
  return SpecFromTexts(tokenizer_json, "tokenizer.json", config_json, "tokenizer_config.json",
                       vocab_size);
}

Result<TokenizerSpec> TokenizerSpecFromHfDir(const std::filesystem::path& dir, int vocab_size) {
  const std::string tj_path = (dir / "tokenizer.json").string();
  const std::string cfg_path = (dir / "tokenizer_config.json").string();
  // Regular files only (a FIFO would block), capped in size.
  PRIMEKV_ASSIGN_OR_RETURN(const std::string tj_text, ReadFileCapped(tj_path, "--hf-tokenizer"));
  PRIMEKV_ASSIGN_OR_RETURN(const std::string cfg_text, ReadFileCapped(cfg_path, "--hf-tokenizer"));
  return SpecFromTexts(tj_text, tj_path, cfg_text, cfg_path, vocab_size);
}

}  // namespace primekv
