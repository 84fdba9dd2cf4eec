// The tokenizer: a spec checked (ValidateTokenizerSpec) and built into Tokenizer::Impl, Encode
// (special tokens split out first, then the model's algorithm: sentencepiece.cc for "llama",
// byte_level_bpe.cc for "gpt2") and Decode.
#include "primekv/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <utility>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/tokenizer_internal.h"

namespace primekv {
namespace {

using tokenizer_internal::Fragment;
using tokenizer_internal::SpecialMatcher;

// C's isspace in the "C" locale, as llama.cpp strips around special tokens.
bool IsAsciiSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD, what <unk> decodes to

std::string IdError(std::string_view name, Token id, size_t n) {
  return std::string(name) + " token id " + std::to_string(id) + " is out of range (vocab size " +
         std::to_string(n) + ")";
}

std::string ByteName(size_t b) {
  char buf[16];
  if (b >= 0x21 && b < 0x7F) {
    std::snprintf(buf, sizeof(buf), "0x%02zX ('%c')", b, static_cast<char>(b));
  } else {
    std::snprintf(buf, sizeof(buf), "0x%02zX", b);
  }
  return buf;
}

// SentencePiece without an unknown token: every byte needs a byte token Encode can fall back
// to, or text holding that byte could only be dropped, so such a vocabulary is refused at load.
// Byte-level BPE (gpt2) is not checked: llama.cpp loads such vocabularies (its falcon file has no
// token for 0x03) and drops a byte with no token at encode time; EncodeBpePiece does the same.
Status CheckBytesCovered(const TokenizerSpec& spec) {
  if (spec.unk >= 0 || spec.model == "gpt2") return Status::Ok();
  std::array<bool, 256> covered{};
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    if (!spec.token_types.empty() &&
        static_cast<TokenType>(spec.token_types[i]) != TokenType::kByte)
      continue;
    const int b = tokenizer_internal::ParseByteTokenText(spec.tokens[i]);
    if (b >= 0) covered[static_cast<size_t>(b)] = true;
  }
  for (size_t b = 0; b < 256; ++b) {
    if (!covered[b]) {
      return Status::Error("tokenizer has no token for byte " + ByteName(b) +
                           " and no unknown token, so text holding that byte cannot be encoded");
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateTokenizerSpec(const TokenizerSpec& spec) {
  if (spec.model != "llama" && spec.model != "gpt2") {
    return Status::Error("unsupported tokenizer model \"" + spec.model +
                         "\"; supported: llama, gpt2");
  }
  const size_t n = spec.tokens.size();
  if (n == 0) return Status::Error("tokenizer has no tokens (tokenizer.ggml.tokens is empty)");
  if (n > static_cast<size_t>(INT32_MAX)) return Status::Error("tokenizer has too many tokens");
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return Status::Error("tokenizer.ggml.scores has " + std::to_string(spec.scores.size()) +
                         " entries but there are " + std::to_string(n) + " tokens");
  }
  for (size_t i = 0; i < spec.scores.size(); ++i) {
    if (std::isnan(spec.scores[i])) {
      return Status::Error("tokenizer.ggml.scores[" + std::to_string(i) + "] is NaN");
    }
  }
  if (!spec.token_types.empty() && spec.token_types.size() != n) {
    return Status::Error("tokenizer.ggml.token_type has " +
                         std::to_string(spec.token_types.size()) + " entries but there are " +
                         std::to_string(n) + " tokens");
  }
  for (size_t i = 0; i < spec.token_types.size(); ++i) {
    const int32_t t = spec.token_types[i];
    if (t < 0 || t > static_cast<int32_t>(TokenType::kByte)) {
      return Status::Error("tokenizer.ggml.token_type[" + std::to_string(i) +
                           "] = " + std::to_string(t) + " is not a valid token type (0..6)");
    }
  }
  const std::pair<std::string_view, Token> ids[] = {{"bos", spec.bos},
                                                    {"eos", spec.eos},
                                                    {"eot", spec.eot},
                                                    {"unknown", spec.unk},
                                                    {"padding", spec.pad}};
  for (const auto& [name, id] : ids) {
    if (id < -1 || id >= static_cast<Token>(n)) return Status::Error(IdError(name, id, n));
  }
  PRIMEKV_RETURN_IF_ERROR(CheckBytesCovered(spec));
  if (spec.model == "gpt2") {
    auto pre = PreTokenizerFromName(spec.pre);
    if (!pre.ok()) return pre.status();
    for (size_t i = 0; i < spec.merges.size(); ++i) {
      const std::string& m = spec.merges[i];
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (sp == std::string::npos || sp + 1 >= m.size()) {
        return Status::Error("tokenizer.ggml.merges[" + std::to_string(i) + "] = \"" + m +
                             "\" is not two space-separated tokens");
      }
    }
  }
  return Status::Ok();
}

void Tokenizer::Impl::Build() {
  const size_t n = spec.tokens.size();
  gpt2 = spec.model == "gpt2";
  if (gpt2) {
    pre = PreTokenizerFromName(spec.pre).value();
    ignore_merges = PreTokenizerIgnoresMerges(spec.pre);
    nfc = PreTokenizerNormalizesNfc(spec.pre);
    // llama.cpp strips the whitespace before jina-v2's "<mask>" (its lstrip attribute).
    if (spec.pre.find("jina-v2-") != std::string::npos) {
      for (size_t i = 0; i < n; ++i) {
        if (spec.tokens[i] == "<mask>") {
          lstrip_token = static_cast<Token>(i);
          break;
        }
      }
    }
  }
  types.assign(n, TokenType::kNormal);
  for (size_t i = 0; i < spec.token_types.size(); ++i) {
    types[i] = static_cast<TokenType>(spec.token_types[i]);
  }
  token_ids.reserve(n);
  for (size_t i = 0; i < n; ++i) token_ids.emplace(spec.tokens[i], static_cast<Token>(i));
  byte_tokens.fill(-1);
  if (!gpt2) {
    BuildSentencePiece();
  } else {
    BuildByteLevel();
  }
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = spec.tokens[i];
    if (text.empty() || (types[i] != TokenType::kControl && types[i] != TokenType::kUserDefined)) {
      continue;
    }
    special.Add(text, static_cast<Token>(i));  // the lowest id of a text wins
    if (types[i] == TokenType::kUserDefined) user_defined.Add(text, static_cast<Token>(i));
  }
  special.Finish();
  user_defined.Finish();
  // A token's text is never shorter than the input it stands for: byte-level characters and
  // U+2581 are at least as long as the byte or space they encode, and the unknown token replaces
  // one character (at most 4 bytes). NFC composes at most 3 bytes of input into 1 (Hangul
  // L+V+T, Greek with three marks: 8 into 3), so 4 covers it.
  for (const std::string& text : spec.tokens)
    max_token_bytes = std::max(max_token_bytes, text.size());
  if (spec.unk >= 0) max_token_bytes = std::max<size_t>(max_token_bytes, 4);
  if (nfc) max_token_bytes *= 4;
  for (Token t : {spec.eos, spec.eot}) {
    if (t >= 0) end_tokens.push_back(t);
  }
  // The end-of-turn tokens of the chat families (ChatML, Llama 3, Granite, Gemma, Phi-3), as
  // llama.cpp counts them even where the GGUF names another EOS.
  for (std::string_view text :
       {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>", "<|end|>"}) {
    auto it = token_ids.find(text);
    if (it != token_ids.end()) end_tokens.push_back(it->second);
  }
}

std::vector<Fragment> Tokenizer::Impl::SplitSpecial(std::string_view text,
                                                    bool parse_special) const {
  std::vector<Fragment> out;
  const SpecialMatcher& matcher = parse_special ? special : user_defined;
  size_t plain_begin = 0;
  if (!matcher.empty()) {
    // Left to right, the longest token at the first position where one starts, then on after it.
    const auto starts = matcher.Scan(text);
    for (auto it = starts.rbegin(); it != starts.rend(); ++it) {
      const auto [i, node] = *it;
      if (i < plain_begin) continue;
      size_t left_end = i;
      if (matcher.token(node) == lstrip_token) {
        while (left_end > plain_begin && IsAsciiSpace(text[left_end - 1])) --left_end;
      }
      if (left_end > plain_begin) {
        out.push_back({text.substr(plain_begin, left_end - plain_begin), -1, plain_begin == 0});
      }
      out.push_back({{}, matcher.token(node), false});
      plain_begin = i + matcher.length(node);
    }
  }
  if (plain_begin < text.size() || text.empty()) {
    out.push_back({text.substr(plain_begin), -1, plain_begin == 0});
  }
  return out;
}

void Tokenizer::Impl::AppendPiece(Token t, std::string& out) const {
  if (t < 0 || t >= static_cast<Token>(spec.tokens.size())) return;
  const std::string& text = spec.tokens[static_cast<size_t>(t)];
  switch (types[static_cast<size_t>(t)]) {
    case TokenType::kControl:
    case TokenType::kUnused:
      return;
    case TokenType::kUnknown:
      out += kReplacementChar;
      return;
    case TokenType::kByte: {
      const int b = tokenizer_internal::ParseByteTokenText(text);
      if (b >= 0) {
        out.push_back(static_cast<char>(b));
      } else {
        out += text;
      }
      return;
    }
    case TokenType::kUserDefined:
      if (gpt2) {
        out += text;
        return;
      }
      break;
    case TokenType::kNormal:
    case TokenType::kUndefined:
      break;
  }
  if (!gpt2) {
    AppendSentencePieceText(text, out);
  } else {
    AppendByteLevelText(text, out);
  }
}

Result<Tokenizer> Tokenizer::Create(TokenizerSpec spec) {
  if (Status s = ValidateTokenizerSpec(spec); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->spec = std::move(spec);
  impl->Build();
  impl->FindWordBoundaries();
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<Token> Tokenizer::Encode(std::string_view text, bool add_bos,
                                     bool parse_special) const {
  const TokenizerSpec& spec = impl_->spec;
  std::vector<Token> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && spec.add_bos && spec.bos >= 0) out.push_back(spec.bos);
  for (const Fragment& f : impl_->SplitSpecial(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
    } else if (impl_->gpt2) {
      impl_->EncodeGpt2(f.text, out);
    } else {
      impl_->EncodeLlama(f.text, f.at_start, out);
    }
  }
  if (add_bos && spec.add_eos && spec.eos >= 0) out.push_back(spec.eos);
  return out;
}

std::string Tokenizer::Decode(std::span<const Token> tokens, bool strip_leading_space) const {
  std::string out;
  for (Token t : tokens) impl_->AppendPiece(t, out);
  const bool strip = strip_leading_space || (!tokens.empty() && tokens[0] == impl_->spec.bos);
  if (!impl_->gpt2 && impl_->spec.add_space_prefix && strip && !out.empty() && out[0] == ' ') {
    out.erase(0, 1);
  }
  return out;
}

std::string Tokenizer::TokenToPiece(Token token) const {
  std::string out;
  impl_->AppendPiece(token, out);
  return out;
}

Token Tokenizer::FindToken(std::string_view text) const {
  auto it = impl_->token_ids.find(text);
  return it == impl_->token_ids.end() ? -1 : it->second;
}

size_t Tokenizer::MaxTokenBytes() const { return impl_->max_token_bytes; }

const TokenizerSpec& Tokenizer::spec() const { return impl_->spec; }
int Tokenizer::vocab_size() const { return static_cast<int>(impl_->spec.tokens.size()); }
Token Tokenizer::bos() const { return impl_->spec.bos; }
Token Tokenizer::eos() const { return impl_->spec.eos; }
Token Tokenizer::eot() const { return impl_->spec.eot; }

bool Tokenizer::IsEndOfGeneration(Token t) const {
  return t >= 0 && std::find(impl_->end_tokens.begin(), impl_->end_tokens.end(), t) !=
                       impl_->end_tokens.end();
}

TokenType Tokenizer::token_type(Token t) const {
  if (t < 0 || t >= vocab_size()) return TokenType::kUndefined;
  return impl_->types[static_cast<size_t>(t)];
}

}  // namespace primekv
