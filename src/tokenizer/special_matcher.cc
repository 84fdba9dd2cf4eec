// The special-token matcher (special_matcher.h): a trie of reversed token texts with
// Aho-Corasick fail links.
#include "tokenizer/special_matcher.h"

#include <algorithm>

namespace primekv::tokenizer_internal {

void SpecialMatcher::Add(std::string_view text, Token token) {
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
  if (nodes_[static_cast<size_t>(node)].token < 0) nodes_[static_cast<size_t>(node)].token = token;
}

void SpecialMatcher::Finish() {
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

std::vector<std::pair<size_t, int32_t>> SpecialMatcher::Scan(std::string_view text) const {
  std::vector<std::pair<size_t, int32_t>> found;
  int32_t state = 0;
  for (size_t i = text.size(); i-- > 0;) {
    state = Step(state, static_cast<unsigned char>(text[i]));
    const int32_t best = nodes_[static_cast<size_t>(state)].best;
    if (best >= 0) found.emplace_back(i, best);
  }
  return found;
}

int32_t SpecialMatcher::Step(int32_t state, unsigned char b) const {
  while (true) {
    const auto it = edges_.find(Key(state, b));
    if (it != edges_.end()) return it->second;
    if (state == 0) return 0;
    state = nodes_[static_cast<size_t>(state)].fail;
  }
}

}  // namespace primekv::tokenizer_internal
