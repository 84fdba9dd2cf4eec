// The one table of compression methods: the CLI's --press, the docs and the test matrix read it.
#include <algorithm>
#include <array>
#include <string_view>

#include "press/scorer_util.h"
#include "press/scorers.h"
#include "primekv/text.h"

namespace primekv {

namespace {

using press_internal::ScorerResult;
using Factory = ScorerResult (*)(const PressParams&, const std::string& press);

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
      {{"pyramidkv",
        "SnapKV scores, pyramid layer budgets (beta 20; window also sets the budget window)",
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

// PyramidKV = SnapKV scores + the pyramid budget; its own parameters set the budget.
Result<Press> MakePyramidKv(const PressParams& params, const Entry& e) {
  PressParams rest = params;
  Press p;
  p.budget.kind = e.budget;
  press_internal::ParamReader r(params, "pyramidkv");
  p.budget.pyramid_beta = r.Real("beta", p.budget.pyramid_beta, 1, 1e6);
  p.budget.pyramid_window =
      r.Integer("window", p.budget.pyramid_window, 1, press_internal::kMaxPressLength);
  r.Text("kernel", "");  // read by the scorer below
  if (Status s = r.Finish(); !s.ok()) return s;
  rest.erase("beta");
  auto scorer = e.factory(rest, "pyramidkv");
  if (!scorer.ok()) return scorer.status();
  p.scorer = std::move(scorer).value();
  return p;
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
  if (name == "adakv") {
    auto it = params.find("of");
    return "adakv:" + (it == params.end() ? std::string() : it->second);
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
  // Iterative: "adakv:" may prefix one press; anything deeper is refused before any copy, so a
  // long "adakv:adakv:..." costs linear time and memory.
  std::string_view text = text_in;
  bool adaptive = false;
  for (;;) {
    const std::string head = Trim(text.substr(0, std::min(text.find(':'), text.size())));
    if (head != "adakv") break;
    if (adaptive) return Status::Error("press 'adakv:adakv...': adakv cannot wrap adakv");
    adaptive = true;
    const auto colon = text.find(':');
    if (colon == std::string_view::npos)
      return Status::Error("press adakv needs an inner press: adakv:<press>, e.g. adakv:snapkv");
    text = text.substr(colon + 1);
  }
  const std::string shown = Shown(text_in);
  PressSpec spec;
  const auto colon = text.find(':');
  spec.name = Trim(text.substr(0, std::min(colon, text.size())));
  if (spec.name == "streaming_llm") spec.name = "streamingllm";
  if (spec.name.empty()) {
    return Status::Error(adaptive
                             ? "press adakv needs an inner press: adakv:<press>, e.g. adakv:snapkv"
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
  if (adaptive) {
    PressSpec outer;
    outer.name = "adakv";
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

Result<Press> MakePress(const PressSpec& spec) {
  if (spec.name == "adakv") {
    auto of = spec.params.find("of");
    if (of == spec.params.end() || spec.params.size() != 1)
      return Status::Error("press adakv needs an inner press: adakv:<press>, e.g. adakv:snapkv");
    auto inner_spec = ParsePressSpec(of->second);
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
    if (e.info.name == "pyramidkv") {
      auto made = MakePyramidKv(spec.params, e);
      if (!made.ok()) return made.status();
      p = std::move(made).value();
    } else if (e.factory) {
      p.budget.kind = e.budget;
      auto s = e.factory(spec.params, e.info.name);
      if (!s.ok()) return s.status();
      p.scorer = std::move(s).value();
    } else if (!spec.params.empty()) {
      return Status::Error("press none takes no parameters");
    }
    p.name = spec.Text();
    if (p.scorer) {
      const PressNeeds n = p.scorer->Needs();
      p.query_free = n.window_queries == 0 && !n.query_stats && !n.future_queries;
    }
    return p;
  }
  std::string names;
  for (const auto& i : ListPresses()) names += (names.empty() ? "" : ", ") + i.name;
  return Status::Error("unknown press '" + Shown(spec.name) + "' (known: " + names + ")");
}

}  // namespace primekv
