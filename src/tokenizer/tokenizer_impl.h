// The tokenizer's state and what its two algorithms share (not part of the public API).
// tokenizer.cc validates a spec, builds this state and runs Encode and Decode; each algorithm
// has its own file: sentencepiece.cc (model "llama") and byte_level_bpe.cc (model "gpt2"). The
// special tokens are split out of a text first by special_matcher.h.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "primekv/tokenizer/tokenizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/special_matcher.h"
#include "tokenizer/tokenizer_internal.h"

namespace primekv {
namespace tokenizer_internal {

// Keys view the strings of Impl::spec.tokens, which never change after Build().
using TextMap = std::unordered_map<std::string_view, Token>;

inline uint64_t PairKey(Token a, Token b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct BpeMerge {
  int32_t rank;
  Token merged;
};

// A run of text that is either plain text to tokenize or one special token.
struct Fragment {
  std::string_view text;
  Token token = -1;  // >= 0: a special token
  bool at_start = false;
};

// The shared loop of both BPE variants: symbols form a linked list (prev/next, -1 at the ends)
// and `queue` holds candidate joins of neighbours, best on top. A candidate that `stale`
// rejects no longer describes its pair; otherwise `join` merges the right symbol into the
// left one and the new neighbour pairs are offered through `push`.
template <typename Symbol, typename Queue, typename Stale, typename Join, typename Push>
void RunMerges(std::vector<Symbol>& sym, Queue& queue, Stale stale, Join join, Push push) {
  while (!queue.empty()) {
    const auto c = queue.top();
    queue.pop();
    Symbol& l = sym[static_cast<size_t>(c.left)];
    Symbol& r = sym[static_cast<size_t>(c.right)];
    if (stale(c, l, r)) continue;
    join(c, l, r);
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = c.left;
    push(l.prev, c.left);
    push(c.left, l.next);
  }
}

// SentencePiece's view of a text: spaces as U+2581 (and one in front when asked), with the
// bytes where a space became the marker, so byte fallback can emit the space itself (<0x20>).
struct SpmText {
  std::string norm;
  std::vector<bool> escaped_space;  // [norm.size()]
};

}  // namespace tokenizer_internal

struct Tokenizer::Impl {
  TokenizerSpec spec;
  bool gpt2 = false;
  PreTokenizerKind pre = PreTokenizerKind::kGpt2;
  std::vector<TokenType> types;
  tokenizer_internal::TextMap token_ids;  // every token text -> its lowest id
  tokenizer_internal::TextMap
      piece_ids;  // llama: texts BPE may produce (normal, user-defined, undefined)
  std::array<Token, 256> byte_tokens{};
  std::unordered_map<uint64_t, tokenizer_internal::BpeMerge>
      merges;                                          // gpt2: (left, right) -> merge
  std::unordered_map<uint32_t, uint8_t> char_to_byte;  // gpt2: inverse byte map
  std::array<uint32_t, 256> byte_cp = tokenizer_internal::ByteToCodepoint();  // gpt2 byte map
  bool ignore_merges = false;  // gpt2: a pre-token that is itself a token skips BPE
  bool nfc = false;            // gpt2: NFC-normalize each text fragment first
  Token lstrip_token = -1;     // a special token that takes the whitespace before it
  // Control and user-defined tokens, matched longest first where parse_special is on
  // (vocabularies may hold hundreds of thousands of <|reserved_N|> tokens); user-defined ones
  // alone where it is off, as llama.cpp and Hugging Face match added tokens in any text.
  tokenizer_internal::SpecialMatcher special;
  tokenizer_internal::SpecialMatcher user_defined;
  std::vector<Token> end_tokens;
  size_t max_token_bytes = 1;
  // llama: no piece holds the space marker after another character, so no merge joins a word
  // to the spaces before the next one, and each word (a run of markers and what follows, up to
  // the next run) is encoded alone: the same ids, in memory bounded by the longest word.
  bool words_apart = false;

  // tokenizer.cc: what both algorithms share.
  void Build();
  std::vector<tokenizer_internal::Fragment> SplitSpecial(std::string_view text,
                                                         bool parse_special) const;
  void AppendPiece(Token t, std::string& out) const;

  // sentencepiece.cc (model "llama").
  void BuildSentencePiece();
  void FindWordBoundaries();
  void EncodeLlama(std::string_view text, bool at_start, std::vector<Token>& out) const;
  void EncodeLlamaWord(const tokenizer_internal::SpmText& t, size_t begin, size_t end,
                       std::vector<Token>& out) const;
  void EmitLlamaPiece(std::string_view norm, const std::vector<bool>& escaped_space, size_t start,
                      size_t len, std::vector<Token>& out) const;
  void AppendSentencePieceText(std::string_view text, std::string& out) const;

  // byte_level_bpe.cc (model "gpt2").
  void BuildByteLevel();
  void EncodeGpt2(std::string_view text, std::vector<Token>& out) const;
  void EncodeBpePiece(std::string_view piece, std::vector<Token>& out) const;
  void AppendMissingByte(unsigned char byte, std::vector<Token>& out) const;
  void AppendByteLevelText(std::string_view text, std::string& out) const;
};

}  // namespace primekv
