// primekv fidelity: docs/design.md §6 on windows of a text file.
#include "primekv/fidelity.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "primekv/pipeline.h"
#include "primekv/press.h"
#include "primekv/progress.h"

namespace primekv::cli {

namespace {

struct FidelityArgs {
  std::string model, text_file;
  std::vector<std::string> presses{
      "primekv", "keydiff",   "knorm", "streamingllm",       "random", "lagkv",
      "snapkv",  "pyramidkv", "tova",  "expected_attention", "oracle"};
  std::vector<double> ratios{0.25, 0.5, 0.75, 0.9};
  int context = 384, continuation = 64, contexts = 20, threads = 0;
  bool json = false;
  KvDType kv_type = KvDType::kF32;
  int64_t ctx_size = 0;
  bool allow_ctx_overflow = false;
};

int RunFidelity(const FidelityArgs& a) {
  auto raw = ReadInputFile(a.text_file, "--text-file");
  if (!raw.ok()) return Fail(raw.message());
  std::vector<std::string> presses;
  for (const std::string& item : a.presses) {
    auto split = SplitPressList(item);
    if (!split.ok()) return Fail(split.message());
    presses.insert(presses.end(), split->begin(), split->end());
  }
  auto model = Model::Load(a.model);
  if (!model.ok()) return Fail(model.message());
  const Tokenizer& tok = model->tokenizer();
  std::string ctx_note;
  auto ctx_size = ResolveContextSize(model->config(), a.ctx_size, a.allow_ctx_overflow, &ctx_note);
  if (!ctx_size.ok()) return Fail(ctx_size.message());
  if (!ctx_note.empty()) std::fprintf(stderr, "primekv: warning: %s\n", ctx_note.c_str());
  if (int64_t{a.context} + a.continuation > *ctx_size) {
    return Fail("--context " + std::to_string(a.context) + " + --continuation " +
                std::to_string(a.continuation) + " tokens exceed the context size of " +
                std::to_string(*ctx_size) +
                (a.ctx_size == 0 ? " (the model's trained context; -c N --allow-ctx-overflow runs "
                                   "past it)"
                                 : " (-c)"));
  }
  const std::vector<Token> text = tok.Encode(*raw, false);
  const size_t window = static_cast<size_t>(a.context - 1 + a.continuation);
  const size_t available = text.size() / window;
  if (available < static_cast<size_t>(a.contexts)) {
    return Fail(a.text_file + " holds " + std::to_string(text.size()) + " tokens: enough for " +
                std::to_string(available) + " windows of " + std::to_string(window) + ", not " +
                std::to_string(a.contexts));
  }
  std::vector<std::vector<Token>> ctxs, conts;
  for (int i = 0; i < a.contexts; ++i) {
    const auto begin = text.begin() + static_cast<std::ptrdiff_t>(i * window);
    std::vector<Token> c;
    if (tok.bos() >= 0) c.push_back(tok.bos());
    c.insert(c.end(), begin, begin + (a.context - 1));
    ctxs.push_back(std::move(c));
    conts.emplace_back(begin + (a.context - 1), begin + static_cast<std::ptrdiff_t>(window));
  }
  FidelityOptions opt;
  opt.presses = presses;
  opt.ratios = a.ratios;
  opt.kv.dtype = a.kv_type;
  ProgressBar bar("fidelity", static_cast<int64_t>(a.contexts) *
                                  static_cast<int64_t>(presses.size() * a.ratios.size()));
  opt.progress = [&bar](int done, int) { bar.Update(done); };
  ThreadPool pool(a.threads);
  auto rows = MeasureFidelity(*model, ctxs, conts, opt, pool);
  if (!rows.ok()) return Fail(rows.message());
  if (a.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : *rows) {
      j.push_back({{"press", r.press},
                   {"ratio", r.ratio},
                   {"contexts", r.contexts},
                   {"kl", r.kl},
                   {"top1", r.top1},
                   {"layer_error", r.layer_error},
                   {"mean_layer_error", r.mean_layer_error()}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model %s, %d contexts of %d tokens, continuation %d\n", a.model.c_str(), a.contexts,
              a.context, a.continuation);
  std::printf(
      "| press | ratio | KL(full||comp) | top-1 agree | mean layer rel. error "
      "|\n|---|---|---|---|---|\n");
  for (const auto& r : *rows) {
    std::printf("| %s | %.2f | %.5f | %.4f | %.4f |\n", r.press.c_str(), r.ratio, r.kl, r.top1,
                r.mean_layer_error());
  }
  return 0;
}

}  // namespace

void AddFidelity(CLI::App& app, Runner& run) {
  auto a = std::make_shared<FidelityArgs>();
  auto* cmd = app.add_subcommand(
      "fidelity", "KL, top-1 agreement and attention error of compressed caches (design.md §6)");
  cmd->add_option("-m,--model", a->model)->required();
  cmd->add_option("--text-file", a->text_file, "Text whose windows give contexts and continuations")
      ->required();
  cmd->add_option("--presses", a->presses,
                  "Presses, as for eval: 'primekv;snapkv:window=32,kernel=3' (oracle allowed)")
      ->check(PressList(/*single=*/false))
      ->capture_default_str();
  cmd->add_option("--ratios", a->ratios)
      ->delimiter(',')
      ->check(RealIn(0, 1, false, /*hi_open=*/true))
      ->capture_default_str();
  cmd->add_option("--context", a->context, "Context tokens (BOS included)")
      ->check(IntegerIn(2, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--continuation", a->continuation, "Teacher-forced tokens")
      ->check(IntegerIn(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--contexts", a->contexts, "Number of windows")
      ->check(IntegerIn(1, 1 << 20))
      ->capture_default_str();
  AddKvType(*cmd, a->kv_type);
  cmd->add_option("-t,--threads", a->threads)->check(Threads())->capture_default_str();
  cmd->add_flag("--json", a->json);
  cmd->add_option("-c,--ctx-size", a->ctx_size,
                  "Context size in tokens (0 = the model's trained context); "
                  "--context + --continuation must fit");
  cmd->add_flag("--allow-ctx-overflow", a->allow_ctx_overflow,
                "Allow -c above the model's trained context (warns)");
  cmd->callback([&run, a] { run = [a] { return RunFidelity(*a); }; });
}

}  // namespace primekv::cli
