// Pre-tokenizers of byte-level BPE models: split text into the pieces BPE runs on, following the
// regular expressions of GPT-2, Llama 3, Qwen2 and deepseek-coder (written out by hand: std::regex
// lacks \p{L}).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "primekv/util/status.h"

namespace primekv {

enum class PreTokenizerKind {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // As kLlama3 but \p{N} (one digit per piece).
  kQwen2,
  // llama.cpp's deepseek-coder: [\r\n], \s?\p{L}+, \s?\p{P}+, [\u4E00-\u9FA5\u0800-\u4E00
  // \uAC00-\uD7FF]+ and \p{N}, each splitting the pieces the one before left; unmatched text
  // between matches stays one piece.
  kDeepseekCoder,
};

// Maps tokenizer.ggml.pre to a splitting rule; unknown names are an error that lists the known.
Result<PreTokenizerKind> PreTokenizerFromName(std::string_view pre);
std::string SupportedPreTokenizerNames();
// Llama 3's tokenizer emits a pre-token that is itself in the vocabulary as that token, without
// running BPE (Hugging Face "ignore_merges"); true for "llama3", "llama-bpe", "llama-v3".
bool PreTokenizerIgnoresMerges(std::string_view pre);
// Qwen2's Hugging Face tokenizer normalizes text to NFC before splitting; true for "qwen2" and
// "deepseek-r1-qwen".
bool PreTokenizerNormalizesNfc(std::string_view pre);

// Splits `text` into consecutive non-empty pieces that concatenate back to `text`. Invalid UTF-8
// bytes count as single non-letter, non-number, non-space characters.
std::vector<std::string_view> PreTokenize(PreTokenizerKind kind, std::string_view text);

}  // namespace primekv
