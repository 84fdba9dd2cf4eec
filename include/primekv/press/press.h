// KV-cache compression ("presses"): a scorer gives every cached entry of a layer a score per KV
// head, a budget policy decides how many entries each head keeps, and a pure top-k selection
// picks them (ties broken by lower position). One scorer per file in src/press/; the only list
// of methods is the table in src/press/registry.cc.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "primekv/kv/kv_cache.h"
#include "primekv/model/model.h"
#include "primekv/press/budget_profile.h"
#include "primekv/press/mean_query.h"
#include "primekv/util/status.h"
#include "primekv/util/tensor.h"

namespace primekv {

// What a scorer needs besides keys; the engine gathers only what some scorer asks for.
struct PressNeeds {
  int window_queries = 0;       // post-RoPE queries of the last w context tokens
  bool values = false;          // dequantised values
  bool output_gram = false;     // M = sum_{h in group} W_O^(h)T W_O^(h), per KV head
  bool query_stats = false;     // mean and covariance of pre-RoPE context queries per query head
  bool future_queries = false;  // true future queries (evaluation only: the fidelity protocol)
  bool output_weights = false;  // W_O itself as floats, [d_model, n_heads * d]
  bool mean_query = false;      // per KV head, the map from cached means to the mean query
  // Attention each context entry gets from a second pass that repeats the context (KVzip). It
  // reads no question, but it needs the whole context at once: no chunked prefill, and the
  // entries scored must be those the pass saw (no recompression after later turns).
  bool reconstruction = false;
  // Whether the press reads queries of the forward pass (then it needs a PressCapture and
  // cannot compress during chunked prefill or before the question is known).
  bool ReadsQueries() const { return window_queries > 0 || query_stats || future_queries; }
};
PressNeeds UnionNeeds(const PressNeeds& a, const PressNeeds& b);

struct LayerInput;
// Whether `in` holds every input `needs` asks for (a scorer reads them unchecked): an error
// "press PRESS needs WHAT, which this run does not provide" otherwise.
Status CheckLayerInput(const PressNeeds& needs, const LayerInput& in, std::string_view press);

// One KV head's entries as floats: keys/values [n, d] row-major, positions [n] ascending.
struct HeadEntries {
  std::vector<float> keys;
  std::vector<float> values;
  std::vector<int32_t> positions;
  int size() const { return static_cast<int>(positions.size()); }
};

// Per query head statistics of pre-RoPE queries over the context (ExpectedAttention).
struct QueryStats {
  int64_t count = 0;
  std::vector<double> sum;     // [n_heads, d]
  std::vector<double> sum_sq;  // [n_heads, d, d] sum of outer products
};

// Everything a scorer may read for one layer. The shape comes from the model's config, the
// rest only when the scorer's PressNeeds asked for it.
struct LayerInput {
  explicit LayerInput(const ModelConfig& c) : config(c) {}
  const ModelConfig& config;
  int layer = 0;
  std::span<const float> rope_inv_freq;       // [head_dim / 2] (after any scaling)
  std::span<const HeadEntries> heads;         // [n_kv_heads]
  MatView<const float> window_queries;        // [w, n_heads * d], post-RoPE
  std::span<const int32_t> window_positions;  // [w]
  std::span<const float> output_gram;         // [n_kv_heads, d, d]
  const QueryStats* query_stats = nullptr;
  MatView<const float> future_queries;       // [t, n_heads * d], post-RoPE
  MatView<const float> output_weights;       // W_O [d_model, n_heads * d]
  std::span<const float> reconstruction;     // [n_kv_heads, n]: see PressNeeds::reconstruction
  std::span<const MeanQueryMap> mean_query;  // [n_kv_heads]: see PressNeeds::mean_query
  int32_t next_position = 0;                 // position the next token will get

  int n_layers() const { return config.n_layers; }
  int n_heads() const { return config.n_heads; }  // query heads
  int n_kv_heads() const { return config.n_kv_heads; }
  int head_dim() const { return config.head_dim; }
  int group() const { return config.group(); }
  bool rope_half() const { return config.rope_style == RopeStyle::kHalf; }  // NeoX order
  // KV head h's keys and values as [n, d] matrices (values empty unless PressNeeds::values).
  MatView<const float> Keys(int h) const { return Rows(heads[static_cast<size_t>(h)].keys); }
  MatView<const float> Values(int h) const { return Rows(heads[static_cast<size_t>(h)].values); }
  // KV head h's W_O Gram matrix [d, d].
  MatView<const float> Gram(int h) const {
    const int64_t d = head_dim();
    return {output_gram.data() + h * d * d, d, d};
  }
  // Query head qh's columns of a query matrix [rows, n_heads * d]: [rows, d].
  MatView<const float> QueryHead(MatView<const float> q, int qh) const {
    if (q.data == nullptr) return {};
    return {q.data + static_cast<int64_t>(qh) * head_dim(), q.rows, head_dim(), q.stride};
  }

 private:
  MatView<const float> Rows(const std::vector<float>& x) const {
    const int64_t d = head_dim();
    return {x.data(), static_cast<int64_t>(x.size()) / d, d};
  }
};

// scores[h][i]: higher = keep; one row per KV head, length heads[h].size().
using HeadScores = std::vector<std::vector<float>>;

// A press's parameters by name (ordered, so their text is canonical).
using PressParams = std::map<std::string, std::string>;

class Scorer {
 public:
  virtual ~Scorer() = default;
  virtual PressNeeds Needs() const { return {}; }
  virtual void Score(const LayerInput& in, HeadScores& out) const = 0;
  // True when scores are probabilities comparable across heads (head-adaptive budgets use them
  // raw); otherwise each head's scores are normalised to sum to one first.
  virtual bool ComparableAcrossHeads() const { return false; }
  // True when scores are in one unit across layers (estimates of the log of the same
  // residual-stream perturbation), so one threshold over all layers is meaningful.
  virtual bool ComparableAcrossLayers() const { return false; }

