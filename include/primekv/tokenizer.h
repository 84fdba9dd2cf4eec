// Tokenizers built from GGUF metadata: "llama" (SentencePiece-style BPE over scored pieces with
// byte fallback) and "gpt2" (byte-level BPE over ranked merges with a pre-tokenizer chosen by
// tokenizer.ggml.pre).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/status.h"

namespace primekv {

class GgufFile;

using Token = int32_t;

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Everything a tokenizer is built from, as plain data (filled from GGUF or by tests).
struct TokenizerSpec {
  std::string model;  // "llama" or "gpt2"
  std::string pre;    // tokenizer.ggml.pre: "default", "llama-bpe", "llama3", "qwen2", ...
  std::vector<std::string> tokens;
  std::vector<float> scores;         // llama: piece scores (higher merges first); may be empty
  std::vector<int32_t> token_types;  // TokenType values; empty means all normal
  std::vector<std::string> merges;   // gpt2: "a b" in rank order
  Token bos = -1, eos = -1, eot = -1, unk = -1, pad = -1;
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;  // llama only
  std::string chat_template;     // tokenizer.chat_template, if present
};

// Reads tokenizer.ggml.* keys with the documented defaults.
Result<TokenizerSpec> TokenizerSpecFromGguf(const GgufFile& file);
// Checks what Tokenizer::Create relies on: a known model (and, for gpt2, a known pre-tokenizer and
// well-formed merges), a non-empty vocabulary, scores/types matching it, special ids in range.
Status ValidateTokenizerSpec(const TokenizerSpec& spec);

class Tokenizer {
 public:
  static Result<Tokenizer> Create(TokenizerSpec spec);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // add_bos: prepend BOS if the spec says so (add_bos), and append EOS if it says add_eos.
  // parse_special: text such as "<|eot_id|>" that spells a control/user-defined token becomes
  // that token (longest match first). llama: the space prefix goes only before text that starts
  // the input, not after a special token.
  std::vector<Token> Encode(std::string_view text, bool add_bos, bool parse_special = false) const;
  // Concatenated pieces; control and unused tokens decode to nothing, byte tokens to their
  // byte, the unknown token to U+FFFD.
  // The leading space that add_space_prefix inserted is removed when the first token is BOS or
  // the text starts at the beginning (strip_leading_space).
  std::string Decode(std::span<const Token> tokens, bool strip_leading_space = true) const;
  // One token's text as it would appear in a stream (no stripping).
  std::string TokenToPiece(Token token) const;
  // Token id spelled exactly by `text` (e.g. "<|eot_id|>"), or -1.
  Token FindToken(std::string_view text) const;

  const TokenizerSpec& spec() const;
  int vocab_size() const;
  Token bos() const;
  Token eos() const;
  Token eot() const;
  bool IsEndOfGeneration(Token t) const;  // EOS, EOT, or another end-of-turn control token
  // The token's type (byte tokens of a llama vocabulary without types are reported as kByte);
  // kUndefined for ids outside the vocabulary.
  TokenType token_type(Token t) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Synthetic but valid tokenizers for project-made random models, deterministic.
// "llama": <unk>,<s>,</s>, 256 byte tokens, then scored merged pieces learned from a built-in
// text, padded with unused pieces up to vocab_size (>= 259 + 1).
// "gpt2": 256 byte-level tokens, merges learned from the same text, then control tokens
// (<|begin_of_text|>, <|end_of_text|>, <|eot_id|>, ...) and reserved pieces up to vocab_size.
Result<TokenizerSpec> MakeSyntheticTokenizerSpec(std::string_view model, int vocab_size);

// Chat formats. kNone means "no template": messages are joined plainly.
enum class ChatFormat { kNone, kLlama3, kChatML, kMistral };
struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};
// Picks the format from tokenizer.chat_template (if any), then the vocabulary's special tokens.
ChatFormat DetectChatFormat(const Tokenizer& tokenizer);
std::string_view ChatFormatName(ChatFormat f);
// Renders messages (with special tokens spelled as text; encode with parse_special = true).
// BOS is not included: Encode adds it.
std::string ApplyChatTemplate(ChatFormat format, std::span<const ChatMessage> messages,
                              bool add_generation_prompt);

// A long context followed by questions asked in turns, as token lists: the context (with BOS)
// is prefilled and compressed once, then each turn's tokens are appended before its answer.
struct ConversationTokens {
  std::vector<Token> context;
  std::vector<std::vector<Token>> turns;
};
// Without chat: the context as plain text, each turn "\n" + question + "\n" + answer prefix.
// With chat: one user message holding the context and the first question (split so that the
// context is its own prefix), later questions as new user messages; the answer prefix, if
// any, follows the generation prompt so the reply continues it. answer_prefixes may be empty
// or hold one string per question.
ConversationTokens EncodeConversation(const Tokenizer& tokenizer, bool chat,
                                      std::string_view context,
                                      std::span<const std::string> questions,
                                      std::span<const std::string> answer_prefixes = {});

}  // namespace primekv
