#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "primekv/model.h"
#include "primekv/pipeline.h"

namespace primekv::cli {

namespace {

struct GenerateArgs {
  std::string model;
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
  std::string kv_type = "f16";
};

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int RunGenerate(const GenerateArgs& a) {
  std::string context = a.prompt;
  for (const auto* path : {&a.prompt_file, &a.context_file}) {
    if (path->empty()) continue;
    auto text = ReadFile(*path);
    if (!text.ok()) return Fail(text.message());
    context = *text;
  }
  if (a.n < 0) return Fail("-n must be >= 0");
  auto mode = ParseCompressionMode(a.mode);
  if (!mode)
    return Fail("unknown --mode '" + a.mode + "' (context, question, multiturn, chunked, decode)");
  auto spec = ParsePressSpec(a.press);
  if (!spec.ok()) return Fail(spec.message());
  auto press = MakePress(*spec);
  if (!press.ok()) return Fail(press.message());
  if (!(a.ratio >= 0 && a.ratio < 1)) return Fail("--ratio must be in [0, 1)");
  if (a.kv_type != "f16" && a.kv_type != "f32") return Fail("--kv-type must be f16 or f32");
  auto model = Model::Load(a.model);
  if (!model.ok()) return Fail(model.message());
  const Tokenizer& tok = model->tokenizer();

  if (!a.answer_prefixes.empty() && a.questions.empty()) {
    return Fail("--answer-prefix needs --question");
  }
  std::vector<std::string> prefixes = a.answer_prefixes;
  if (prefixes.size() == 1) {
    const std::string only = prefixes[0];
    prefixes.assign(a.questions.size(), only);
  }
  if (!prefixes.empty() && prefixes.size() != a.questions.size()) {
    return Fail("--answer-prefix: give one, or one per --question");
  }
  const bool chat = a.chat || !a.chat_template.empty();
  std::optional<ChatFormat> chat_format;
  if (chat) {
    auto f = ResolveChatFormat(tok, a.chat_template);
    if (!f.ok()) return Fail(a.model + ": " + f.message());
    chat_format = *f;
  }
  auto [ctx_ids, q_ids] =
      EncodeConversation(tok, chat, context, a.questions, prefixes, chat_format);
  if (ctx_ids.empty()) return Fail("the prompt encodes to no tokens");

  ThreadPool pool(a.threads);
  Compressor compressor(*model, std::move(press).value());
  PipelineOptions opts;
  opts.ratio = a.ratio;
  opts.mode = *mode;
  opts.chunk = a.chunk;
  opts.interval = a.interval;
  opts.max_new_tokens = a.n;
  opts.sampler = {a.temp, a.top_k, a.top_p, a.seed};
  opts.kv.dtype = a.kv_type == "f32" ? KvDType::kF32 : KvDType::kF16;
  int last_turn = -1;
  if (!a.json) {
    std::fputs(context.c_str(), stdout);
    std::fflush(stdout);
    opts.on_token = [&](int turn, Token t) {
      if (turn != last_turn) {
        last_turn = turn;
        if (turn < static_cast<int>(a.questions.size())) {
          const auto i = static_cast<size_t>(turn);
          std::printf("\n\n[Q%d] %s\n[A%d] %s", turn + 1, a.questions[i].c_str(), turn + 1,
                      i < prefixes.size() ? prefixes[i].c_str() : "");
        }
      }
      std::fputs(tok.TokenToPiece(t).c_str(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  auto report = RunPipeline(*model, compressor, opts, ctx_ids, q_ids, pool);
  if (!report.ok()) return Fail(report.message());
  const PipelineReport& r = *report;
  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["press"] = compressor.press().name;
    j["ratio"] = a.ratio;
    j["mode"] = std::string(CompressionModeName(*mode));
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
    double decode_ms = 0, n_dec = 0;
    for (const auto& t : r.turns) {
      decode_ms += t.decode_ms;
      n_dec += static_cast<double>(t.tokens.size());
    }
    j["kv"] = {{"dtype", a.kv_type},
               {"bytes_before", r.kv_bytes_full},
               {"bytes_after", r.kv_bytes_compressed},
               {"bytes_peak", r.kv_bytes_peak},
               {"kept_per_layer", r.kept_per_layer},
               {"compressions", r.compressions}};
    j["timings"] = {
        {"prefill_ms", r.context_prefill_ms},
        {"score_ms", r.score_ms},
        {"decode_ms", decode_ms},
        {"prefill_tokens_per_s",
         r.context_prefill_ms > 0 ? ctx_ids.size() / (r.context_prefill_ms / 1e3) : 0.0},
        {"decode_tokens_per_s", decode_ms > 0 ? n_dec / (decode_ms / 1e3) : 0.0}};
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fputs("\n", stdout);
    std::fprintf(
        stderr,
        "\ncontext %d tokens, prefill %.1f ms; KV %zu -> %zu bytes (press %s, ratio %.2f, %s)\n",
        r.context_tokens, r.context_prefill_ms, r.kv_bytes_full, r.kv_bytes_compressed,
        compressor.press().name.c_str(), a.ratio, a.mode.c_str());
  }
  return 0;
}

}  // namespace

void AddGenerate(CLI::App& app, Runner& run) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd =
      app.add_subcommand("generate", "Generate text, optionally over a compressed KV cache");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "Prompt (the context when compressing)");
  auto* pf = cmd->add_option("-f,--prompt-file", a->prompt_file, "Read the prompt from a file")
                 ->excludes(p);
  cmd->add_option("--context-file", a->context_file, "Context to compress, read from a file")
      ->excludes(p)
      ->excludes(pf);
  cmd->add_option("--question", a->questions, "Question after the context (repeat for turns)");
  cmd->add_option("--answer-prefix", a->answer_prefixes,
                  "Text the answer starts with, after the question's line (once for all "
                  "questions, or once per question)");
  cmd->add_option("-n,--n-predict", a->n, "Tokens to generate per turn")->capture_default_str();
  cmd->add_option("--temp", a->temp, "Temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "Top-k (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "Top-p (1 = off)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
  cmd->add_flag("--chat", a->chat, "Wrap the prompt in the model's chat template");
  cmd->add_option(
      "--chat-template", a->chat_template,
      "Chat template by name, overriding the model's (implies --chat): " + ChatFormatNames());
  cmd->add_flag("--json", a->json, "Print one JSON object instead of streaming text");
  cmd->add_option("-t,--threads", a->threads, "Threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--press", a->press, "Compression method (primekv list-presses shows all)")
      ->capture_default_str();
  cmd->add_option("--ratio", a->ratio, "Fraction of the KV cache to remove, in [0, 1)")
      ->capture_default_str();
  cmd->add_option("--mode", a->mode, "context | question | multiturn | chunked | decode")
      ->capture_default_str();
  cmd->add_option("--chunk", a->chunk, "Prefill chunk for --mode chunked")->capture_default_str();
  cmd->add_option("--interval", a->interval,
                  "Generated tokens between compressions (--mode decode)")
      ->capture_default_str();
  cmd->add_option("--kv-type", a->kv_type, "KV storage: f16 | f32")->capture_default_str();
  cmd->callback([&run, a] { run = [a] { return RunGenerate(*a); }; });
}

}  // namespace primekv::cli