  // Every parameter the scorer read, with the value it used (given or default), in canonical
  // text; MakeScorer fills it from the ParamReader that built the scorer.
  const PressParams& resolved_params() const { return resolved_params_; }
  void set_resolved_params(PressParams p) { resolved_params_ = std::move(p); }

 private:
  PressParams resolved_params_;
};

// kGlobal: one threshold over all layers' entries together (docs/design.md §3), with the AdaKV
// safeguard per head; the total kept equals the uniform total.
// kShared: every layer and head keeps the same positions (results.md §6.13), each layer as
// many as uniform; needs every head to hold the same positions (one compression of a context).
// kProfile: each layer's KV head keeps the share a per-model BudgetProfile gives it.
enum class BudgetKind { kUniform, kPyramid, kAdaptive, kGlobal, kShared, kProfile };

struct BudgetOptions {
  BudgetKind kind = BudgetKind::kUniform;
  int pyramid_window = 64;  // PyramidKV: observation window w
  double pyramid_beta = 20;
  double adaptive_alpha = 0.2;  // AdaKV safeguard: each head keeps at least alpha * keep
  bool compress_local = false;  // sliding-window layers compressed too ("local=compress")
  std::shared_ptr<const BudgetProfile> profile;  // kProfile's shares
};

// KVPress's per-head count: max(1, floor(n * (1 - ratio))).
int KeepCount(int n, double ratio);
// PyramidKV's schedule for one layer (falls back to KeepCount when the chain fails).
int PyramidKeep(int n, double ratio, int layer, int n_layers, int window, double beta);
// Indices of the `keep` highest scores, returned sorted ascending; ties -> lower index.
std::vector<int32_t> SelectTopK(std::span<const float> scores, int keep);
// Kept rows per head for a layer under a budget policy.
std::vector<std::vector<int32_t>> SelectForLayer(const HeadScores& scores, double ratio,
                                                 const BudgetOptions& budget, bool comparable,
                                                 int layer, int n_layers);
// Kept rows per layer and head under one threshold over all layers' raw scores: the sum of the
// uniform shares KeepCount(n, ratios[l]) is kept, and each head keeps at least
// floor(adaptive_alpha * its share) of its own top entries (never none).
std::vector<std::vector<std::vector<int32_t>>> SelectAcrossLayers(
    std::span<const HeadScores> layers, std::span<const double> ratios,
    const BudgetOptions& budget);

// Kept rows per layer and head when every head holds the same n positions in the same rows:
// a position's shared score is its best quantile over the layer-heads (its rank in a head's
// scores over n - 1), ties broken by the mean quantile; layer l keeps its top
// KeepCount(n, ratios[l]) positions in every head.
std::vector<std::vector<std::vector<int32_t>>> SelectSharedPositions(
    std::span<const HeadScores> layers, std::span<const double> ratios);

// A parsed --press value: "name" or "name:key=value,key=value", and "adakv:<scorer>".
struct PressSpec {
  std::string name;
  PressParams params;
  std::string Text() const;
};
Result<PressSpec> ParsePressSpec(const std::string& text);
// Splits a list of presses. With ';' anywhere, ';' alone separates presses
// ("none;primekv:key=cosine,value=norm"). Otherwise ',' separates them, except that an item of
// the form key=value continues the previous press's parameters, so
// "none,primekv:key=cosine,value=norm,snapkv" is three presses. Empty entries are errors.
Result<std::vector<std::string>> SplitPressList(std::string_view text);

struct Press {
  std::string name;  // registry name as given
  // The press with every parameter filled in, defaults included ("primekv" ->
  // "primekv:combine=logit,key=...,rounds=one,value=wo_centered"; "adakv:" + the inner press's;
  // "none"): two presses with equal text compute the same scores. An evaluation folder records it
  // per press, so a changed default cannot mix rows of two methods under one name.
  std::string resolved;
  std::unique_ptr<Scorer> scorer;  // null for "none"
  BudgetOptions budget;
  // Usable for chunked prefill and before the question is known (KVzip reads no question but
  // needs the whole context for its second pass, so it is not).
  bool query_free = true;
};

struct PressInfo {
  std::string name;
  std::string summary;
  std::string source;  // paper / reference implementation the defaults come from
  // Derived by ListPresses from the press MakePress builds (Press::query_free); a budget wrapper
  // ("adakv:<press>") is as query-free as the press it wraps, so it says false and wraps_press.
  bool query_free = false;
  bool wraps_press = false;
};
// The registry table, in display order.
std::span<const PressInfo> ListPresses();
Result<Press> MakePress(const PressSpec& spec);

// A row of the registry table (src/press/registry.cc; docs/adding-a-press.md). A scorer row
// names its factory and budget; a budget-wrapper row ("adakv:<press>") has no factory and
// `wraps` = its prefix: it runs the inner press's scorer under its own budget.
using ScorerFactory = Result<std::unique_ptr<Scorer>> (*)(const PressParams& params,
                                                          const std::string& press);
struct PressEntry {
  PressInfo info;
  ScorerFactory factory = nullptr;  // null for "none" and for budget wrappers
  BudgetKind budget = BudgetKind::kUniform;
  std::string_view wraps;  // budget wrappers only
};
std::span<const PressEntry> PressTable();
// MakePress over another table (tests add presses of their own to a copy of PressTable()).
Result<Press> MakePress(const PressSpec& spec, std::span<const PressEntry> table);

}  // namespace primekv
