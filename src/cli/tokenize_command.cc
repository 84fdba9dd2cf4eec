// primekv tokenize: ids and pieces of a text under a GGUF's tokenizer. Only the tokenizer
// metadata is read, so a vocabulary-only GGUF (no tensors) works.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "primekv/gguf/gguf.h"
#include "primekv/tokenizer/tokenizer.h"
#include "primekv/util/text.h"

namespace primekv::cli {

namespace {

struct TokenizeArgs {
  std::string model;
  std::string prompt;
  bool json = false;
  bool no_bos = false;
  bool no_special = false;
};

// A piece for the terminal: control characters and bytes that are not whole UTF-8 characters
// (a byte token may hold part of one) are escaped as \xNN.
std::string Escape(std::string_view s) {
  std::string out;
  for (size_t pos = 0; pos < s.size(); ++pos) {
    const char c = s[pos];
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x80) {
      if (const size_t len = Utf8SequenceLength(s, pos); len > 0) {
        out.append(s.substr(pos, len));
        pos += len - 1;
        continue;
      }
    }
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (b < 0x20 || b >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", b);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

int Run(const TokenizeArgs& a) {
  auto file = GgufFile::Open(a.model);
  if (!file.ok()) return Fail(file.message());
  auto spec = TokenizerSpecFromGguf(*file);
  if (!spec.ok()) return Fail(a.model + ": tokenizer: " + spec.message());
  auto tok = Tokenizer::Create(std::move(spec).value());
  if (!tok.ok()) return Fail(a.model + ": tokenizer: " + tok.message());
  const std::vector<Token> ids = tok->Encode(a.prompt, !a.no_bos, !a.no_special);
  if (a.json) {
    nlohmann::json j;
    j["model"] = tok->spec().model;
    j["pre"] = tok->spec().pre;
    j["ids"] = ids;
    nlohmann::json pieces = nlohmann::json::array(), tokens = nlohmann::json::array();
    for (Token t : ids) {
      pieces.push_back(tok->TokenToPiece(t));
      tokens.push_back(tok->spec().tokens[static_cast<size_t>(t)]);
    }
    j["pieces"] = pieces;  // decoded bytes (a piece may be part of a UTF-8 character)
    j["tokens"] = tokens;  // vocabulary spellings
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  for (Token t : ids) {
    // Control tokens decode to nothing; show their spelling instead.
    const bool control = tok->token_type(t) == TokenType::kControl;
    const std::string piece =
        control ? tok->spec().tokens[static_cast<size_t>(t)] : tok->TokenToPiece(t);
    std::printf("%6d -> '%s'\n", t, Escape(piece).c_str());
  }
  return 0;
}

}  // namespace

void AddTokenize(CLI::App& app, Runner& run) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids and pieces of a text");
  cmd->add_option("-m,--model", a->model, "GGUF file (a vocabulary-only GGUF is enough)")
      ->required();
  cmd->add_option("-p,--prompt", a->prompt, "Text to tokenize")->required();
  cmd->add_flag("--json", a->json, "Print one JSON object: ids, pieces, tokens");
  cmd->add_flag("--no-bos", a->no_bos, "Do not add BOS even if the tokenizer adds it");
  cmd->add_flag("--no-special", a->no_special,
                "Tokenize special-token text (e.g. <|eot_id|>) as plain text");
  cmd->callback([&run, a] { run = [a] { return Run(*a); }; });
}

}  // namespace primekv::cli
