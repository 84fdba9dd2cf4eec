// primekv fidelity: docs/design.md §6 on windows of a text file.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "primekv/eval/fidelity.h"
#include "primekv/press/press.h"
#include "primekv/session/pipeline.h"
#include "primekv/util/progress.h"

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
  uint64_t memory_limit = 0;  // bytes; 0 = the machine's memory
};

// The press list, with every --presses item split.
Result<std::vector<std::string>> Presses(const FidelityArgs& a) {
  std::vector<std::string> presses;
  for (const std::string& item : a.presses) {
    PRIMEKV_ASSIGN_OR_RETURN(const std::vector<std::string> split, SplitPressList(item));
    presses.insert(presses.end(), split.begin(), split.end());
  }
  return presses;
}

// --contexts windows of the text: each a context (BOS first when the model has one) of
// --context tokens, then a continuation of --continuation tokens.
Status MakeWindows(const FidelityArgs& a, const Tokenizer& tok, const std::string& raw,
                   std::vector<std::vector<Token>>& ctxs, std::vector<std::vector<Token>>& conts) {
  const std::vector<Token> text = tok.Encode(raw, false);
  const size_t window = static_cast<size_t>(a.context - 1 + a.continuation);
  const size_t available = text.size() / window;
  if (available < static_cast<size_t>(a.contexts)) {
    return Status::Error(a.text_file + " holds " + std::to_string(text.size()) +
                         " tokens: enough for " + std::to_string(available) + " windows of " +
                         std::to_string(window) + ", not " + std::to_string(a.contexts));
  }
  for (int i = 0; i < a.contexts; ++i) {
    const auto begin = text.begin() + static_cast<std::ptrdiff_t>(i * window);
    std::vector<Token> c;
    if (tok.bos() >= 0) c.push_back(tok.bos());
    c.insert(c.end(), begin, begin + (a.context - 1));
    ctxs.push_back(std::move(c));
    conts.emplace_back(begin + (a.context - 1), begin + static_cast<std::ptrdiff_t>(window));
  }
  return Status::Ok();
}

Status CheckContextSize(const FidelityArgs& a, const Model& model) {
  std::string ctx_note;
  PRIMEKV_ASSIGN_OR_RETURN(const int ctx_size, ResolveContextSize(model.config(), a.ctx_size,
                                                                  a.allow_ctx_overflow, &ctx_note));
  if (!ctx_note.empty()) std::fprintf(stderr, "primekv: warning: %s\n", ctx_note.c_str());
  const int64_t tokens = int64_t{a.context} + a.continuation;
  if (tokens > ctx_size) {
    return Status::Error("--context " + std::to_string(a.context) + " + --continuation " +
                         std::to_string(a.continuation) + " tokens exceed the context size of " +
                         std::to_string(ctx_size) +
                         (a.ctx_size == 0 ? " (the model's trained context; -c N "
                                            "--allow-ctx-overflow runs past it)"
                                          : " (-c)"));
  }
  // The prefilled cache and one clone of it at a time (the full pass, then each press's), and
  // the logits of both passes over the continuation.
  const ModelConfig& c = model.config();
  return CheckMemoryFits(tokens, 2 * KvCacheBytes(c, a.kv_type, tokens),
                         4 * static_cast<uint64_t>(a.continuation) * c.vocab_size * sizeof(float),
                         a.memory_limit);
}

void Print(const FidelityArgs& a, const std::vector<FidelityRow>& rows) {
  if (a.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : rows) {
      j.push_back({{"press", r.press},
                   {"ratio", r.ratio},
                   {"contexts", r.contexts},
                   {"kl", r.kl},
                   {"top1", r.top1},
                   {"layer_error", r.layer_error},
                   {"mean_layer_error", r.mean_layer_error()}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("model %s, %d contexts of %d tokens, continuation %d\n", a.model.c_str(), a.contexts,
              a.context, a.continuation);
  std::printf(
      "| press | ratio | KL(full||comp) | top-1 agree | mean layer rel. error "
      "|\n|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    std::printf("| %s | %.2f | %.5f | %.4f | %.4f |\n", r.press.c_str(), r.ratio, r.kl, r.top1,
                r.mean_layer_error());
  }
}

Status Fidelity(const FidelityArgs& a) {
  PRIMEKV_ASSIGN_OR_RETURN(const std::string raw, ReadInputFile(a.text_file, "--text-file"));
  PRIMEKV_ASSIGN_OR_RETURN(const std::vector<std::string> presses, Presses(a));
  // A negative size is left to CheckContextSize's message.
  PRIMEKV_ASSIGN_OR_RETURN(const Model model, Model::Load(a.model, WeightMemory::kMapped,
                                                          std::max<int64_t>(a.ctx_size, 0)));
  PRIMEKV_RETURN_IF_ERROR(CheckContextSize(a, model));
  PRIMEKV_RETURN_IF_ERROR(CheckKvDType(a.kv_type, model.config().head_dim));
  std::vector<std::vector<Token>> ctxs, conts;
  PRIMEKV_RETURN_IF_ERROR(MakeWindows(a, model.tokenizer(), raw, ctxs, conts));
  FidelityOptions opt;
  opt.presses = presses;
  opt.ratios = a.ratios;
  opt.kv.dtype = a.kv_type;
  ProgressBar bar("fidelity", static_cast<int64_t>(a.contexts) *
                                  static_cast<int64_t>(presses.size() * a.ratios.size()));
  opt.progress = [&bar](int done, int) { bar.Update(done); };
  ThreadPool pool(a.threads);
  PRIMEKV_ASSIGN_OR_RETURN(const std::vector<FidelityRow> rows,
                           MeasureFidelity(model, ctxs, conts, opt, pool));
  Print(a, rows);
  return Status::Ok();
}

int RunFidelity(const FidelityArgs& a) {
  // A press or ratio given twice would be measured twice, as eval refuses.
  auto presses = Presses(a);
  if (!presses.ok()) return Fail(presses.message());
  if (const std::string dup = DuplicateInLists(*presses, a.ratios); !dup.empty())
    return UsageError(dup);
  const Status s = Fidelity(a);
  return s.ok() ? 0 : Fail(s.message());
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
  AddMemoryLimit(*cmd, a->memory_limit);
  cmd->callback([&run, a] { run = [a] { return RunFidelity(*a); }; });
}

}  // namespace primekv::cli
