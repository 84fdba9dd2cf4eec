// The one table of compression methods: the CLI's --press, the docs and the test matrix read it.
#include <algorithm>
#include <array>
#include <string_view>

#include "press/scorer_util.h"
#include "press/scorers.h"
#include "primekv/util/text.h"

namespace primekv {

namespace {

using Entry = PressEntry;

const std::array<Entry, 15>& Table() {
  static const std::array<Entry, 15> kTable = {{
      {{"none", "Full KV cache, no compression", "baseline"}, nullptr, BudgetKind::kUniform, {}},
      {{"primekv", "self-query log-attention of the key + log W_O-projected centred value",
        "Zhang & Ilvovsky, Neurocomputing; docs/design.md"},
       press_internal::MakePrimeKvScorer,
       BudgetKind::kUniform,
       {}},
      {{"keydiff", "-cos(key, mean unit key)", "arXiv 2504.15364; kvpress keydiff_press.py"},
       press_internal::MakeKeyDiffScorer,
       BudgetKind::kUniform,
       {}},
      {{"knorm", "-|key|", "arXiv 2406.11430; kvpress knorm_press.py"},
       press_internal::MakeKnormScorer,
       BudgetKind::kUniform,
       {}},
      {{"streamingllm", "4 sink tokens + most recent",
        "arXiv 2309.17453; kvpress streaming_llm_press.py"},
       press_internal::MakeStreamingLlmScorer,
       BudgetKind::kUniform,
       {}},
      {{"random", "uniform random scores (seed 42)", "kvpress random_press.py"},
       press_internal::MakeRandomScorer,
       BudgetKind::kUniform,
       {}},
      {{"lagkv", "min-max scaled std against the next partition (lag 128)",
        "arXiv 2504.04704; kvpress lagkv_press.py"},
       press_internal::MakeLagKvScorer,
       BudgetKind::kUniform,
       {}},
      {{"curdkv", "local (16) squared-norm leverage of key x value, 4 sinks",
        "arXiv 2509.15038; kvpress cur_press.py"},
       press_internal::MakeCurDkvScorer,
       BudgetKind::kUniform,
       {}},
      {{"kvzip",
        "max attention from a pass that repeats the context, 4 sinks, one budget over layers",
        "arXiv 2505.23416; kvpress kvzip_press.py"},
       press_internal::MakeKvzipScorer,
       BudgetKind::kGlobal,
       {}},
      {{"snapkv", "window-64 attention, pooled (kernel 5)",
        "arXiv 2404.14469; kvpress snapkv_press.py"},
       press_internal::MakeSnapKvScorer,
       BudgetKind::kUniform,
       {}},
      {{"pyramidkv",
        "SnapKV scores, pyramid layer budgets (beta 20; window also sets the budget window)",
        "arXiv 2406.02069; kvpress pyramidkv_press.py"},
       press_internal::MakeSnapKvScorer,
       BudgetKind::kPyramid,
       {}},
      {{"tova", "last token's attention averaged over heads",
        "arXiv 2401.06104; kvpress tova_press.py"},
       press_internal::MakeTovaScorer,
       BudgetKind::kUniform,
       {}},
      {{"expected_attention", "AdaKV over expected attention of future queries (eps 1e-2)",
        "arXiv 2510.00636; kvpress expected_attention_press.py + evaluate_registry.py"},
       press_internal::MakeExpectedAttentionScorer,
       BudgetKind::kAdaptive,
       {}},
      {{"oracle", "true future queries' direct contribution (evaluation only)",
        "docs/design.md §6"},
       press_internal::MakeOracleScorer,
       BudgetKind::kUniform,
       {}},
      {{"adakv:<press>", "head-adaptive budgets (AdaKV, alpha 0.2) over any scorer",
        "arXiv 2407.11550; kvpress adakv_press.py"},
       nullptr,
       BudgetKind::kAdaptive,
       "adakv"},
  }};
  return kTable;
}

std::string Trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string_view::npos ? "" : std::string(s.substr(b, e - b + 1));
}

// User text echoed in messages: printable ASCII only, bounded length.
std::string Shown(std::string_view s) { return Printable(s, 60); }

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '<' || c == '>';
}

// The budget wrapper row whose prefix is `name` ("adakv"), if any.
const Entry* FindWrapper(std::span<const Entry> table, std::string_view name) {
  for (const Entry& e : table) {
    if (!e.wraps.empty() && e.wraps == name) return &e;
  }
  return nullptr;
}

std::string NeedsInner(std::string_view w) {
  const std::string s(w);
  return "press " + s + " needs an inner press: " + s + ":<press>, e.g. " + s + ":snapkv";
}

// `name` with `params` as the press's canonical text ("name:k=v,..." in key order).
std::string ResolvedText(const std::string& name, const PressParams& params) {
  std::string s = name;
  char sep = ':';
  for (const auto& [k, v] : params) {
    s.append(1, sep).append(k).append("=").append(v);
    sep = ',';
  }
  return s;
}

