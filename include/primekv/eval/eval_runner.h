// primekv eval: tasks x presses x ratios on one model, one shared prefill per sample, results
// appended to DIR/results.jsonl as they finish (so an interrupted run resumes), then
// DIR/results.csv, DIR/report.md and PNG plots.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/eval/eval.h"
#include "primekv/kv/kv_cache.h"
#include "primekv/model/model.h"
#include "primekv/util/status.h"

namespace primekv {

struct EvalRunSpec {
  std::vector<std::string> tasks;    // ListTasks() names, jsonl:PATH, longbench:PATH, aime:PATH
  std::vector<std::string> presses;  // registry names; "none" runs once at ratio 0
  std::vector<double> ratios;
  int samples = 10;
  int length = 1024;             // target tokens per generated sample
  std::string mode = "context";  // context | question | multiturn | chunked | decode
  uint64_t seed = 42;
  int max_new_tokens = 0;  // > 0 overrides the tasks' defaults
  int chunk = 512;
  int interval = 512;
  bool chat = false;          // wrap prompts in the model's chat template
  std::string chat_template;  // --chat-template NAME: overrides the GGUF's template
  KvDType kv_dtype = KvDType::kF16;
  int threads = 0;
  bool progress = true;
  std::filesystem::path out;
  // The model file, recorded (path, size, content hash) in DIR/config.json so that a resumed run
  // cannot mix rows of another model. Empty: recorded as "(unknown)" and never matched.
  std::filesystem::path model_path;
  // Context size in tokens (0 = the model's trained context). A sample whose prompt and answers
  // need more is not run: its rows say "over_context". Above the trained context only with
  // allow_ctx_overflow.
  int ctx_size = 0;
  bool allow_ctx_overflow = false;
  // Called with each warning as it happens (bad task lines, samples over the context, unusable
  // results.jsonl lines); every warning is also kept in the summary.
  std::function<void(const std::string&)> on_warning;
};

struct EvalRunSummary {
  int computed = 0;      // (sample, press, ratio) units run now
  int skipped = 0;       // units found finished in results.jsonl
  int over_context = 0;  // samples (of this run's tasks) that did not fit the context size
  int ctx_size = 0;      // the context size used
  std::vector<std::string> warnings;
};

Result<EvalRunSummary> RunEvaluation(const Model& model, const EvalRunSpec& spec);

// The generator options RunEvaluation uses for `task` (lengths in the model's tokens, room left
// below its context); warnings from file tasks are appended to `warnings` when given.
TaskOptions TaskOptionsFor(const Model& model, const EvalRunSpec& spec, std::string_view task,
                           std::vector<std::string>* warnings = nullptr);
// Rebuilds results.csv, report.md and plots from DIR/results.jsonl. Unusable lines are skipped,
// each with a "FILE:LINE: reason" appended to `warnings` when given.
Status WriteEvalReport(const std::filesystem::path& dir,
                       std::vector<std::string>* warnings = nullptr);

}  // namespace primekv
