// Finds, for every position of a text, the longest special token starting there, in one pass
// over the text: an Aho-Corasick automaton over the reversed token texts, fed the text from its
// end, reports at position i the longest reversed token ending there, i.e. the longest token
// starting at i. Work is O(text + matches) however many lengths and shared prefixes the tokens
// have (a per-position walk over 4,000 tokens "a...aZ" is quadratic on "aaaa...").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "primekv/tokenizer/tokenizer.h"

namespace primekv::tokenizer_internal {

class SpecialMatcher {
 public:
  // Adds a token text; where two tokens share a text, the first added keeps it.
  void Add(std::string_view text, Token token);

  // Fail links and, per node, the deepest node with a token on its fail chain (itself first).
  void Finish();

  bool empty() const { return nodes_.size() <= 1; }

  // (position, node with the token) for every position where a special token starts, from the
  // last position to the first.
  std::vector<std::pair<size_t, int32_t>> Scan(std::string_view text) const;

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
  int32_t Step(int32_t state, unsigned char b) const;

  std::vector<Node> nodes_ = {Node{-1, 0, 0, -1, -1}};
  std::vector<unsigned char> byte_ = {0};
  std::unordered_map<uint64_t, int32_t> edges_;
};

}  // namespace primekv::tokenizer_internal