// The parameters as given, each overridden by the value a reader resolved it to, plus every
// default the readers filled in. A parameter no reader records (budget=global) stays as given.
PressParams MergeResolved(PressParams given, const PressParams& read) {
  for (const auto& [k, v] : read) given[k] = v;
  return given;
}

// PyramidKV = SnapKV scores + the pyramid budget; its own parameters set the budget.
Result<Press> MakePyramidKv(const PressParams& params, const Entry& e) {
  PressParams rest = params;
  Press p;
  p.budget.kind = e.budget;
  press_internal::ParamReader r(params, "pyramidkv");
  p.budget.pyramid_beta = r.Real("beta", p.budget.pyramid_beta, 1, 1e6);
  p.budget.pyramid_window =
      r.Integer("window", p.budget.pyramid_window, 1, press_internal::kMaxPressLength);
  r.Defer("kernel");  // read by the scorer below
  PRIMEKV_RETURN_IF_ERROR(r.Finish());
  rest.erase("beta");
  PRIMEKV_ASSIGN_OR_RETURN(p.scorer, e.factory(rest, "pyramidkv"));
  // The scorer's window is the budget's (both read the one parameter); its kernel is its own.
  p.scorer->set_resolved_params(MergeResolved(r.Resolved(), p.scorer->resolved_params()));
  return p;
}

// A scorer row's press. "budget=global" (only over scores in one unit across layers) spends
// the budget under one threshold over all layers; "budget=shared" keeps the same positions in
// every layer and head (ranks only, so any scorer); the row's own budget otherwise.
Result<Press> MakeScored(const PressParams& params, const Entry& e) {
  Press p;
  p.budget.kind = e.budget;
  auto b = params.find("budget");
  if (b == params.end()) {
    PRIMEKV_ASSIGN_OR_RETURN(p.scorer, e.factory(params, e.info.name));
    return p;
  }
  if (b->second != "global" && b->second != "shared")
    return Status::Error("press " + e.info.name + ": budget must be 'global' or 'shared', not '" +
                         Shown(b->second) + "'");
  PressParams rest = params;
  rest.erase("budget");
  PRIMEKV_ASSIGN_OR_RETURN(p.scorer, e.factory(rest, e.info.name));
  if (b->second == "shared") {
    p.budget.kind = BudgetKind::kShared;
    return p;
  }
  if (!p.scorer->ComparableAcrossLayers())
    return Status::Error("press " + e.info.name +
                         ": budget=global needs scores comparable across layers");
  p.budget.kind = BudgetKind::kGlobal;
  return p;
}

}  // namespace

std::span<const PressEntry> PressTable() { return Table(); }

// query_free is derived from each press as MakePress builds it with its defaults, never typed
// by hand: a table flag could disagree with what the compressor and the schedules check.
std::span<const PressInfo> ListPresses() {
  static const std::vector<PressInfo> kInfos = [] {
    std::vector<PressInfo> v;
    for (const auto& e : Table()) {
      PressInfo info = e.info;
      info.wraps_press = !e.wraps.empty();
      if (!info.wraps_press) {
        auto press = MakePress(PressSpec{e.info.name, {}}, Table());
        info.query_free = press.ok() && press->query_free;
      }
      v.push_back(std::move(info));
    }
    return v;
  }();
  return kInfos;
}

std::string PressSpec::Text() const {
  if (FindWrapper(Table(), name)) {
    auto it = params.find("of");
    return name + ":" + (it == params.end() ? std::string() : it->second);
  }
  std::string s = name;
  char sep = ':';
  for (const auto& [k, v] : params) {
    s += sep + k + "=" + v;
    sep = ',';
  }
  return s;
}

