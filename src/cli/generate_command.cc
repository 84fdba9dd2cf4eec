#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "primekv/model/model.h"
#include "primekv/press/profile_locator.h"
#include "primekv/session/pipeline.h"

namespace primekv::cli {

namespace {

struct GenerateArgs {
  std::string model;
  WeightMemory weight_memory = WeightMemory::kMapped;
  std::string prompt;
  std::string prompt_file;
  std::string context_file;
  std::vector<std::string> questions;
  std::vector<std::string> answer_prefixes;
  int n = 128;
  float temp = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
  bool chat = false;
  std::string chat_template;
  bool json = false;
  int threads = 0;
  std::string press = "none";
  double ratio = 0.0;
  std::string mode = "context";
  int chunk = 512;
  int interval = 512;
  KvDType kv_type = KvDType::kF16;
  int64_t ctx_size = 0;
  bool allow_ctx_overflow = false;
  uint64_t memory_limit = 0;  // bytes; 0 = the machine's memory
};

// The prompt: -p, or the file of -f or --context-file.
Result<std::string> ReadContext(const GenerateArgs& a) {
  std::string context = a.prompt;
  for (const auto& [path, option] :
       {std::pair{&a.prompt_file, "--prompt-file"}, std::pair{&a.context_file, "--context-file"}}) {
    if (path->empty()) continue;
    // Read to EOF, so pipes and /proc files (whose size reads as 0) work; an empty file is an
    // error, not an empty prompt.
    PRIMEKV_ASSIGN_OR_RETURN(context, ReadInputFile(*path, option, FileSource::kStream));
    if (context.empty()) return Status::Error(std::string(option) + " '" + *path + "' is empty");
  }
  return context;
}

// One answer prefix per question (a single one applies to all), or none.
Result<std::vector<std::string>> AnswerPrefixes(const GenerateArgs& a) {
  if (!a.answer_prefixes.empty() && a.questions.empty()) {
    return Status::Error("--answer-prefix needs --question");
  }
  std::vector<std::string> prefixes = a.answer_prefixes;
  if (prefixes.size() == 1) {
    const std::string only = prefixes[0];
    prefixes.assign(a.questions.size(), only);
  }
  if (!prefixes.empty() && prefixes.size() != a.questions.size()) {
    return Status::Error("--answer-prefix: give one, or one per --question");
  }
  return prefixes;
}

// The context, questions and answer prefixes together, refused by size before tokenizing.
Status CheckTextFits(const GenerateArgs& a, const Model& model, const std::string& context) {
  PRIMEKV_ASSIGN_OR_RETURN(const int ctx_size, ResolveContextSize(model.config(), a.ctx_size,
                                                                  a.allow_ctx_overflow, nullptr));
  uint64_t bytes = context.size();
  for (const std::string& q : a.questions) bytes += q.size();
  for (const std::string& p : a.answer_prefixes) bytes += p.size();
  const char* what = !a.context_file.empty()  ? "--context-file"
                     : !a.prompt_file.empty() ? "--prompt-file"
                                              : "the prompt";
  return CheckTextFitsContext(bytes, ctx_size, model.tokenizer().MaxTokenBytes(), what);
}

// Everything must fit the context size: the prompt or it is an error, the answers or -n is cut.
// Returns the tokens to generate per answer.
Result<int> FitContext(const GenerateArgs& a, const Model& model, CompressionMode mode,
                       const std::vector<Token>& ctx_ids,
                       const std::vector<std::vector<Token>>& q_ids) {
  std::string ctx_note;
  PRIMEKV_ASSIGN_OR_RETURN(const int ctx_size, ResolveContextSize(model.config(), a.ctx_size,
                                                                  a.allow_ctx_overflow, &ctx_note));
  if (!ctx_note.empty()) std::fprintf(stderr, "primekv: warning: %s\n", ctx_note.c_str());
  const int64_t prompt =
      ConversationPositions(mode, static_cast<int64_t>(ctx_ids.size()), q_ids, 0);
  const int64_t answers = mode == CompressionMode::kMultiTurn && q_ids.size() > 1
                              ? static_cast<int64_t>(q_ids.size())
                              : 1;
  if (prompt > ctx_size || (a.n > 0 && prompt + answers > ctx_size)) {
    return Status::Error(
        "the prompt is " + std::to_string(prompt) + " tokens, " +
        (prompt > ctx_size ? "more than" : "leaving no room to generate in") +
        " the context size of " + std::to_string(ctx_size) +
        (a.ctx_size == 0 ? " (the model's trained context; -c N --allow-ctx-overflow runs past it)"
                         : " (-c)"));
  }
  int n = a.n;
  if (ConversationPositions(mode, static_cast<int64_t>(ctx_ids.size()), q_ids, n) > ctx_size) {
    n = static_cast<int>((ctx_size - prompt) / answers);
    std::fprintf(stderr,
                 "primekv: note: -n %d cut to %d tokens per answer: the prompt takes %lld of the "
                 "context size of %d tokens\n",
                 a.n, n, static_cast<long long>(prompt), ctx_size);
  }
  return n;
}

// The cache and timing figures of `generate --json`, documented in README.md: the context's
// full size, the first compression, the cache as the run leaves it, its peak, and every
// compression counted.
void AddKvAndTimings(const PipelineReport& r, KvDType kv_type, size_t context_tokens,
                     nlohmann::json& j) {
  double decode_ms = 0, n_dec = 0;
  for (const auto& t : r.turns) {
    decode_ms += t.decode_ms;
    n_dec += static_cast<double>(t.tokens.size());
  }
  nlohmann::json kv;
  kv["dtype"] = KvDTypeName(kv_type);
  kv["bytes_before"] = r.kv_bytes_full;
  kv["bytes_after"] = r.kv_bytes_compressed;
  kv["kept_per_layer"] = r.kept_per_layer;
  kv["final"] = {{"bytes", r.kv_bytes_final}, {"entries_per_layer", r.entries_per_layer_final}};
  kv["bytes_peak"] = r.kv_bytes_peak;
  kv["compressions"] = r.compressions;
  j["kv"] = kv;
  j["timings"] = {{"prefill_ms", r.context_prefill_ms},
                  {"score_ms", r.score_ms},
                  {"decode_ms", decode_ms},
                  {"prefill_tokens_per_s",
                   r.context_prefill_ms > 0 ? context_tokens / (r.context_prefill_ms / 1e3) : 0.0},
                  {"decode_tokens_per_s", decode_ms > 0 ? n_dec / (decode_ms / 1e3) : 0.0}};
}

void PrintJson(const GenerateArgs& a, const Tokenizer& tok, const std::string& press,
               CompressionMode mode, const std::vector<Token>& ctx_ids,
               const std::vector<std::vector<Token>>& q_ids, const PipelineReport& r) {
  nlohmann::json j;
  j["model"] = a.model;
  j["press"] = press;
  j["ratio"] = a.ratio;
  j["mode"] = std::string(CompressionModeName(mode));
  j["prompt_tokens"] = ctx_ids;
  const TurnResult& first = r.turns.front();
  j["tokens"] = first.tokens;
  j["text"] = tok.Decode(first.tokens, false);
  if (r.turns.size() > 1 || !q_ids.empty()) {
    nlohmann::json turns = nlohmann::json::array();
    for (size_t t = 0; t < r.turns.size(); ++t) {
      turns.push_back({{"question", t < a.questions.size() ? a.questions[t] : ""},
                       {"question_tokens", t < q_ids.size() ? q_ids[t] : std::vector<Token>{}},
                       {"tokens", r.turns[t].tokens},
                       {"text", tok.Decode(r.turns[t].tokens, false)}});
    }
    j["turns"] = turns;
  }
  AddKvAndTimings(r, a.kv_type, ctx_ids.size(), j);
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

// Streams the prompt (-p, -f: the answer continues it), or one line naming a --context-file (a
// document is not worth reprinting), then each answer's tokens under its question.
std::function<bool(int, Token)> StreamTokens(const GenerateArgs& a, const Tokenizer& tok,
                                             const std::string& context,
                                             const std::vector<std::string>& prefixes) {
  if (a.context_file.empty()) {
    std::fwrite(context.data(), 1, context.size(), stdout);  // whole: a NUL does not end it
  } else {
    std::printf("[context] %s: %zu bytes", Printable(a.context_file, 200).c_str(), context.size());
  }
  std::fflush(stdout);
  return [&a, &tok, &prefixes, last_turn = -1](int turn, Token t) mutable {
    if (turn != last_turn) {
      last_turn = turn;
      if (turn < static_cast<int>(a.questions.size())) {
        const auto i = static_cast<size_t>(turn);
        std::printf("\n\n[Q%d] %s\n[A%d] %s", turn + 1, a.questions[i].c_str(), turn + 1,
                    i < prefixes.size() ? prefixes[i].c_str() : "");
      }
    }
    const std::string piece = tok.TokenToPiece(t);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    // Stop generating once the output cannot be written (main reports the error).
    return std::fflush(stdout) == 0 && !std::ferror(stdout);
  };
}

int RunGenerate(const GenerateArgs& a) {
  auto context = ReadContext(a);
  if (!context.ok()) return Fail(context.message());
  auto mode = ParseCompressionMode(a.mode);
  if (!mode)
    return Fail("unknown --mode '" + a.mode +
                "' (context, question, multiturn, chunked, decode, first-question)");
  auto model = Model::Load(a.model, a.weight_memory, a.ctx_size);
  if (!model.ok()) return Fail(model.message());
  auto press_text = ResolveAutoProfile(a.press, a.model);  // profile=auto: the model's profile
  if (!press_text.ok()) return Fail(press_text.message());
  if (*press_text != a.press) std::fprintf(stderr, "press %s\n", press_text->c_str());
  auto spec = ParsePressSpec(*press_text);  // checked at parse time (PressList)
  if (!spec.ok()) return Fail(spec.message());
  auto press = MakePress(*spec);
  if (!press.ok()) return Fail(press.message());
  if (Status s = CheckKvDType(a.kv_type, model->config().head_dim); !s.ok())
    return Fail(s.message());
  const Tokenizer& tok = model->tokenizer();
  auto prefixes = AnswerPrefixes(a);
  if (!prefixes.ok()) return Fail(prefixes.message());
  const bool chat = a.chat || !a.chat_template.empty();
  std::optional<ChatFormat> chat_format;
  if (chat) {
    auto f = ResolveChatFormat(tok, a.chat_template);
    if (!f.ok()) return Fail(a.model + ": " + f.message());
    chat_format = *f;
  }
  if (Status s = CheckTextFits(a, *model, *context); !s.ok()) return Fail(s.message());
  auto [ctx_ids, q_ids] =
      EncodeConversation(tok, chat, *context, a.questions, *prefixes, chat_format);
  if (ctx_ids.empty()) return Fail("the prompt encodes to no tokens");
  auto n = FitContext(a, *model, *mode, ctx_ids, q_ids);
  if (!n.ok()) return Fail(n.message());
  // The cache holds every position without compression; with it, at least the context that
  // context mode prefills before compressing (other modes compress as they go).
  const bool compressing = spec->name != "none" && a.ratio > 0;
  const int64_t held =
      !compressing ? ConversationPositions(*mode, static_cast<int64_t>(ctx_ids.size()), q_ids, *n)
      : *mode == CompressionMode::kContext ? static_cast<int64_t>(ctx_ids.size())
                                           : 0;
  if (Status s =
          CheckMemoryFits(held, KvCacheBytes(model->config(), a.kv_type, held), 0, a.memory_limit);
      !s.ok())
    return Fail(s.message());

  ThreadPool pool(a.threads);
  Compressor compressor(*model, std::move(press).value());
  if (const Status& fits = compressor.CheckModel(); !fits.ok()) return Fail(fits.message());
  PipelineOptions opts;
  opts.schedule.ratio = a.ratio;
  opts.mode = *mode;
  opts.schedule.chunk = a.chunk;
  opts.schedule.interval = a.interval;
  opts.max_new_tokens = *n;
  opts.sampler = {a.temp, a.top_k, a.top_p, a.seed};
  opts.kv.dtype = a.kv_type;
  if (!a.json) opts.on_token = StreamTokens(a, tok, *context, *prefixes);
  auto report = RunPipeline(*model, compressor, opts, ctx_ids, q_ids, pool);
  if (!report.ok()) return Fail(report.message());
  const PipelineReport& r = *report;
  if (a.json) {
    PrintJson(a, tok, compressor.press().name, *mode, ctx_ids, q_ids, r);
  } else {
    std::fputs("\n", stdout);
    double decode_ms = 0, decoded = 0;
    for (const TurnResult& t : r.turns) {
      decode_ms += t.decode_ms;
      decoded += static_cast<double>(t.tokens.size());
    }
    std::fprintf(stderr,
                 "\ncontext %d tokens, prefill %.1f ms (%.0f tokens/s); decode %.1f tokens/s; KV "
                 "%zu -> %zu bytes (press %s, ratio %.2f, %s)\n",
                 r.context_tokens, r.context_prefill_ms,
                 r.context_prefill_ms > 0 ? r.context_tokens / (r.context_prefill_ms / 1e3) : 0.0,
                 decode_ms > 0 ? decoded / (decode_ms / 1e3) : 0.0, r.kv_bytes_full,
                 r.kv_bytes_compressed, compressor.press().name.c_str(), a.ratio, a.mode.c_str());
  }
  return 0;
}

}  // namespace

void AddGenerate(CLI::App& app, Runner& run) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd =
      app.add_subcommand("generate", "Generate text, optionally over a compressed KV cache");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  AddNoMmap(*cmd, a->weight_memory);
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "Prompt (the context when compressing)");
  auto* pf = cmd->add_option("-f,--prompt-file", a->prompt_file, "Read the prompt from a file")
                 ->excludes(p);
  cmd->add_option("--context-file", a->context_file,
                  "Context to compress, read from a file (named, not reprinted, in the output)")
      ->excludes(p)
      ->excludes(pf);
  cmd->add_option("--question", a->questions, "Question after the context (repeat for turns)");
  cmd->add_option("--answer-prefix", a->answer_prefixes,
                  "Text the answer starts with, after the question's line (once for all "
                  "questions, or once per question)");
  cmd->add_option("-c,--ctx-size", a->ctx_size,
                  "Context size in tokens (0 = the model's trained context); the "
                  "prompt must fit, and -n is cut to what is left")
      ->check(IntegerIn(0, std::numeric_limits<int>::max()));
  cmd->add_flag("--allow-ctx-overflow", a->allow_ctx_overflow,
                "Allow -c above the model's trained context (warns)");
  cmd->add_option("-n,--n-predict", a->n, "Tokens to generate per turn")
      ->check(IntegerIn(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd->add_option("--temp", a->temp, "Temperature (0 = greedy)")
      ->check(RealIn(0, 1e6))
      ->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "Top-k (0 = off)")
      ->check(IntegerIn(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "Top-p in (0, 1] (1 = off)")
      ->check(FloatIn(0, 1, /*lo_open=*/true))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Sampling seed")->check(Seed())->capture_default_str();
  cmd->add_flag("--chat", a->chat, "Wrap the prompt in the model's chat template");
  cmd->add_option(
      "--chat-template", a->chat_template,
      "Chat template by name, overriding the model's (implies --chat): " + ChatFormatNames());
  cmd->add_flag("--json", a->json, "Print one JSON object instead of streaming text");
  cmd->add_option("-t,--threads", a->threads, "Threads (0 = all cores)")
      ->check(Threads())
      ->capture_default_str();
  cmd->add_option("--press", a->press,
                  "Compression method, NAME or NAME:key=value,key=value (primekv list-presses)")
      ->check(PressList(/*single=*/true))
      ->capture_default_str();
  cmd->add_option("--ratio", a->ratio, "Fraction of the KV cache to remove, in [0, 1)")
      ->check(RealIn(0, 1, false, /*hi_open=*/true))
      ->capture_default_str();
  cmd->add_option("--mode", a->mode,
                  "context | question | multiturn | chunked | decode | first-question")
      ->check(OneOf({"context", "question", "multiturn", "multi-turn", "chunked", "decode",
                     "first-question"}))
      ->capture_default_str();
  cmd->add_option("--chunk", a->chunk, "Prefill chunk for --mode chunked")
      ->check(IntegerIn(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd->add_option("--interval", a->interval,
                  "Generated tokens between compressions (--mode decode)")
      ->check(IntegerIn(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  AddKvType(*cmd, a->kv_type);
  AddMemoryLimit(*cmd, a->memory_limit);
  cmd->callback([&run, a] { run = [a] { return RunGenerate(*a); }; });
}

}  // namespace primekv::cli
