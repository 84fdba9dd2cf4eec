// Byte-level BPE (tokenizer model "gpt2"): bytes as GPT-2's printable characters, the text
// pre-tokenized (pretokenizer.h), and within each pre-token the lowest-ranked merge applied first.
#include <queue>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace primekv {

using tokenizer_internal::BpeMerge;
using tokenizer_internal::PairKey;

// Byte-level BPE (gpt2): the byte map both ways and the merges by rank.
void Tokenizer::Impl::BuildByteLevel() {
  for (size_t b = 0; b < 256; ++b) {
    char_to_byte.emplace(byte_cp[b], static_cast<uint8_t>(b));
    auto it = token_ids.find(tokenizer_internal::ByteLevelChar(static_cast<uint8_t>(b)));
    if (it != token_ids.end()) byte_tokens[b] = it->second;
  }
  merges.reserve(spec.merges.size());
  std::string joined;
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const std::string& m = spec.merges[r];
    const size_t sp = m.find(' ', 1);
    const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
    joined.assign(left);
    joined.append(right);
    auto l = token_ids.find(left), rt = token_ids.find(right), j = token_ids.find(joined);
    // Merges whose parts or result are not tokens can never fire; skip them.
    if (l == token_ids.end() || rt == token_ids.end() || j == token_ids.end()) continue;
    merges.emplace(PairKey(l->second, rt->second), BpeMerge{static_cast<int32_t>(r), j->second});
  }
}

void Tokenizer::Impl::EncodeGpt2(std::string_view text, std::vector<Token>& out) const {
  if (nfc) {
    const std::string normalized = NormalizeNfc(text);
    for (std::string_view piece : PreTokenize(pre, normalized)) EncodeBpePiece(piece, out);
    return;
  }
  for (std::string_view piece : PreTokenize(pre, text)) EncodeBpePiece(piece, out);
}

// Byte-level BPE within one pre-token: apply the lowest-ranked applicable merge first.
void Tokenizer::Impl::EncodeBpePiece(std::string_view piece, std::vector<Token>& out) const {
  if (ignore_merges && piece.size() > 1) {
    std::string mapped;
    for (char c : piece) AppendUtf8(byte_cp[static_cast<unsigned char>(c)], mapped);
    auto it = token_ids.find(mapped);
    if (it != token_ids.end() && types[static_cast<size_t>(it->second)] == TokenType::kNormal) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    Token id;
    int prev, next;
  };
  std::vector<Symbol> sym(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    sym[i] = {byte_tokens[static_cast<unsigned char>(piece[i])], static_cast<int>(i) - 1,
              i + 1 < piece.size() ? static_cast<int>(i) + 1 : -1};
  }
  struct Candidate {
    int32_t rank;
    int left, right;
    Token left_id, right_id, merged;
  };
  auto lower = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower)> queue(lower);
  auto push = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const Token a = sym[static_cast<size_t>(l)].id, b = sym[static_cast<size_t>(r)].id;
    if (a < 0 || b < 0) return;
    auto it = merges.find(PairKey(a, b));
    if (it == merges.end()) return;
    queue.push({it->second.rank, l, r, a, b, it->second.merged});
  };
  for (size_t i = 1; i < sym.size(); ++i) push(static_cast<int>(i - 1), static_cast<int>(i));
  tokenizer_internal::RunMerges(
      sym, queue,
      [](const Candidate& c, const Symbol& l, const Symbol& r) {
        return l.next != c.right || l.id != c.left_id || r.id != c.right_id;
      },
      [](const Candidate& c, Symbol& l, Symbol& r) {
        l.id = c.merged;
        r.id = -2;  // dead
      },
      push);
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
    const Token id = sym[static_cast<size_t>(i)].id;
    if (id >= 0) {
      out.push_back(id);
    } else if (spec.unk >= 0) {
      out.push_back(spec.unk);
    } else {
      // Only a byte with no token stays unmerged without an id, so i is its place in piece.
      AppendMissingByte(static_cast<unsigned char>(piece[static_cast<size_t>(i)]), out);
    }
  }
}

// A byte the vocabulary has no token for, as llama.cpp encodes it: each UTF-8 byte of its
// byte-level character looked up as a one-byte token text, and those that are not tokens left
// out. A printable ASCII byte's character is the byte itself, which is then not a token either;
// every other character is two UTF-8 bytes of 0x80 and above, which byte-level vocabularies do
// not hold as tokens. In practice the byte is dropped.
void Tokenizer::Impl::AppendMissingByte(unsigned char byte, std::vector<Token>& out) const {
  std::string ch;
  AppendUtf8(byte_cp[byte], ch);
  for (const char c : ch) {
    auto it = token_ids.find(std::string_view(&c, 1));
    if (it != token_ids.end()) out.push_back(it->second);
  }
}

// A piece's byte-level characters as the bytes they stand for (others as they are).
void Tokenizer::Impl::AppendByteLevelText(std::string_view text, std::string& out) const {
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    auto it = c.valid ? char_to_byte.find(c.cp) : char_to_byte.end();
    if (it != char_to_byte.end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      out.append(text, pos, static_cast<size_t>(c.len));
    }
    pos += static_cast<size_t>(c.len);
  }
}

}  // namespace primekv
