// libFuzzer target for what `primekv eval` reads back from its --out folder: config.json (parsed,
// type-checked, compared with a run's configuration and merged) and results.jsonl lines (parsed
// into rows, keyed for resume, repaired). Any bytes must give a value or a Status, never a crash
// or an exception.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "eval/results.h"
#include "eval/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace primekv;
  using nlohmann::json;
  const std::string text(reinterpret_cast<const char*>(data), size);

  auto config = eval_internal::ParseRunConfig(text, "config.json");
  if (config.ok()) {
    const json current = {
        {"format", "primekv-eval-config-1"},
        {"model", {{"path", "m.gguf"}, {"size", 1}, {"hash", "0123456789abcdef"}, {"scheme", "s"}}},
        {"settings", {{"mode", "context"}, {"seed", 42}, {"chunk", nullptr}}},
        {"tasks", {{"niah_single_1", "generated"}}},
        {"presses", {{"knorm", "knorm"}, {"none", "none"}}}};
    Status st = eval_internal::CheckRunConfig(*config, current, "out", {"knorm", "none"});
    (void)st;
    const json merged = eval_internal::MergeRunConfig(*config, current);
    (void)merged.dump(2, ' ', false, json::error_handler_t::replace);
  }

  std::vector<std::string> warnings;
  const auto rows = eval_internal::ParseResultRows(text, "results.jsonl", &warnings);
  std::set<double> ratios;
  for (const eval_internal::ResultRow& r : rows) {
    Check(r.turn >= 0 && r.turn < r.turns, "turn within turns");
    Check(r.ratio >= 0 && r.ratio < 1, "ratio in [0, 1)");
    Check(!r.score || (*r.score >= 0 && *r.score <= 1), "score in [0, 1]");
    (void)eval_internal::UnitKey(r);
    ratios.insert(r.ratio);
  }
  (void)eval_internal::RatioColumnsHead(ratios, " n |");
  for (const std::string& w : warnings) Check(w.rfind("results.jsonl:", 0) == 0, "warning names");
  return 0;
}
