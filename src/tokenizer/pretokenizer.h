// Pre-tokenizers of byte-level BPE models: split text into the pieces BPE runs on, the way
// llama.cpp (commit c392e509) splits it for each tokenizer.ggml.pre name. llama.cpp applies a
// list of regular expressions in turn, each splitting the pieces the one before left (the text
// between two matches stays one piece); a few lists it runs through hand-written code, the rest
// through std::regex over a text whose non-ASCII characters are reduced to one placeholder per
// Unicode category. Each family's list is written out by hand here (std::regex lacks \p{L}),
// with the observable effects of that reduction (see docs/pretokenizers.md).
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
  // [\r\n], \s?\p{L}+, \s?\p{P}+, [\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+, \p{N}.
  kDeepseekCoder,
  // [\r\n], \s?[explicit Latin/Greek/Cyrillic/... letters]+, \s?[ASCII and fullwidth
  // punctuation]+, \s+$, [CJK and Hangul]+, \p{N}+.
  kDeepseekLlm,
  // \p{N}{1,3}, [CJK and kana]+, then [ASCII punctuation][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?
  // [\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+.
  kDeepseekV3,
  // [\p{P}$+<=>^~|`]+, the GPT-2 expression, [0-9][0-9][0-9].
  kFalcon,
  // \p{N}, the GPT-2 expression.
  kStarcoder,
  // llama.cpp's default list: [\p{P}$+<=>^~|]+, the GPT-2 expression, \p{N}+, [0-9][0-9][0-9].
  kDefault,
  //  ?[^(\s|.,!?…。，、।۔،)]+
  kBloom,
  // As kBloom, then \p{N}.
  kViking,
  // Mistral's tekken: words split at lower-to-upper case changes, single digits, punctuation
  // runs with trailing [\r\n/]*, whitespace as kLlama3.
  kTekken,
  // <sentinel:[0-9]+>, IMGIMG[A-I]{1,4}Z, [\t\n] / four / two spaces, \p{N}, single punctuation,
  // the GPT-2 expression.
  kChameleon,
};

// Maps tokenizer.ggml.pre to a splitting rule; unknown names are an error that lists the known.
Result<PreTokenizerKind> PreTokenizerFromName(std::string_view pre);
std::string SupportedPreTokenizerNames();
// llama.cpp's ignore_merges: a pre-token that is itself in the vocabulary becomes that token
// without running BPE; true for "llama3", "llama-bpe", "llama-v3", "falcon3" and "tekken".
bool PreTokenizerIgnoresMerges(std::string_view pre);
// llama.cpp adds BOS for these names when tokenizer.ggml.add_bos_token is absent: "llama3",
// "llama-bpe", "llama-v3", "falcon3", "tekken" and "chameleon".
bool PreTokenizerAddsBos(std::string_view pre);
// Qwen2's Hugging Face tokenizer normalizes text to NFC before splitting; true for "qwen2" and
// "deepseek-r1-qwen" (llama.cpp does not normalize: see docs/pretokenizers.md).
bool PreTokenizerNormalizesNfc(std::string_view pre);

// Splits `text` into consecutive non-empty pieces that concatenate back to `text`. Invalid UTF-8
// bytes count as single non-letter, non-number, non-space characters.
std::vector<std::string_view> PreTokenize(PreTokenizerKind kind, std::string_view text);

}  // namespace primekv
