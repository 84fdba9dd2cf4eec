#include "primekv/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <queue>
#include <unordered_map>
#include <utility>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

namespace primekv {
namespace {

using tokenizer_internal::kSpaceMarker;

// Keys view the strings of Impl::spec.tokens, which never change after Build().
using TextMap = std::unordered_map<std::string_view, Token>;

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD, what <unk> decodes to

uint64_t PairKey(Token a, Token b) {
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

std::string IdError(std::string_view name, Token id, size_t n) {
  return std::string(name) + " token id " + std::to_string(id) + " is out of range (vocab size " +
         std::to_string(n) + ")";
}

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

// Finds, for every position of a text, the longest special token starting there, in one pass
// over the text: an Aho-Corasick automaton over the reversed token texts, fed the text from its
// end, reports at position i the longest reversed token ending there, i.e. the longest token
// starting at i. Work is O(text + matches) however many lengths and shared prefixes the tokens
// have (a per-position walk over 4,000 tokens "a...aZ" is quadratic on "aaaa...").
class SpecialMatcher {
 public:
  void Add(std::string_view text, Token token) {
    int32_t node = 0;
    for (size_t k = text.size(); k-- > 0;) {
      const auto b = static_cast<unsigned char>(text[k]);
      const auto it = edges_.find(Key(node, b));
      if (it != edges_.end()) {
        node = it->second;
        continue;
      }
      const auto child = static_cast<int32_t>(nodes_.size());
      nodes_.push_back({node, nodes_[static_cast<size_t>(node)].depth + 1, 0, -1, -1});
      edges_.emplace(Key(node, b), child);
      byte_.push_back(b);
      node = child;
    }
    if (nodes_[static_cast<size_t>(node)].token < 0)
      nodes_[static_cast<size_t>(node)].token = token;
  }

  // Fail links and, per node, the deepest node with a token on its fail chain (itself first).
  void Finish() {
    std::vector<int32_t> order(nodes_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return nodes_[static_cast<size_t>(a)].depth < nodes_[static_cast<size_t>(b)].depth;
    });
    for (int32_t id : order) {
      Node& n = nodes_[static_cast<size_t>(id)];
      if (id == 0) {
        n.best = -1;
        continue;
      }
      if (n.depth == 1) {
        n.fail = 0;
      } else {
        n.fail = Step(nodes_[static_cast<size_t>(n.parent)].fail, byte_[static_cast<size_t>(id)]);
      }
      n.best = n.token >= 0 ? id : nodes_[static_cast<size_t>(n.fail)].best;
    }
  }

  bool empty() const { return nodes_.size() <= 1; }

  // (position, node with the token) for every position where a special token starts, from the
  // last position to the first.
  std::vector<std::pair<size_t, int32_t>> Scan(std::string_view text) const {
    std::vector<std::pair<size_t, int32_t>> found;
    int32_t state = 0;
    for (size_t i = text.size(); i-- > 0;) {
      state = Step(state, static_cast<unsigned char>(text[i]));
      const int32_t best = nodes_[static_cast<size_t>(state)].best;
      if (best >= 0) found.emplace_back(i, best);
    }
    return found;
  }

  size_t length(int32_t node) const {
    return static_cast<size_t>(nodes_[static_cast<size_t>(node)].depth);
  }
  Token token(int32_t node) const { return nodes_[static_cast<size_t>(node)].token; }

 private:
  struct Node {
    int32_t parent, depth, fail, token, best;
  };
  static uint64_t Key(int32_t node, unsigned char b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 8) | b;
  }
  // The goto function: follow fail links until `b` continues a reversed token prefix.
  int32_t Step(int32_t state, unsigned char b) const {
    while (true) {
      const auto it = edges_.find(Key(state, b));
      if (it != edges_.end()) return it->second;
      if (state == 0) return 0;
      state = nodes_[static_cast<size_t>(state)].fail;
    }
  }

