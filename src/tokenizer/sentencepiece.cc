// SentencePiece-style BPE (tokenizer model "llama"): spaces as U+2581, the adjacent pair whose
// concatenation is the highest-scoring piece joined first, and byte tokens (<0xAB>) or the
// unknown token for what no piece covers.
#include <algorithm>
#include <queue>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace primekv {
namespace {

using tokenizer_internal::kSpaceMarker;
using tokenizer_internal::SpmText;

SpmText EscapeSpaces(std::string_view text, bool space_prefix) {
  SpmText t;
  t.norm.reserve(text.size() + text.size() / 2 + 3);
  auto add_space = [&] {
    t.escaped_space.resize(t.norm.size() + kSpaceMarker.size(), false);
    t.escaped_space[t.norm.size()] = true;
    t.norm += kSpaceMarker;
  };
  if (space_prefix) add_space();
  for (char c : text) {
    if (c == ' ') {
      add_space();
    } else {
      t.norm += c;
    }
  }
  t.escaped_space.resize(t.norm.size(), false);
  return t;
}

}  // namespace

// SentencePiece (llama): byte tokens ("<0xAB>") and the pieces BPE may produce.
void Tokenizer::Impl::BuildSentencePiece() {
  const size_t n = spec.tokens.size();
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = spec.tokens[i];
    // Without token types, SentencePiece's "<0xAB>" spelling is what marks byte tokens.
    if (spec.token_types.empty() && tokenizer_internal::ParseByteTokenText(text) >= 0) {
      types[i] = TokenType::kByte;
    }
    const TokenType t = types[i];
    if (t == TokenType::kByte) {
      const int b = tokenizer_internal::ParseByteTokenText(text);
      if (b >= 0 && byte_tokens[static_cast<size_t>(b)] < 0) {
        byte_tokens[static_cast<size_t>(b)] = static_cast<Token>(i);
      }
    } else if (t == TokenType::kNormal || t == TokenType::kUserDefined ||
               t == TokenType::kUndefined) {
      piece_ids.emplace(text, static_cast<Token>(i));
    }
  }
}

// SentencePiece-style BPE: start from characters and repeatedly join the adjacent pair whose
// concatenation is the highest-scoring piece (leftmost on ties).
void Tokenizer::Impl::EncodeLlama(std::string_view text, bool at_start,
                                  std::vector<Token>& out) const {
  if (text.empty()) return;
  const SpmText t = EscapeSpaces(text, spec.add_space_prefix && at_start);
  const std::string_view norm = t.norm;
  size_t begin = 0;
  const auto starts_word = [&](size_t i) {
    return norm.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0 &&
           (i < kSpaceMarker.size() ||
            norm.compare(i - kSpaceMarker.size(), kSpaceMarker.size(), kSpaceMarker) != 0);
  };
  for (size_t i = 1; words_apart && i < norm.size(); ++i) {
    if (!starts_word(i)) continue;
    EncodeLlamaWord(t, begin, i, out);
    begin = i;
  }
  EncodeLlamaWord(t, begin, norm.size(), out);
}

void Tokenizer::Impl::FindWordBoundaries() {
  words_apart = !gpt2;
  for (const auto& [text, id] : piece_ids) {
    for (size_t at = text.find(kSpaceMarker, 1); at != std::string_view::npos;
         at = text.find(kSpaceMarker, at + 1)) {
      if (at < kSpaceMarker.size() ||
          text.compare(at - kSpaceMarker.size(), kSpaceMarker.size(), kSpaceMarker) != 0) {
        words_apart = false;
        return;
      }
    }
  }
}

// SentencePiece BPE over norm[begin, end).
void Tokenizer::Impl::EncodeLlamaWord(const SpmText& t, size_t begin, size_t end,
                                      std::vector<Token>& out) const {
  if (begin >= end) return;
  const std::string_view norm = t.norm;
  struct Symbol {
    size_t start, len;
    int prev, next;
  };
  std::vector<Symbol> sym;
  for (size_t pos = begin; pos < end;) {
    const size_t len = static_cast<size_t>(DecodeUtf8(norm, pos).len);
    const int idx = static_cast<int>(sym.size());
    sym.push_back({pos, len, idx - 1, -1});
    if (idx > 0) sym[static_cast<size_t>(idx - 1)].next = idx;
    pos += len;
  }

  struct Candidate {
    float score;
    size_t start;  // of the left symbol: smaller wins ties
    int left, right;
    size_t len;
  };
  auto lower = [](const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.start > b.start);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower)> queue(lower);
  auto score_of = [&](Token id) {
    return spec.scores.empty() ? 0.0f : spec.scores[static_cast<size_t>(id)];
  };
  auto push = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const Symbol& a = sym[static_cast<size_t>(l)];
    const Symbol& b = sym[static_cast<size_t>(r)];
    auto it = piece_ids.find(norm.substr(a.start, a.len + b.len));
    if (it == piece_ids.end()) return;
    queue.push({score_of(it->second), a.start, l, r, a.len + b.len});
  };
  for (size_t i = 1; i < sym.size(); ++i) push(static_cast<int>(i - 1), static_cast<int>(i));
  tokenizer_internal::RunMerges(
      sym, queue,
      [](const Candidate& c, const Symbol& l, const Symbol& r) {
        return l.len == 0 || r.len == 0 || l.next != c.right || l.len + r.len != c.len;
      },
      [](const Candidate&, Symbol& l, Symbol& r) {
        l.len += r.len;
        r.len = 0;
      },
      push);
  for (int i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
    const Symbol& s = sym[static_cast<size_t>(i)];
    EmitLlamaPiece(t.norm, t.escaped_space, s.start, s.len, out);
  }
}

// One final symbol: its piece's id, else its bytes as byte tokens (escaped spaces as <0x20>),
// else UNK when the vocabulary has one.
void Tokenizer::Impl::EmitLlamaPiece(std::string_view norm, const std::vector<bool>& escaped_space,
                                     size_t start, size_t len, std::vector<Token>& out) const {
  const std::string_view piece = norm.substr(start, len);
  auto it = piece_ids.find(piece);
  if (it != piece_ids.end()) {
    out.push_back(it->second);
    return;
  }
  std::string raw;
  for (size_t k = 0; k < piece.size();) {
    if (escaped_space[start + k]) {
      raw.push_back(' ');
      k += kSpaceMarker.size();
    } else {
      raw.push_back(piece[k++]);
    }
  }
  const bool all_bytes = std::all_of(raw.begin(), raw.end(), [&](char ch) {
    return byte_tokens[static_cast<unsigned char>(ch)] >= 0;
  });
  if (all_bytes) {
    for (char ch : raw) out.push_back(byte_tokens[static_cast<unsigned char>(ch)]);
  } else if (spec.unk >= 0) {
    out.push_back(spec.unk);
  }
}

// A piece's text with the space marker as a space.
void Tokenizer::Impl::AppendSentencePieceText(std::string_view text, std::string& out) const {
  for (size_t pos = 0; pos < text.size();) {
    if (std::string_view(text).substr(pos).starts_with(kSpaceMarker)) {
      out.push_back(' ');
      pos += kSpaceMarker.size();
    } else {
      out.push_back(text[pos++]);
    }
  }
}

}  // namespace primekv
