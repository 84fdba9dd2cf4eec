// What a press needs besides keys (PressNeeds), and the check that a layer's input provides it
// before a scorer reads it unchecked.
#include <algorithm>
#include <string>
#include <string_view>

#include "primekv/press/press.h"

namespace primekv {

Status CheckLayerInput(const PressNeeds& needs, const LayerInput& in, std::string_view press) {
  const int64_t d = in.head_dim(), kv_heads = in.n_kv_heads();
  const char* missing = nullptr;
  if (needs.window_queries > 0 && in.window_queries.rows == 0) {
    missing = "window queries (post-RoPE queries of the last context tokens)";
  } else if (needs.query_stats && in.query_stats == nullptr) {
    missing = "query statistics (pre-RoPE context queries)";
  } else if (needs.output_gram && std::ssize(in.output_gram) != kv_heads * d * d) {
    missing = "the W_O Gram matrices";
  } else if (needs.output_weights && in.output_weights.rows == 0) {
    missing = "the output projection W_O";
  } else if (needs.future_queries && in.future_queries.rows == 0) {
    missing = "future queries";
  } else if (needs.mean_query && std::ssize(in.mean_query) != kv_heads) {
    missing = "the mean-query maps (the layer's projections)";
  } else if (needs.reconstruction && in.reconstruction.empty()) {
    missing = "reconstruction scores (a second pass of the model over the context)";
  }
  if (needs.values && missing == nullptr) {
    for (const HeadEntries& h : in.heads) {
      if (h.values.size() != h.keys.size()) missing = "the values";
    }
  }
  if (missing == nullptr) return Status::Ok();
  return Status::Error("press " + std::string(press) + " needs " + missing +
                       ", which this run does not provide");
}

PressNeeds UnionNeeds(const PressNeeds& a, const PressNeeds& b) {
  PressNeeds n;
  n.window_queries = std::max(a.window_queries, b.window_queries);
  n.values = a.values || b.values;
  n.output_gram = a.output_gram || b.output_gram;
  n.query_stats = a.query_stats || b.query_stats;
  n.future_queries = a.future_queries || b.future_queries;
  n.reconstruction = a.reconstruction || b.reconstruction;
  n.output_weights = a.output_weights || b.output_weights;
  n.mean_query = a.mean_query || b.mean_query;
  return n;
}

}  // namespace primekv
