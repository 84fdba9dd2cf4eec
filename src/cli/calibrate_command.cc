// primekv calibrate: measures a model's budget profile (the share of each layer's KV head that
// KVzip keeps at each ratio, over calibration contexts) for presses run with profile=FILE.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "primekv/eval/eval.h"
#include "primekv/session/calibrate.h"
#include "primekv/session/pipeline.h"
#include "primekv/tokenizer/tokenizer.h"
#include "primekv/util/file_io.h"
#include "primekv/util/progress.h"

namespace primekv::cli {

namespace {

struct CalibrateArgs {
  std::string model;
  std::string tasks;
  std::string out;
  int samples = 0;
  int threads = 0;
  std::vector<double> ratios;
};

std::vector<double> DefaultRatios() {
  std::vector<double> r;
  for (int i = 1; i <= 19; ++i) r.push_back(i * 0.05);
  return r;
}

Status Calibrate(const CalibrateArgs& a) {
  // Before the model is read and the contexts run: the profile is written only at the end.
  PRIMEKV_RETURN_IF_ERROR(CheckReplaceableOutput(a.out, "-o"));
  PRIMEKV_ASSIGN_OR_RETURN(const Model model, Model::Load(a.model));
  TaskOptions topt;
  topt.tokenizer = &model.tokenizer();
  topt.file_samples = a.samples;
  std::vector<std::vector<Token>> contexts;
  for (const std::string& task : SplitTaskList(a.tasks)) {
    if (!TaskFilePath(task)) return Status::Error("--tasks: '" + task + "' is not a file task");
    PRIMEKV_ASSIGN_OR_RETURN(const std::vector<EvalSample> samples, GenerateTask(task, topt));
    for (const EvalSample& s : samples) {
      contexts.push_back(EncodeConversation(model.tokenizer(), false, s.context, {}).context);
    }
  }
  PRIMEKV_ASSIGN_OR_RETURN(const int window, ResolveContextSize(model.config(), 0, false));
  for (const auto& c : contexts) {
    if (std::ssize(c) >= window)
      return Status::Error("a calibration context of " + std::to_string(c.size()) +
                           " tokens leaves KVzip's second pass no room in the " +
                           std::to_string(window) + "-token window");
  }
  CalibrationOptions opt;
  opt.ratios = a.ratios.empty() ? DefaultRatios() : a.ratios;
  opt.window = window;
  ProgressBar bar("calibrate", static_cast<int64_t>(contexts.size()));
  opt.progress = [&bar](int done, int) { bar.Update(done); };
  ThreadPool pool(a.threads);
  PRIMEKV_ASSIGN_OR_RETURN(BudgetProfile p, CalibrateBudgetProfile(model, contexts, opt, pool));
  p.model = model.Identity();
  PRIMEKV_RETURN_IF_ERROR(p.Save(a.out));
  std::printf("%d contexts; share of its entries each KV head keeps (layer x head):\n", p.contexts);
  for (size_t r = 0; r < p.ratios.size(); ++r) {
    if (std::abs(p.ratios[r] - 0.5) > 1e-9 && std::abs(p.ratios[r] - 0.9) > 1e-9) continue;
    std::printf("ratio %.2f:", p.ratios[r]);
    for (int l = 0; l < p.n_layers; ++l) {
      std::printf(" L%d", l);
      for (int h = 0; h < p.n_kv_heads; ++h) std::printf(" %.3f", p.At(r, l, h));
    }
    std::printf("\n");
  }
  std::printf("wrote %s\n", a.out.c_str());
  return Status::Ok();
}

}  // namespace

void AddCalibrate(CLI::App& app, Runner& run) {
  auto a = std::make_shared<CalibrateArgs>();
  auto* cmd = app.add_subcommand(
      "calibrate", "Measure a model's per-head budget profile (KVzip's allocation) for profile=");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("--tasks", a->tasks,
                  "Calibration contexts: jsonl:PATH[,jsonl:PATH...] (only `context` is read)")
      ->required();
  cmd->add_option("--samples", a->samples, "First N samples of each file (0 = all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--ratios", a->ratios, "Ratios to measure (default 0.05, 0.10, ..., 0.95)")
      ->delimiter(',')
      ->check(CLI::Range(0.001, 0.999));
  cmd->add_option("-t,--threads", a->threads, "Threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-o,--out", a->out, "Profile file to write (JSON)")->required();
  cmd->callback([&run, a] {
    run = [a] {
      const Status s = Calibrate(*a);
      return s.ok() ? 0 : Fail(s.message());
    };
  });
}

}  // namespace primekv::cli
