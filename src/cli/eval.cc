#include "primekv/eval.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "primekv/eval_runner.h"
#include "primekv/eval_stats.h"
#include "primekv/press.h"

namespace primekv::cli {
namespace {

// Writes the samples the run would use, one JSON object per line in the format `jsonl:PATH`
// reads back (plus "task" and each turn's "max_new_tokens"), so users can inspect prompts or
// freeze a generated set as a held-out file.
int DumpTasks(const Model& model, const EvalRunSpec& spec, const std::string& path) {
  std::ofstream out(path);
  if (!out) return Fail("cannot write '" + path + "'");
  int n = 0;
  for (const auto& task : spec.tasks) {
    auto samples = GenerateTask(task, TaskOptionsFor(model, spec, task));
    if (!samples.ok()) return Fail("task " + task + ": " + samples.message());
    for (const EvalSample& s : *samples) {
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
      out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      ++n;
    }
  }
  if (!out) return Fail("error writing '" + path + "'");
  std::fprintf(stderr, "eval: wrote %d samples to %s\n", n, path.c_str());
  return 0;
}

// --presses is split at commas, which also separate a press's parameters: a piece with '=' and
// no ':' cannot be a press name, so it continues the previous press ("primekv:a=1,b=2").
std::vector<std::string> JoinPressParams(const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) {
    const bool param = p.find('=') != std::string::npos && p.find(':') == std::string::npos;
    if (param && !out.empty()) {
      out.back() += "," + p;
    } else {
      out.push_back(p);
    }
  }
  return out;
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
  std::ofstream(std::filesystem::path(dir) / name) << *md;
  std::printf("%s", md->c_str());
  return 0;
}

}  // namespace

void AddEval(CLI::App& app, Runner& run) {
  struct Args {
    std::string model;
    EvalRunSpec spec;
    std::string kv_type = "f16";
    std::string out;
    std::string dump;
    bool quiet = false;
    std::string compare;  // "A,B": B minus A, paired
  };
  auto a = std::make_shared<Args>();
  a->spec.tasks = ListTasks();
  a->spec.presses = {"none",  "primekv", "keydiff",   "knorm", "streamingllm",      "random",
                     "lagkv", "snapkv",  "pyramidkv", "tova",  "expected_attention"};
  a->spec.ratios = {0.25, 0.5, 0.75, 0.9};
  auto* cmd = app.add_subcommand(
      "eval", "Run tasks x presses x ratios; results.jsonl/csv, report.md, plots");
  cmd->add_option("-m,--model", a->model)->required();
  cmd->add_option("--tasks", a->spec.tasks, "Task names, jsonl:PATH, longbench:PATH, aime:PATH")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--presses", a->spec.presses)->delimiter(',')->capture_default_str();
  cmd->add_option("--ratios", a->spec.ratios)->delimiter(',')->capture_default_str();
  cmd->add_option("--samples", a->spec.samples, "Samples per task")->capture_default_str();
  cmd->add_option("--length", a->spec.length, "Target tokens per generated sample")
      ->capture_default_str();
  cmd->add_option("--mode", a->spec.mode, "context | question | multiturn | chunked | decode")
      ->capture_default_str();
  cmd->add_option("--seed", a->spec.seed)->capture_default_str();
  cmd->add_option("--max-new-tokens", a->spec.max_new_tokens,
                  "Override the tasks' answer lengths (0 = task default)");
  cmd->add_option("--chunk", a->spec.chunk)->capture_default_str();
  cmd->add_option("--interval", a->spec.interval)->capture_default_str();
  cmd->add_flag("--chat", a->spec.chat, "Use the model's chat template");
  cmd->add_option("--kv-type", a->kv_type, "f16 | f32")->capture_default_str();
  cmd->add_option("-t,--threads", a->spec.threads)->capture_default_str();
  cmd->add_flag("-q,--quiet", a->quiet, "No progress bar");
  auto* out = cmd->add_option("--out", a->out, "Output directory (re-running resumes)");
  auto* dump = cmd->add_option("--dump-tasks", a->dump,
                               "Write the generated samples to this jsonl file (the jsonl:PATH "
                               "format) and exit");
  out->excludes(dump);
  cmd->add_option("--compare", a->compare,
                  "A,B: after the run, B minus A on the same samples with its paired 95% "
                  "bootstrap interval (printed and written to DIR/compare_A_B.md); press "
                  "parameters stay with their press: A=primekv:key=self,combine=logit,B=keydiff "
                  "is written 'primekv:key=self,combine=logit,keydiff'");

  cmd->callback([&run, a] {
    run = [a] {
      if (a->out.empty() && a->dump.empty())
        return Fail("eval: give --out DIR or --dump-tasks FILE");
      if (a->kv_type != "f16" && a->kv_type != "f32") return Fail("--kv-type must be f16 or f32");
      a->spec.kv_dtype = a->kv_type == "f32" ? KvDType::kF32 : KvDType::kF16;
      a->spec.out = a->out;
      a->spec.presses = JoinPressParams(a->spec.presses);
      a->spec.progress = !a->quiet;
      auto model = Model::Load(a->model);
      if (!model.ok()) return Fail(model.message());
      if (!a->dump.empty()) return DumpTasks(*model, a->spec, a->dump);
      auto summary = RunEvaluation(*model, a->spec);
      if (!summary.ok()) return Fail(summary.message());
      for (const auto& w : summary->warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
      std::fprintf(stderr, "eval: %d units run, %d already done; report in %s/report.md\n",
                   summary->computed, summary->skipped, a->out.c_str());
      if (!a->compare.empty()) {
        std::vector<std::string> pieces;
        for (size_t b = 0, e; b <= a->compare.size(); b = e + 1) {
          e = a->compare.find(',', b);
          if (e == std::string::npos) e = a->compare.size();
          pieces.push_back(a->compare.substr(b, e - b));
        }
        const auto two = JoinPressParams(pieces);
        if (two.size() != 2) return Fail("eval --compare: give two presses, A,B");
        // Results name a press by its canonical text (parameters sorted).
        auto canon = [](const std::string& t) {
          auto spec = ParsePressSpec(t);
          return spec.ok() ? spec->Text() : t;
        };
        return Compare(a->out, canon(two[0]), canon(two[1]));
      }
      return 0;
    };
  });
}

}  // namespace primekv::cli
