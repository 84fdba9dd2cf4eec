// Tokenizers built from GGUF metadata: "llama" (SentencePiece-style BPE over scored pieces with
// byte fallback) and "gpt2" (byte-level BPE over ranked merges with a pre-tokenizer chosen by
// tokenizer.ggml.pre).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/util/status.h"

namespace primekv {

class GgufFile;
class GgufWriter;

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
// Writes the spec as the tokenizer.ggml.* keys (and tokenizer.chat_template) llama.cpp reads;
// ids of -1 are left out. TokenizerSpecFromGguf reads back the same spec (eot aside, which it
// infers from <|eot_id|>/<|im_end|> when absent).
void AddTokenizerMetadata(GgufWriter& writer, const TokenizerSpec& spec);
// Reads a Hugging Face tokenizer folder (tokenizer.json and tokenizer_config.json) the way
// llama.cpp's converter writes it to GGUF: byte-level BPE ("gpt2") with the pre-tokenizer named
// from the split regex ("llama-bpe", "qwen2", "gpt-2"), normal vocabulary tokens, added tokens
// as control (special or spelled <|...|>) or user-defined, merges, bos/eos/unk/pad ids from the
// config, add_bos from the config or the post-processor, and the chat template. The vocabulary
// is padded to vocab_size with unused "[PADn]" tokens.
// Both files must be regular (read capped, kMaxInputBytes); every field is type-checked and an
// error names the file and the field's path. Token ids may exceed the entries plus added tokens
// by at most 1024 (or reach vocab_size - 1), so one huge id cannot pad the vocabulary to millions.
Result<TokenizerSpec> TokenizerSpecFromHfDir(const std::filesystem::path& dir, int vocab_size = 0);
// The same from the two files' texts (errors name them "tokenizer.json", "tokenizer_config.json").
Result<TokenizerSpec> TokenizerSpecFromHfJson(std::string_view tokenizer_json,
                                              std::string_view config_json, int vocab_size = 0);
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
  // that token (longest match first). Without it only user-defined tokens are matched, as
  // llama.cpp and Hugging Face match added tokens in any text; control tokens stay plain text.
  // llama: the space prefix goes only before text that starts the input, not after a special token.
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
  // An upper bound (>= 1) on the input bytes one token of Encode can consume, so a caller can
  // refuse text.size() > n_ctx * MaxTokenBytes() before tokenizing a huge input. Computed at
  // Create: the longest token text (U+2581 counts 3 bytes for its 1-byte space), 4 for the
  // unknown token (one UTF-8 character), times 4 where NFC may compose the input first.
  size_t MaxTokenBytes() const;

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

// Chat formats. kNone means "no template": messages are joined plainly. Each other format
// renders exactly what transformers.js's apply_chat_template produces on that family's
// published template (system + user/assistant turns + generation prompt; tools unsupported).
enum class ChatFormat {
  kNone,
  kLlama3,       // Llama 3 Instruct (header/eot turns)
  kChatML,       // plain <|im_start|>role ... <|im_end|>
  kMistral,      // Mistral v0.3 ("v3"): [INST] ... [/INST], system before the last user turn
  kLlama31,      // Llama 3.1/3.3 Instruct: system block with the knowledge/today dates
  kQwen2,        // Qwen2 Instruct: ChatML with the default system prompt
  kQwen3,        // Qwen3: ChatML, <think> handling and the enable_thinking switch
  kLlama2,       // Llama 2 chat: <s>[INST] <<SYS>> ... [/INST]
  kGemma,        // Gemma 1 / 2: <start_of_turn>user|model ... <end_of_turn>, no system role
  kPhi3,         // Phi-3.5-mini: <|system|> / <|user|> / <|assistant|> ... <|end|>
  kGranite,      // Granite 3.0: <|start_of_role|>role<|end_of_role|> ... <|end_of_text|>
  kMistralNemo,  // Mistral Nemo ("v3-tekken"): [INST]...[/INST] without spaces
};
struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (Qwen3 also "tool")
  std::string content;
};
// Picks the format from tokenizer.chat_template (if any), then the vocabulary's special tokens;
// kNone when neither says (an unrecognised template included: see ResolveChatFormat).
ChatFormat DetectChatFormat(const Tokenizer& tokenizer);
// What --chat uses: `name` (if not empty) chooses a format by name; otherwise the GGUF's
// tokenizer.chat_template must be one the engine renders exactly (ChatFormatFromTemplate; an
// error names it and lists the names); without a template the vocabulary decides as in
// DetectChatFormat.
Result<ChatFormat> ResolveChatFormat(const Tokenizer& tokenizer, std::string_view name = {});
// The format of a template text that is exactly (CRLF as LF, surrounding whitespace trimmed) a
// published template whose rendering is built in (Llama 3, Llama 3.1, Qwen3, Gemma 2,
// Phi-3.5-mini, Granite 3.0, Mistral Nemo). Templates are not
// interpreted, so any other text, one with a family's markers included, is an error that quotes
// its start and lists the names for --chat-template.
Result<ChatFormat> ChatFormatFromTemplate(std::string_view chat_template);
// "llama3", "llama3.1", "chatml", "qwen2", "qwen3", "mistral-v0.3" (alias "mistral"),
// "llama2", "gemma", "phi3", "granite", "mistral-nemo", "none".
Result<ChatFormat> ChatFormatFromName(std::string_view name);
std::string_view ChatFormatName(ChatFormat f);
std::string ChatFormatNames();  // comma-separated, for help and errors

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;  // Qwen3's switch; unset leaves it undefined (thinking)
  std::string bos_token;                // the texts the template inserts for bos_token / eos_token
  std::string eos_token;
};
// The exact text the family's template renders, BOS text included where the template puts it.
// Errors where the template raises (Mistral and Llama 2 need alternating user/assistant turns).
Result<std::string> RenderChat(ChatFormat format, std::span<const ChatMessage> messages,
                               const ChatRenderOptions& options);
// RenderChat with the tokenizer's BOS/EOS texts.
Result<std::string> RenderChat(const Tokenizer& tokenizer, ChatFormat format,
                               std::span<const ChatMessage> messages,
                               const ChatRenderOptions& options);
// Renders messages (with special tokens spelled as text; encode with parse_special = true).
// The leading BOS text is left out: Encode adds BOS. Uses the family's usual BOS/EOS texts;
// empty where RenderChat fails.
std::string ApplyChatTemplate(ChatFormat format, std::span<const ChatMessage> messages,
                              bool add_generation_prompt);
// One more user turn and the generation prompt, for a conversation already rendered with
// `format`: what the template adds for it, without the once-only parts (Llama 3.1's system block,
// Qwen2's default system message).
std::string ApplyChatTemplateFollowUp(ChatFormat format, std::string_view user_content);

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
// or hold one string per question. `format` overrides DetectChatFormat (--chat-template).
ConversationTokens EncodeConversation(const Tokenizer& tokenizer, bool chat,
                                      std::string_view context,
                                      std::span<const std::string> questions,
                                      std::span<const std::string> answer_prefixes = {},
                                      std::optional<ChatFormat> format = std::nullopt);

}  // namespace primekv
