// The one table of compression methods: the CLI's --press, the docs and the test matrix read it.
#include <array>

#include "press/scorers.h"

namespace primekv {

namespace {

using press_internal::ScorerResult;
using Factory = ScorerResult (*)(const PressParams&);

struct Entry {
  PressInfo info;
  Factory factory;  // null for "none"
  BudgetKind budget;
};

const std::array<Entry, 13>& Table() {
  static const std::array<Entry, 13> kTable = {{
      {{"none", "Full KV cache, no compression", "baseline", true}, nullptr, BudgetKind::kUniform},
      {{"primekv", "self-query log-attention of the key + log W_O-projected centred value",
        "Zhang & Ilvovsky, Neurocomputing; docs/design.md", true},
       press_internal::MakePrimeKvScorer,
       BudgetKind::kUniform},
      {{"keydiff", "-cos(key, mean unit key)", "arXiv 2504.15364; kvpress keydiff_press.py", true},
       press_internal::MakeKeyDiffScorer,
       BudgetKind::kUniform},
      {{"knorm", "-|key|", "arXiv 2406.11430; kvpress knorm_press.py", true},
       press_internal::MakeKnormScorer,
       BudgetKind::kUniform},
      {{"streamingllm", "4 sink tokens + most recent",
        "arXiv 2309.17453; kvpress streaming_llm_press.py", true},
       press_internal::MakeStreamingLlmScorer,
       BudgetKind::kUniform},
      {{"random", "uniform random scores (seed 42)", "kvpress random_press.py", true},
       press_internal::MakeRandomScorer,
       BudgetKind::kUniform},
      {{"lagkv", "min-max scaled std against the next partition (lag 128)",
        "arXiv 2504.04704; kvpress lagkv_press.py", true},
       press_internal::MakeLagKvScorer,
       BudgetKind::kUniform},
      {{"curdkv", "local (16) squared-norm leverage of key x value, 4 sinks",
        "arXiv 2509.15038; kvpress cur_press.py", true},
       press_internal::MakeCurDkvScorer,
       BudgetKind::kUniform},
      {{"snapkv", "window-64 attention, pooled (kernel 5)",
        "arXiv 2404.14469; kvpress snapkv_press.py", false},
       press_internal::MakeSnapKvScorer,
       BudgetKind::kUniform},
      {{"pyramidkv", "SnapKV scores, pyramid layer budgets (beta 20)",
        "arXiv 2406.02069; kvpress pyramidkv_press.py", false},
       press_internal::MakeSnapKvScorer,
       BudgetKind::kPyramid},
      {{"tova", "last token's attention averaged over heads",
        "arXiv 2401.06104; kvpress tova_press.py", false},
       press_internal::MakeTovaScorer,
       BudgetKind::kUniform},
      {{"expected_attention", "AdaKV over expected attention of future queries (eps 1e-2)",
        "arXiv 2510.00636; kvpress expected_attention_press.py + evaluate_registry.py", false},
       press_internal::MakeExpectedAttentionScorer,
       BudgetKind::kAdaptive},
      {{"oracle", "true future queries' direct contribution (evaluation only)", "docs/design.md §6",
        false},
       press_internal::MakeOracleScorer,
       BudgetKind::kUniform},
  }};
  return kTable;
}

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

std::span<const PressInfo> ListPresses() {
  static const std::vector<PressInfo> kInfos = [] {
    std::vector<PressInfo> v;
    for (const auto& e : Table()) v.push_back(e.info);
    v.push_back({"adakv:<press>", "head-adaptive budgets (AdaKV, alpha 0.2) over any scorer",
                 "arXiv 2407.11550; kvpress adakv_press.py", true});
    return v;
  }();
  return kInfos;
}

std::string PressSpec::Text() const {
  if (name == "adakv") return "adakv:" + params.at("of");
  std::string s = name;
  char sep = ':';
  for (const auto& [k, v] : params) {
    s += sep + k + "=" + v;
    sep = ',';
  }
  return s;
}

Result<PressSpec> ParsePressSpec(const std::string& text_in) {
  const std::string text = Trim(text_in);
  PressSpec spec;
  const auto colon = text.find(':');
  spec.name = Trim(text.substr(0, colon));
  if (spec.name == "streaming_llm") spec.name = "streamingllm";
  if (spec.name.empty()) return Status::Error("empty press name");
  if (colon == std::string::npos) return spec;
  const std::string rest = text.substr(colon + 1);
  if (spec.name == "adakv") {
    auto inner = ParsePressSpec(rest);
    if (!inner.ok()) return inner.status();
    spec.params["of"] = inner->Text();
    return spec;
  }
  size_t start = 0;
  while (start <= rest.size()) {
    const auto comma = rest.find(',', start);
    const std::string item =
        Trim(rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::Error("press '" + text + "': parameter '" + item + "' is not key=value");
    }
    spec.params[Trim(item.substr(0, eq))] = Trim(item.substr(eq + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return spec;
}

Result<Press> MakePress(const PressSpec& spec) {
  if (spec.name == "adakv") {
    auto inner_spec = ParsePressSpec(spec.params.at("of"));
    if (!inner_spec.ok()) return inner_spec.status();
    if (inner_spec->name == "adakv" || inner_spec->name == "none" || inner_spec->name == "oracle") {
      return Status::Error("adakv cannot wrap '" + inner_spec->name + "'");
    }
    auto inner = MakePress(*inner_spec);
    if (!inner.ok()) return inner.status();
    Press p = std::move(inner).value();
    p.name = "adakv:" + p.name;
    p.budget.kind = BudgetKind::kAdaptive;
    return p;
  }
  for (const auto& e : Table()) {
    if (e.info.name != spec.name) continue;
    Press p;
    p.name = spec.Text();
    p.budget.kind = e.budget;
    if (e.factory) {
      auto s = e.factory(spec.params);
      if (!s.ok()) return s.status();
      p.scorer = std::move(s).value();
      const PressNeeds n = p.scorer->Needs();
      p.query_free = n.window_queries == 0 && !n.query_stats && !n.future_queries;
    } else if (!spec.params.empty()) {
      return Status::Error("press none takes no parameters");
    }
    return p;
  }
  std::string names;
  for (const auto& i : ListPresses()) names += (names.empty() ? "" : ", ") + i.name;
  return Status::Error("unknown press '" + spec.name + "' (known: " + names + ")");
}

}  // namespace primekv
