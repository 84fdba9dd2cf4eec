// Dumps the logits of every position for given token ids: the hook for reference checks.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "primekv/model/model.h"
#include "primekv/session/pipeline.h"

namespace primekv::cli {

namespace {

Result<std::vector<Token>> ParseIds(const std::string& s) {
  std::vector<Token> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      if (v < 0 || v > std::numeric_limits<Token>::max()) throw std::out_of_range(item);
      ids.push_back(static_cast<Token>(v));
    } catch (const std::exception&) {
      return Status::Error("--tokens: '" + Printable(item) + "' is not a token id");
    }
  }
  return ids;
}

struct LogitsArgs {
  std::string model, tokens, text, out;
  KvDType kv_type = KvDType::kF32;
  int threads = 0;
  int chunk = 0;
  int ctx_size = 0;
  bool allow_ctx_overflow = false;
  uint64_t memory_limit = 0;  // bytes; 0 = the machine's memory
};

// The ids of --text or --tokens, checked against the vocabulary and the context size (text that
// cannot fit however it tokenizes is refused before tokenizing it).
Result<std::vector<Token>> InputIds(const LogitsArgs& a, const Model& model) {
  std::string ctx_note;
  PRIMEKV_ASSIGN_OR_RETURN(const int ctx_size, ResolveContextSize(model.config(), a.ctx_size,
                                                                  a.allow_ctx_overflow, &ctx_note));
  if (!ctx_note.empty()) std::fprintf(stderr, "primekv: warning: %s\n", ctx_note.c_str());
  const std::string where =
      a.ctx_size == 0 ? " (the model's trained context; -c N --allow-ctx-overflow runs past it)"
                      : " (-c)";
  std::vector<Token> ids;
  if (!a.text.empty()) {
    PRIMEKV_RETURN_IF_ERROR(
        CheckTextFitsContext(a.text.size(), ctx_size, model.tokenizer().MaxTokenBytes(), "--text"));
    ids = model.tokenizer().Encode(a.text, true);
  } else {
    PRIMEKV_ASSIGN_OR_RETURN(ids, ParseIds(a.tokens));
  }
  if (ids.empty()) return Status::Error("no tokens");
  if (ids.size() > static_cast<size_t>(ctx_size)) {
    return Status::Error(std::string(a.text.empty() ? "--tokens" : "--text") + ": " +
                         std::to_string(ids.size()) + " tokens exceed the context size of " +
                         std::to_string(ctx_size) + where);
  }
  for (const Token id : ids) {
    if (id < 0 || id >= model.config().vocab_size) {
      return Status::Error("--tokens: id " + std::to_string(id) +
                           " is outside the vocabulary [0, " +
                           std::to_string(model.config().vocab_size) + ")");
    }
  }
  return ids;
}

int RunLogits(const LogitsArgs& a) {
  // A FIFO, device or link is refused before the model runs, not after.
  if (Status s = CheckReplaceableOutput(a.out, "-o"); !s.ok()) return Fail(s.message());
  // -c also picks LongRoPE's factors, as llama.cpp's context size does.
  auto model = Model::Load(a.model, WeightMemory::kMapped, a.ctx_size);
  if (!model.ok()) return Fail(model.message());
  if (Status s = CheckKvDType(a.kv_type, model->config().head_dim); !s.ok())
    return Fail(s.message());
  auto input = InputIds(a, *model);
  if (!input.ok()) return Fail(input.message());
  const std::vector<Token>& ids = *input;
  KvCacheOptions kv;
  kv.dtype = a.kv_type;
  const int vocab = model->config().vocab_size;
  const auto tokens = static_cast<int64_t>(ids.size());
  if (Status s = CheckMemoryFits(tokens, KvCacheBytes(model->config(), a.kv_type, tokens),
                                 ids.size() * static_cast<uint64_t>(vocab) * sizeof(float),
                                 a.memory_limit);
      !s.ok())
    return Fail(s.message());
  std::vector<float> logits(ids.size() * static_cast<size_t>(vocab));
  ThreadPool pool(a.threads);
  KvCache cache = model->NewCache(kv);
  ForwardWorkspace ws;
  const size_t chunk = a.chunk > 0 ? static_cast<size_t>(a.chunk) : ids.size();
  for (size_t b = 0; b < ids.size(); b += chunk) {
    const size_t n = std::min(chunk, ids.size() - b);
    MatView<float> out(logits.data() + b * vocab, static_cast<int64_t>(n), vocab);
    Status s =
        model->Forward(std::span<const Token>(ids.data() + b, n), cache, {true}, out, pool, ws);
    if (!s.ok()) return Fail(s.message());
  }
  // A reference check must not compare against NaN or infinity as if it were output.
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) {
      return Fail("the model produced non-finite logits (NaN or infinity) at token " +
                  std::to_string(i / static_cast<size_t>(vocab)) +
                  ": its weights or activations overflow; nothing written");
    }
  }
  const std::string_view bytes(reinterpret_cast<const char*>(logits.data()),
                               logits.size() * sizeof(float));
  if (Status s = WriteFileReplacing(a.out, bytes, "-o"); !s.ok()) return Fail(s.message());
  std::fprintf(stderr, "wrote %zu x %d logits to %s\n", ids.size(), vocab,
               Printable(a.out, 200).c_str());
  return 0;
}

}  // namespace

void AddLogits(CLI::App& app, Runner& run) {
  auto a = std::make_shared<LogitsArgs>();
  auto* cmd =
      app.add_subcommand("logits", "Write float32 logits [n_tokens, vocab] for all positions");
  cmd->add_option("-m,--model", a->model)->required();
  auto* t = cmd->add_option("--tokens", a->tokens, "Comma-separated token ids");
  cmd->add_option("--text", a->text, "Text to encode (with BOS) instead of ids")->excludes(t);
  cmd->add_option("-o,--output", a->out, "Output file (raw little-endian float32)")->required();
  AddKvType(*cmd, a->kv_type);
  cmd->add_option("--chunk", a->chunk, "Prefill in chunks of this many tokens (0 = one pass)")
      ->check(IntegerIn(0, std::numeric_limits<int>::max()));
  cmd->add_option("-t,--threads", a->threads)->check(Threads())->capture_default_str();
  cmd->add_option("-c,--ctx-size", a->ctx_size,
                  "Context size in tokens (0 = the model's trained context); the tokens must fit")
      ->check(IntegerIn(0, std::numeric_limits<int>::max()));
  cmd->add_flag("--allow-ctx-overflow", a->allow_ctx_overflow,
                "Allow -c above the model's trained context (warns)");
  AddMemoryLimit(*cmd, a->memory_limit);
  cmd->callback([&run, a] { run = [a] { return RunLogits(*a); }; });
}

}  // namespace primekv::cli
