#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "primekv/eval/eval.h"
#include "primekv/eval/eval_runner.h"
#include "primekv/eval/eval_stats.h"
#include "primekv/press/press.h"
#include "primekv/press/profile_locator.h"
#include "primekv/util/file_io.h"

namespace primekv::cli {
namespace {

// Whether `a` and `b` name one existing file (same device and inode).
bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa = {}, sb = {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// Writes the samples the run would use, one JSON object per line in the format `jsonl:PATH`
// reads back (plus "task" and each turn's "max_new_tokens"), so users can inspect prompts or
// freeze a generated set as a held-out file. Every task is read before the file is opened, and
// the file may not be one of them (opening it would empty it first).
int DumpTasks(const Model& model, const EvalRunSpec& spec, const std::string& path) {
  for (const auto& task : spec.tasks) {
    if (auto file = TaskFilePath(task); file && SameFile(*file, path))
      return UsageError("--dump-tasks '" + path + "' is the file of task " + task +
                        "; writing it would destroy the task before it is read");
  }
  // A FIFO, device or link is refused before the tasks are generated, not after.
  if (Status st = CheckReplaceableOutput(path, "--dump-tasks"); !st.ok()) return Fail(st.message());
  std::vector<EvalSample> all;
  for (const auto& task : spec.tasks) {
    std::vector<std::string> warnings;
    auto samples = GenerateTask(task, TaskOptionsFor(model, spec, task, &warnings));
    for (const auto& w : warnings) std::fprintf(stderr, "primekv: warning: %s\n", w.c_str());
    if (!samples.ok()) return Fail("task " + task + ": " + samples.message());
    for (EvalSample& s : *samples) all.push_back(std::move(s));
  }
  std::string text;
  for (const EvalSample& s : all) {
    nlohmann::json j;
    j["id"] = s.id;
    j["task"] = s.task;
    j["context"] = s.context;
    j["metric"] = s.metric;
    for (const EvalTurn& t : s.turns) {
      j["turns"].push_back({{"question", t.question},
                            {"answer_prefix", t.answer_prefix},
                            {"answers", t.answers},
                            {"max_new_tokens", t.max_new_tokens}});
    }
    text += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    text += '\n';
  }
  if (Status st = WriteFileReplacing(path, text, "--dump-tasks"); !st.ok())
    return Fail(st.message());
  std::fprintf(stderr, "eval: wrote %zu samples to %s\n", all.size(), path.c_str());
  return 0;
}

// Paired comparison of two presses over DIR/results.jsonl, printed and kept beside the report.
int Compare(const std::string& dir, const std::string& a, const std::string& b) {
  auto scores = LoadSampleScores(std::filesystem::path(dir) / "results.jsonl");
  if (!scores.ok()) return Fail(scores.message());
  auto md = PairedComparison(*scores, a, b);
  if (!md.ok()) return Fail("eval --compare: " + md.message());
  std::string name = "compare_" + a + "_" + b + ".md";
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  const std::filesystem::path file = std::filesystem::path(dir) / name;
  if (Status st = WriteFileReplacing(file.string(), *md, "eval --compare"); !st.ok())
    return Fail(st.message());
  std::printf("%s", md->c_str());
  return 0;
}

struct EvalArgs {
  std::string model;
  WeightMemory weight_memory = WeightMemory::kMapped;
  EvalRunSpec spec;
  std::string out;
  std::string dump;
  bool quiet = false;
  std::string compare;  // "A,B": B minus A, paired
};

// --compare A,B after the run: B minus A on the same samples.
int CompareAfterRun(const EvalArgs& a) {
  auto two = SplitPressList(a.compare);
  if (!two.ok()) return Fail("eval --compare: " + two.message());
  if (two->size() != 2) return Fail("eval --compare: give two presses, A,B");
  // Results name a press by its canonical text (parameters sorted), profile=auto by the
  // profile it found.
  auto canon = [&](const std::string& t) -> Result<std::string> {
    PRIMEKV_ASSIGN_OR_RETURN(const std::string resolved, ResolveAutoProfile(t, a.model));
    auto spec = ParsePressSpec(resolved);
    return spec.ok() ? spec->Text() : resolved;
  };
  auto first = canon((*two)[0]);
  if (!first.ok()) return Fail("eval --compare: " + first.message());
  auto second = canon((*two)[1]);
  if (!second.ok()) return Fail("eval --compare: " + second.message());
  return Compare(a.out, *first, *second);
}

// Flattens the --tasks and --presses lists and refuses a task, press or ratio given twice
// (every row would be written twice); returns 0 or the exit status.
int FlattenLists(EvalArgs& a) {
  std::vector<std::string> tasks;
  for (const std::string& item : a.spec.tasks) {
    for (std::string& task : SplitTaskList(item)) {
      if (std::find(tasks.begin(), tasks.end(), task) != tasks.end())
        return UsageError("--tasks: task " + task + " is listed twice");
      tasks.push_back(std::move(task));
    }
  }
  a.spec.tasks = std::move(tasks);
  // Each --presses value is a list (checked at parse time); flatten them in order.
  std::vector<std::string> presses;
  for (const std::string& item : a.spec.presses) {
    auto split = SplitPressList(item);
    if (!split.ok()) return Fail(split.message());
    presses.insert(presses.end(), split->begin(), split->end());
  }
  a.spec.presses = std::move(presses);
  // Presses are compared by their canonical text (parameters sorted), as rows name them.
  if (const std::string dup = DuplicateInLists(a.spec.presses, a.spec.ratios); !dup.empty())
    return UsageError(dup);
  return 0;
}

int RunEval(EvalArgs& a) {
  if (a.out.empty() && a.dump.empty()) return Fail("eval: give --out DIR or --dump-tasks FILE");
  if (int status = FlattenLists(a); status != 0) return status;
  a.spec.out = a.out;
  if (!a.spec.chat_template.empty()) a.spec.chat = true;
  a.spec.progress = !a.quiet;

  if (a.spec.samples < 1)
    return Fail("--samples must be >= 1 (file tasks: the first N valid samples)");
  a.spec.model_path = a.model;
  // Warnings appear as they happen (a bad task line before hours of running, not after).
  a.spec.on_warning = [](const std::string& w) {
    std::fprintf(stderr, "primekv: warning: %s\n", w.c_str());
  };
  // A negative size is left to the runner's --ctx-size check.
  auto model = Model::Load(a.model, a.weight_memory, std::max(a.spec.ctx_size, 0));
  if (!model.ok()) return Fail(model.message());
  if (!a.dump.empty()) return DumpTasks(*model, a.spec, a.dump);
  auto summary = RunEvaluation(*model, a.spec);
  if (!summary.ok()) return Fail(summary.message());
  std::fprintf(stderr, "eval: %d units run, %d already done", summary->computed, summary->skipped);
  if (summary->over_context > 0) {
    std::fprintf(stderr, "; %d samples over the context size of %d tokens (not scored)",
                 summary->over_context, summary->ctx_size);
  }
  std::fprintf(stderr, "; report in %s/report.md\n", a.out.c_str());
  if (!a.compare.empty()) return CompareAfterRun(a);
  return 0;
}

void AddEvalOptions(CLI::App& cmd, EvalArgs& a) {
  cmd.add_option("-m,--model", a.model)->required();
  AddNoMmap(cmd, a.weight_memory);
  cmd.add_option("--tasks", a.spec.tasks,
                 "Task names, jsonl:PATH, longbench:PATH, aime:PATH, separated by ','; a PATH "
                 "may hold commas: it ends at the next ',' followed by a task name or PREFIX:")
      ->capture_default_str();
  cmd.add_option("--presses", a.spec.presses,
                 "Presses: 'none;primekv:key=cosine,value=norm;snapkv' (';' or ',' between "
                 "presses; the flag may repeat)")
      ->check(PressList(/*single=*/false))
      ->capture_default_str();
  cmd.add_option("--ratios", a.spec.ratios)
      ->delimiter(',')
      ->check(RealIn(0, 1, false, /*hi_open=*/true))
      ->capture_default_str();
  cmd.add_option("--samples", a.spec.samples, "Samples per task")
      ->check(IntegerIn(0, 1000000))
      ->capture_default_str();
  cmd.add_option("--length", a.spec.length, "Target tokens per generated sample")
      ->check(IntegerIn(1, 1 << 24))
      ->capture_default_str();
  cmd.add_option("--mode", a.spec.mode,
                 "context | question | multiturn | chunked | decode | first-question")
      ->check(OneOf({"context", "question", "multiturn", "multi-turn", "chunked", "decode",
                     "first-question"}))
      ->capture_default_str();
  cmd.add_option("--seed", a.spec.seed)->check(Seed())->capture_default_str();
  cmd.add_option("--max-new-tokens", a.spec.max_new_tokens,
                 "Override the tasks' answer lengths (0 = task default)")
      ->check(IntegerIn(0, std::numeric_limits<int>::max()));
  cmd.add_option("--chunk", a.spec.chunk)
      ->check(IntegerIn(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd.add_option("--interval", a.spec.interval)
      ->check(IntegerIn(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd.add_flag("--chat", a.spec.chat, "Use the model's chat template");
  cmd.add_option(
      "--chat-template", a.spec.chat_template,
      "Chat template by name, overriding the model's (implies --chat): " + ChatFormatNames());
  AddKvType(cmd, a.spec.kv_dtype);
  cmd.add_option("-t,--threads", a.spec.threads)->check(Threads())->capture_default_str();
  cmd.add_flag("-q,--quiet", a.quiet, "No progress bar");
  auto* out = cmd.add_option("--out", a.out, "Output directory (re-running resumes)");
  auto* dump = cmd.add_option("--dump-tasks", a.dump,
                              "Write the generated samples to this jsonl file (the jsonl:PATH "
                              "format) and exit");
  out->excludes(dump);
  cmd.add_option("-c,--ctx-size", a.spec.ctx_size,
                 "Context size in tokens (0 = the model's trained context); samples "
                 "that need more are not run and are reported as over_context");
  cmd.add_flag("--allow-ctx-overflow", a.spec.allow_ctx_overflow,
               "Allow --ctx-size above the model's trained context (warns)");
  cmd.add_option("--compare", a.compare,
                 "A,B: after the run, B minus A on the same samples with its paired 95% "
                 "bootstrap interval (printed and written to DIR/compare_A_B.md); press "
                 "parameters stay with their press: A=primekv:key=self,combine=logit,B=keydiff "
                 "is written 'primekv:key=self,combine=logit,keydiff'");
}

}  // namespace

void AddEval(CLI::App& app, Runner& run) {
  auto a = std::make_shared<EvalArgs>();
  a->spec.tasks = ListTasks();
  a->spec.presses = {"none",  "primekv", "keydiff",   "knorm", "streamingllm",      "random",
                     "lagkv", "snapkv",  "pyramidkv", "tova",  "expected_attention"};
  a->spec.ratios = {0.25, 0.5, 0.75, 0.9};
  auto* cmd = app.add_subcommand(
      "eval", "Run tasks x presses x ratios; results.jsonl/csv, report.md, plots");
  AddEvalOptions(*cmd, *a);
  cmd->callback([&run, a] { run = [a] { return RunEval(*a); }; });
}

}  // namespace primekv::cli
