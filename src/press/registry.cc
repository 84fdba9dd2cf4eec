// The one table of compression methods: the CLI's --press, the docs and the test matrix read it;
// MakePress builds a press from a row. The spec grammar ("name:key=value,...") is press_spec.cc,
// what a press needs and its input check press_needs.cc.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "press/press_spec.h"
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv {

namespace {

using Entry = PressEntry;
using press_internal::FindWrapper;
using press_internal::NeedsInner;
using press_internal::Shown;

// Every press, in the order `primekv list-presses` shows them: the one list the CLI, the server
// and the test matrix read.
const Entry kPresses[] = {
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
    {{"lookback", "max prefill attention from the context's later tokens (research)",
      "docs/results.md §8"},
     press_internal::MakeLookbackScorer,
     BudgetKind::kUniform,
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
    {{"oracle", "true future queries' direct contribution (evaluation only)", "docs/design.md §6"},
     press_internal::MakeOracleScorer,
     BudgetKind::kUniform,
     {}},
    {{"adakv:<press>", "head-adaptive budgets (AdaKV, alpha 0.2) over any scorer",
      "arXiv 2407.11550; kvpress adakv_press.py"},
     nullptr,
     BudgetKind::kAdaptive,
     "adakv"},
};

std::span<const Entry> Table() { return kPresses; }

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
// every layer and head (ranks only, so any scorer); "profile=FILE" gives each head its share
// from a model's budget profile ("nest=R": nested below R, docs/design.md §3); the row's own
// budget otherwise.
Result<Press> MakeScored(const PressParams& params, const Entry& e) {
  Press p;
  p.budget.kind = e.budget;
  if (params.contains("nest") && !params.contains("profile"))
    return Status::Error("press " + e.info.name + ": nest= nests a budget profile: add profile=");
  if (auto f = params.find("profile"); f != params.end()) {
    if (params.contains("budget"))
      return Status::Error("press " + e.info.name + ": profile= is a budget: drop budget=");
    if (f->second == "auto")
      return Status::Error("press " + e.info.name +
                           ": profile=auto names the model's profile, and this caller has no "
                           "model to find it from; give profile=FILE");
    PRIMEKV_ASSIGN_OR_RETURN(BudgetProfile profile, BudgetProfile::Load(f->second));
    PressParams rest = params;
    rest.erase("profile");
    PressParams nest_resolved;
    if (auto n = rest.find("nest"); n != rest.end()) {
      const PressParams nest{{"nest", n->second}};  // the reader holds a reference
      press_internal::ParamReader r(nest, e.info.name);
      const double need_ratio = r.Real("nest", 0.9, profile.ratios.front(), profile.ratios.back());
      PRIMEKV_RETURN_IF_ERROR(r.Finish());
      profile = profile.NestedBelow(need_ratio);
      nest_resolved = r.Resolved();
      rest.erase(n);
    }
    p.budget.kind = BudgetKind::kProfile;
    p.budget.profile = std::make_shared<const BudgetProfile>(std::move(profile));
    PRIMEKV_ASSIGN_OR_RETURN(p.scorer, e.factory(rest, e.info.name));
    // nest= as read (0.90 and 0.9 are one press), beside the scorer's own parameters.
    if (!nest_resolved.empty())
      p.scorer->set_resolved_params(MergeResolved(p.scorer->resolved_params(), nest_resolved));
    return p;
  }
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

Result<Press> MakePress(const PressSpec& spec) { return MakePress(spec, Table()); }

Result<Press> MakePress(const PressSpec& spec, std::span<const PressEntry> table) {
  if (const Entry* w = FindWrapper(table, spec.name)) return MakeWrapped(spec, *w, table);
  for (const auto& e : table) {
    if (e.info.name != spec.name) continue;
    Press p;
    // "local=compress": sliding-window layers are compressed too (by default they are left
    // alone: their window already bounds them). Every press but none takes it.
    PressParams params = spec.params;
    bool compress_local = false;
    if (auto l = params.find("local"); l != params.end() && e.factory) {
      if (l->second != "keep" && l->second != "compress")
        return Status::Error("press " + e.info.name +
                             ": local must be 'keep' or 'compress', not '" + Shown(l->second) +
                             "'");
      compress_local = l->second == "compress";
      params.erase(l);
    }
    if (e.info.name == "pyramidkv") {
      PRIMEKV_ASSIGN_OR_RETURN(p, MakePyramidKv(params, e));
    } else if (e.factory) {
      PRIMEKV_ASSIGN_OR_RETURN(p, MakeScored(params, e));
    } else if (!spec.params.empty()) {
      return Status::Error("press none takes no parameters");
    }
    p.budget.compress_local = compress_local;
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

}  // namespace primekv
