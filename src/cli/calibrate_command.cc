// primekv calibrate: measures a model's budget profile (the share of each layer's KV head that
// KVzip keeps at each ratio, over calibration contexts) for presses run with profile=FILE or
// profile=auto. Without --tasks it writes its own contexts (BuiltInCalibrationCorpus) and keeps
// the profile in the cache that profile=auto reads, keyed by the model file's SHA-256.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "primekv/eval/eval.h"
#include "primekv/press/profile_locator.h"
#include "primekv/session/calibrate.h"
#include "primekv/session/calibration_corpus.h"
#include "primekv/session/pipeline.h"
#include "primekv/tokenizer/tokenizer.h"
#include "primekv/util/file_io.h"
#include "primekv/util/progress.h"
#include "primekv/util/sha256.h"

namespace primekv::cli {

namespace {

struct CalibrateArgs {
  std::string model;
  std::string tasks;
  std::string out;
  int samples = 0;
  int length = 0;
  double max_minutes = 20;
  bool recalibrate = false;
  int threads = 0;
  std::vector<double> ratios;
};

std::vector<double> DefaultRatios() {
  std::vector<double> r;
  for (int i = 1; i <= 19; ++i) r.push_back(i * 0.05);
  return r;
}

// The built-in corpus's longest context: what the model reads, up to 2K tokens (KVzip's second
// pass runs after it in the trained window, so at most half of that).
int DefaultLength(const ModelConfig& c) {
  return static_cast<int>(std::min<int64_t>(2048, std::max<int64_t>(64, c.max_context / 2)));
}

Result<std::vector<std::vector<Token>>> TaskContexts(const CalibrateArgs& a, const Model& model) {
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
  return contexts;
}

Status WriteProfile(const BudgetProfile& p, const std::filesystem::path& path) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  return p.Save(path);
}

// Keyed by the file's digest: the model need not be read to know the profile is its own.
Status UseCached(const CalibrateArgs& a, const std::filesystem::path& cached,
                 std::chrono::steady_clock::time_point t0) {
  PRIMEKV_ASSIGN_OR_RETURN(const BudgetProfile p, BudgetProfile::Load(cached));
  if (!a.out.empty()) {  // the file as cached (Parse does not keep every field)
    PRIMEKV_ASSIGN_OR_RETURN(const std::string text,
                             ReadFileCapped(cached.string(), "budget profile", FileSource::kRegular,
                                            kMaxBudgetProfileBytes));
    PRIMEKV_RETURN_IF_ERROR(WriteFileReplacing(a.out, text, "budget profile"));
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  std::fprintf(stderr,
               "calibrate: used the cached profile %s (%d contexts) in %.2f s; "
               "--recalibrate measures it again\n",
               cached.string().c_str(), p.contexts, took.count());
  if (!a.out.empty()) std::printf("wrote %s\n", a.out.c_str());
  return Status::Ok();
}

// The shares at 0.5 and 0.9, the ratios a reader compares first.
void PrintShares(const BudgetProfile& p) {
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
}

Status Calibrate(const CalibrateArgs& a) {
  // Before the model is read and the contexts run: the profile is written only at the end.
  if (!a.out.empty()) PRIMEKV_RETURN_IF_ERROR(CheckReplaceableOutput(a.out, "-o"));
  const auto t0 = std::chrono::steady_clock::now();
  const bool built_in = a.tasks.empty();
  // With --tasks nothing goes to the cache, the remembered digest included.
  PRIMEKV_ASSIGN_OR_RETURN(const std::string sha, built_in ? ModelFileSha256(a.model, a.recalibrate)
                                                           : FileSha256Hex(a.model));
  std::filesystem::path cached;
  if (built_in) {
    PRIMEKV_ASSIGN_OR_RETURN(const std::filesystem::path dir, ProfileCacheDir());
    cached = dir / (sha + ".budget.json");
    std::error_code ec;
    if (!a.recalibrate && std::filesystem::is_regular_file(cached, ec))
      return UseCached(a, cached, t0);
  }
  PRIMEKV_ASSIGN_OR_RETURN(const Model model, Model::Load(a.model));
  std::vector<std::vector<Token>> contexts;
  if (built_in) {
    CorpusOptions copt;
    copt.contexts = a.samples > 0 ? a.samples : 32;
    copt.max_length = a.length > 0 ? a.length : DefaultLength(model.config());
    copt.min_length = std::max(16, copt.max_length / 2);
    PRIMEKV_ASSIGN_OR_RETURN(contexts, BuiltInCalibrationCorpus(model.tokenizer(), copt));
    std::fprintf(stderr, "calibrate: %d built-in contexts of %d to %d tokens\n", copt.contexts,
                 copt.min_length, copt.max_length);
  } else {
    PRIMEKV_ASSIGN_OR_RETURN(contexts, TaskContexts(a, model));
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
  opt.max_seconds = a.max_minutes * 60;
  ProgressBar bar("calibrate", static_cast<int64_t>(contexts.size()));
  opt.progress = [&bar](int done, int) { bar.Update(done); };
  ThreadPool pool(a.threads);
  PRIMEKV_ASSIGN_OR_RETURN(BudgetProfile p, CalibrateBudgetProfile(model, contexts, opt, pool));
  p.model = model.Identity();
  p.model_sha256 = sha;
  if (p.contexts < std::ssize(contexts))
    std::fprintf(stderr, "\ncalibrate: --max-minutes %.3g reached after %d of %zu contexts\n",
                 a.max_minutes, p.contexts, contexts.size());
  if (!a.out.empty()) PRIMEKV_RETURN_IF_ERROR(WriteProfile(p, a.out));
  if (built_in) PRIMEKV_RETURN_IF_ERROR(WriteProfile(p, cached));
  PrintShares(p);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  if (!a.out.empty()) std::printf("wrote %s\n", a.out.c_str());
  if (built_in) std::printf("wrote %s (profile=auto reads it)\n", cached.string().c_str());
  std::fprintf(stderr, "calibrate: %.1f minutes\n", took.count() / 60);
  return Status::Ok();
}

}  // namespace

void AddCalibrate(CLI::App& app, Runner& run) {
  auto a = std::make_shared<CalibrateArgs>();
  auto* cmd = app.add_subcommand(
      "calibrate", "Measure a model's per-head budget profile (KVzip's allocation) for profile=");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("--tasks", a->tasks,
                  "Calibration contexts: jsonl:PATH[,jsonl:PATH...] (only `context` is read); "
                  "default: the built-in corpus, written from the model's tokenizer");
  cmd->add_option("--samples", a->samples,
                  "Built-in corpus: contexts (default 32); --tasks: first N samples of each file "
                  "(0 = all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--length", a->length,
                  "Built-in corpus: the longest context in tokens (default: half the model's "
                  "context, at most 2048); the shortest is half of it")
      ->check(CLI::Range(32, 1 << 20));
  cmd->add_option("--max-minutes", a->max_minutes,
                  "Time budget: stop before a context expected to end past it (0 = no limit)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_flag("--recalibrate", a->recalibrate,
                "Measure again even when the cache holds this model's profile");
  cmd->add_option("--ratios", a->ratios, "Ratios to measure (default 0.05, 0.10, ..., 0.95)")
      ->delimiter(',')
      ->check(CLI::Range(0.001, 0.999));
  cmd->add_option("-t,--threads", a->threads, "Threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-o,--out", a->out,
                  "Profile file to write (JSON); without --tasks the cache entry is written too");
  cmd->callback([&run, a] {
    run = [a] {
      if (a->tasks.empty() && !a->ratios.empty())
        return Fail("--ratios needs --tasks: the cached profile is measured at the default ratios");
      if (!a->tasks.empty() && a->out.empty()) return Fail("--tasks needs -o");
      const Status s = Calibrate(*a);
      return s.ok() ? 0 : Fail(s.message());
    };
  });
}

}  // namespace primekv::cli