  std::vector<Node> nodes_ = {Node{-1, 0, 0, -1, -1}};
  std::vector<unsigned char> byte_ = {0};
  std::unordered_map<uint64_t, int32_t> edges_;
};

std::string ByteName(size_t b) {
  char buf[16];
  if (b >= 0x21 && b < 0x7F) {
    std::snprintf(buf, sizeof(buf), "0x%02zX ('%c')", b, static_cast<char>(b));
  } else {
    std::snprintf(buf, sizeof(buf), "0x%02zX", b);
  }
  return buf;
}

// Without an unknown token, every byte needs a token Encode can fall back to (gpt2: the
// byte-level character as a normal token; llama: a byte token), or text holding that byte could
// only be dropped. Refused at load rather than dropped at Encode: the vocabulary is what is
// broken, and Encode's output must account for all of its input. A gpt2 vocabulary may give the
// bytes that never occur in valid UTF-8 (0xC0, 0xC1, 0xF5-0xFF) another type: deepseek-coder's
// are user-defined, and BPE still spells them through the byte-to-unicode map.
Status CheckBytesCovered(const TokenizerSpec& spec) {
  if (spec.unk >= 0) return Status::Ok();
  std::array<int64_t, 256> id;
  id.fill(-1);
  const bool gpt2 = spec.model == "gpt2";
  std::unordered_map<std::string, uint8_t> byte_of;
  if (gpt2) {
    for (size_t b = 0; b < 256; ++b) {
      byte_of.emplace(tokenizer_internal::ByteLevelChar(static_cast<uint8_t>(b)),
                      static_cast<uint8_t>(b));
    }
  }
  auto type_of = [&](size_t i) {
    return spec.token_types.empty() ? TokenType::kNormal
                                    : static_cast<TokenType>(spec.token_types[i]);
  };
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const std::string& text = spec.tokens[i];
    int b = -1;
    if (gpt2) {
      if (text.size() > 2) continue;
      const auto it = byte_of.find(text);
      if (it != byte_of.end()) b = it->second;
    } else if (type_of(i) == TokenType::kByte || spec.token_types.empty()) {
      b = tokenizer_internal::ParseByteTokenText(text);
    }
    if (b >= 0 && id[static_cast<size_t>(b)] < 0)
      id[static_cast<size_t>(b)] = static_cast<int64_t>(i);
  }
  for (size_t b = 0; b < 256; ++b) {
    if (id[b] < 0) {
      return Status::Error("tokenizer has no token for byte " + ByteName(b) +
                           " and no unknown token, so text holding that byte cannot be encoded");
    }
    const TokenType t = type_of(static_cast<size_t>(id[b]));
    const bool in_valid_utf8 = b != 0xC0 && b != 0xC1 && b < 0xF5;
    if (gpt2 && in_valid_utf8 && t != TokenType::kNormal && t != TokenType::kUndefined) {
      return Status::Error("tokenizer's token for byte " + ByteName(b) + " (id " +
                           std::to_string(id[b]) + ") has type " +
                           std::to_string(static_cast<int>(t)) +
                           ", not normal, and there is no unknown token: text holding that byte "
                           "cannot be encoded");
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

struct Tokenizer::Impl {
  TokenizerSpec spec;
  bool gpt2 = false;
  PreTokenizerKind pre = PreTokenizerKind::kGpt2;
  std::vector<TokenType> types;
  TextMap token_ids;  // every token text -> its lowest id
  TextMap piece_ids;  // llama: texts BPE may produce (normal, user-defined, undefined)
  std::array<Token, 256> byte_tokens{};
  std::unordered_map<uint64_t, BpeMerge> merges;       // gpt2: (left, right) -> merge
  std::unordered_map<uint32_t, uint8_t> char_to_byte;  // gpt2: inverse byte map
  std::array<uint32_t, 256> byte_cp = tokenizer_internal::ByteToCodepoint();  // gpt2 byte map
  bool ignore_merges = false;  // gpt2: a pre-token that is itself a token skips BPE
  bool nfc = false;            // gpt2: NFC-normalize each text fragment first
  // Control and user-defined tokens, matched longest first where parse_special is on
  // (vocabularies may hold hundreds of thousands of <|reserved_N|> tokens); user-defined ones
  // alone where it is off, as llama.cpp and Hugging Face match added tokens in any text.
  SpecialMatcher special;
  SpecialMatcher user_defined;
  std::vector<Token> end_tokens;
  size_t max_token_bytes = 1;
  // llama: no piece holds the space marker after another character, so no merge joins a word
  // to the spaces before the next one, and each word (a run of markers and what follows, up to
  // the next run) is encoded alone: the same ids, in memory bounded by the longest word.
  bool words_apart = false;

  void Build();
  void FindWordBoundaries();
  void EncodeLlamaWord(const SpmText& t, size_t begin, size_t end, std::vector<Token>& out) const;
  std::vector<Fragment> SplitSpecial(std::string_view text, bool parse_special) const;
  void EncodeLlama(std::string_view text, bool at_start, std::vector<Token>& out) const;
  void EmitLlamaPiece(std::string_view norm, const std::vector<bool>& escaped_space, size_t start,
                      size_t len, std::vector<Token>& out) const;
  void EncodeGpt2(std::string_view text, std::vector<Token>& out) const;
  void EncodeBpePiece(std::string_view piece, std::vector<Token>& out) const;
  void AppendPiece(Token t, std::string& out) const;
};

void Tokenizer::Impl::Build() {
  const size_t n = spec.tokens.size();
  gpt2 = spec.model == "gpt2";
  if (gpt2) {
    pre = PreTokenizerFromName(spec.pre).value();
    ignore_merges = PreTokenizerIgnoresMerges(spec.pre);
    nfc = PreTokenizerNormalizesNfc(spec.pre);
  }
  types.assign(n, TokenType::kNormal);
  for (size_t i = 0; i < spec.token_types.size(); ++i) {
    types[i] = static_cast<TokenType>(spec.token_types[i]);
  }
  token_ids.reserve(n);
  for (size_t i = 0; i < n; ++i) token_ids.emplace(spec.tokens[i], static_cast<Token>(i));
  byte_tokens.fill(-1);
  if (!gpt2) {
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
  } else {
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
  for (std::string_view text : {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>"}) {
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
      if (i > plain_begin) {
        out.push_back({text.substr(plain_begin, i - plain_begin), -1, plain_begin == 0});
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
  RunMerges(
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
  RunMerges(
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
    }
  }
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
    for (size_t pos = 0; pos < text.size();) {
      if (std::string_view(text).substr(pos).starts_with(kSpaceMarker)) {
        out.push_back(' ');
        pos += kSpaceMarker.size();
      } else {
        out.push_back(text[pos++]);
      }
    }
    return;
  }
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
