// libFuzzer target for the task-file loaders (jsonl:, aime:, longbench:): any bytes must give
// samples or a Status, never a crash; every sample returned must be usable by the runner (an id,
// at least one turn with references and a positive answer length, a known metric) and unique
// by id; scoring any prediction against it must stay in [0, 1].
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "eval/eval_internal.h"
#include "primekv/eval/eval.h"

namespace primekv {
namespace {

void CheckSamples(const std::vector<EvalSample>& samples, const TaskOptions& options,
                  const std::string& prediction) {
  Check(!samples.empty(), "a loaded file has a sample");
  if (options.file_samples > 0)
    Check(static_cast<int>(samples.size()) <= options.file_samples, "file_samples respected");
  std::set<std::string> ids;
  for (const EvalSample& s : samples) {
    Check(ids.insert(s.id).second, "ids are unique");
    Check(IsKnownMetric(s.metric), "known metric");
    Check(!s.turns.empty(), "a sample has a turn");
    for (size_t t = 0; t < s.turns.size(); ++t) {
      Check(s.turns[t].max_new_tokens > 0, "positive answer length");
      if (options.max_new_tokens > 0)
        Check(s.turns[t].max_new_tokens == options.max_new_tokens, "override applies");
      for (const std::string_view pred : {std::string_view(prediction), std::string_view(s.id)}) {
        const double score = ScoreTurn(s, static_cast<int>(t), pred);
        Check(score >= 0.0 && score <= 1.0, "score in [0, 1]");
      }
    }
    (void)CountSampleTokens(s, nullptr);
  }
}

}  // namespace
}  // namespace primekv

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace primekv;
  // The options come from the input's last bytes (FuzzedDataProvider reads integers from the
  // end), so a plain jsonl file is a good seed: its text stays at the front.
  FuzzedDataProvider in(data, size);
  const int kind = in.ConsumeIntegralInRange<int>(0, 2);
  TaskOptions options;
  options.file_samples = in.ConsumeIntegralInRange<int>(0, 3);
  options.max_new_tokens = in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(1, 64) : 0;
  options.max_context_tokens = in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(1, 400) : 0;
  std::vector<std::string> warnings;
  options.warnings = &warnings;
  const std::string text = in.ConsumeRemainingBytesAsString();
  const std::string prediction = text.substr(0, 200);
  const std::string path = kind == 0   ? "fuzz.jsonl"
                           : kind == 1 ? "fuzz_aime.jsonl"
                                       : "qasper.jsonl";
  Result<std::vector<EvalSample>> r = kind == 0 ? eval_internal::ParseJsonl(path, text, options)
                                      : kind == 1
                                          ? eval_internal::ParseAime(path, text, options)
                                          : eval_internal::ParseLongBench(path, text, options);
  for (const std::string& w : warnings) Check(w.rfind(path + ":", 0) == 0, "warning names file");
  if (r.ok()) {
    CheckSamples(*r, options, prediction);
  } else {
    Check(r.message().find(path) != std::string::npos, "error names the file");
  }
  return 0;
}