Result<PressSpec> ParsePressSpec(const std::string& text_in) {
  // Iterative: a budget wrapper ("adakv:") may prefix one press; anything deeper is refused
  // before any copy, so a long "adakv:adakv:..." costs linear time and memory.
  std::string_view text = text_in;
  const Entry* wrapper = nullptr;
  for (;;) {
    const std::string head = Trim(text.substr(0, std::min(text.find(':'), text.size())));
    const Entry* w = FindWrapper(Table(), head);
    if (w == nullptr) break;
    if (wrapper) {
      return Status::Error("press '" + std::string(wrapper->wraps) + ":" + head +
                           "...': " + std::string(wrapper->wraps) + " cannot wrap " + head);
    }
    wrapper = w;
    const auto colon = text.find(':');
    if (colon == std::string_view::npos) return Status::Error(NeedsInner(head));
    text = text.substr(colon + 1);
  }
  const std::string shown = Shown(text_in);
  PressSpec spec;
  const auto colon = text.find(':');
  spec.name = Trim(text.substr(0, std::min(colon, text.size())));
  if (spec.name == "streaming_llm") spec.name = "streamingllm";
  if (spec.name.empty()) {
    return Status::Error(wrapper ? NeedsInner(wrapper->wraps)
                                 : "press '" + shown + "': empty press name");
  }
  for (char c : spec.name) {
    if (!IsNameChar(c)) return Status::Error("press '" + shown + "': bad press name");
  }
  if (colon != std::string_view::npos) {
    const std::string_view rest = text.substr(colon + 1);
    size_t start = 0;
    while (start <= rest.size()) {
      const auto comma = rest.find(',', start);
      const std::string item =
          Trim(rest.substr(start, comma == std::string_view::npos ? rest.npos : comma - start));
      const auto eq = item.find('=');
      if (eq == std::string::npos || eq == 0) {
        return Status::Error("press '" + shown + "': parameter '" + Shown(item) +
                             "' is not key=value");
      }
      const std::string key = Trim(item.substr(0, eq));
      const std::string value = Trim(item.substr(eq + 1));
      if (value.empty())
        return Status::Error("press '" + shown + "': parameter '" + Shown(key) + "' has no value");
      if (key == "of") return Status::Error("press '" + shown + "': 'of' is not a parameter");
      if (!spec.params.emplace(key, value).second) {
        return Status::Error("press '" + shown + "': parameter '" + Shown(key) + "' given twice");
      }
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  if (wrapper) {
    PressSpec outer;
    outer.name = std::string(wrapper->wraps);
    outer.params["of"] = spec.Text();
    return outer;
  }
  return spec;
}

Result<std::vector<std::string>> SplitPressList(std::string_view text) {
  std::vector<std::string> out;
  const bool semicolons = text.find(';') != std::string_view::npos;
  const char sep = semicolons ? ';' : ',';
  size_t start = 0;
  while (start <= text.size()) {
    const auto end = std::min(text.find(sep, start), text.size());
    const std::string item = Trim(text.substr(start, end - start));
    // "a:k=v,k2=v2,b": an item that is key=value (no ':' before its '=') continues the previous
    // press's parameters, so comma lists stay unambiguous for multi-parameter presses.
    const auto eq = item.find('=');
    const bool continues = !semicolons && eq != std::string::npos && item.find(':') > eq;
    if (item.empty()) {
      return Status::Error("press list '" + Shown(text) + "' has an empty entry");
    } else if (continues) {
      if (out.empty() || out.back().find(':') == std::string::npos) {
        return Status::Error("press list '" + Shown(text) + "': parameter '" + Shown(item) +
                             "' follows no press (write NAME:" + Shown(item) + ")");
      }
      out.back() += "," + item;
    } else {
      out.push_back(item);
    }
    start = end + 1;
  }
  return out;
}

namespace {

// The inner press of a budget wrapper, with the wrapper's budget.
Result<Press> MakeWrapped(const PressSpec& spec, const Entry& w, std::span<const Entry> table) {
  auto of = spec.params.find("of");
  if (of == spec.params.end() || spec.params.size() != 1) return Status::Error(NeedsInner(w.wraps));
  PRIMEKV_ASSIGN_OR_RETURN(const PressSpec inner_spec, ParsePressSpec(of->second));
  const std::string refused = std::string(w.wraps) + " cannot wrap '" + inner_spec.name + "'";
  if (FindWrapper(table, inner_spec.name)) return Status::Error(refused);
  PRIMEKV_ASSIGN_OR_RETURN(Press p, MakePress(inner_spec, table));
  // Nothing to budget ("none"), or a press only the fidelity protocol can run.
  if (!p.scorer || p.scorer->Needs().future_queries) return Status::Error(refused);
  p.name = std::string(w.wraps) + ":" + p.name;
  p.resolved = std::string(w.wraps) + ":" + p.resolved;
  p.budget.kind = w.budget;
  return p;
}

}  // namespace

Result<Press> MakePress(const PressSpec& spec) { return MakePress(spec, Table()); }

Result<Press> MakePress(const PressSpec& spec, std::span<const PressEntry> table) {
  if (const Entry* w = FindWrapper(table, spec.name)) return MakeWrapped(spec, *w, table);
  for (const auto& e : table) {
    if (e.info.name != spec.name) continue;
    Press p;
    if (e.info.name == "pyramidkv") {
      PRIMEKV_ASSIGN_OR_RETURN(p, MakePyramidKv(spec.params, e));
    } else if (e.factory) {
      PRIMEKV_ASSIGN_OR_RETURN(p, MakeScored(spec.params, e));
    } else if (!spec.params.empty()) {
      return Status::Error("press none takes no parameters");
    }
    p.name = spec.Text();
    p.resolved =
        ResolvedText(e.info.name, p.scorer ? MergeResolved(spec.params, p.scorer->resolved_params())
                                           : spec.params);
    if (p.scorer)
      p.query_free = !p.scorer->Needs().ReadsQueries() && !p.scorer->Needs().reconstruction;
    return p;
  }
  std::string names;
  for (const auto& e : table) names += (names.empty() ? "" : ", ") + e.info.name;
  return Status::Error("unknown press '" + Shown(spec.name) + "' (known: " + names + ")");
}

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
