#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "primekv/generate.h"
#include "primekv/model.h"

namespace primekv::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  int n = 128;
  float temp = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
  bool chat = false;
  bool json = false;
  int threads = 0;
};

int RunGenerate(const GenerateArgs& a) {
  std::string prompt = a.prompt;
  if (!a.prompt_file.empty()) {
    std::ifstream in(a.prompt_file, std::ios::binary);
    if (!in) return Fail("cannot read prompt file '" + a.prompt_file + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    prompt = ss.str();
  }
  if (a.n < 0) return Fail("-n must be >= 0");
  auto model = Model::Load(a.model);
  if (!model.ok()) return Fail(model.message());
  const Tokenizer& tok = model->tokenizer();

  std::vector<Token> ids;
  if (a.chat) {
    const ChatFormat fmt = DetectChatFormat(tok);
    std::vector<ChatMessage> msgs{{"user", prompt}};
    ids = tok.Encode(ApplyChatTemplate(fmt, msgs, true), true, true);
  } else {
    ids = tok.Encode(prompt, true, false);
  }
  if (ids.empty()) return Fail("the prompt encodes to no tokens");

  ThreadPool pool(a.threads);
  KvCache cache = model->NewCache();
  ForwardWorkspace ws;
  GenerateOptions opts;
  opts.max_new_tokens = a.n;
  opts.sampler = {a.temp, a.top_k, a.top_p, a.seed};
  if (!a.json) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
    opts.on_token = [&](Token t) {
      if (!tok.IsEndOfGeneration(t)) std::fputs(tok.TokenToPiece(t).c_str(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  if (a.n == 0) {
    if (!a.json) std::fputs("\n", stdout);
    return 0;
  }
  auto r = Generate(*model, cache, ids, opts, pool, ws);
  if (!r.ok()) return Fail(r.message());
  std::vector<Token> text_ids;
  for (Token t : r->tokens) {
    if (!tok.IsEndOfGeneration(t)) text_ids.push_back(t);
  }
  const std::string text = tok.Decode(text_ids, false);
  const double decoded = static_cast<double>(r->tokens.size() > 0 ? r->tokens.size() - 1 : 0);
  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["prompt_tokens"] = ids;
    j["tokens"] = r->tokens;
    j["text"] = text;
    j["stopped_at_end"] = r->stopped_at_end;
    j["timings"] = {{"prefill_ms", r->prefill_ms},
                    {"decode_ms", r->decode_ms},
                    {"prefill_tokens_per_s", r->prefill_ms > 0 ? ids.size() / (r->prefill_ms / 1e3) : 0.0},
                    {"decode_tokens_per_s", r->decode_ms > 0 ? decoded / (r->decode_ms / 1e3) : 0.0}};
    j["kv_bytes"] = cache.BytesInUse();
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::fputs("\n", stdout);
    std::fprintf(stderr, "\nprompt %zu tokens in %.1f ms; generated %zu tokens, %.1f tokens/s\n",
                 ids.size(), r->prefill_ms, r->tokens.size(),
                 r->decode_ms > 0 ? decoded / (r->decode_ms / 1e3) : 0.0);
  }
  return 0;
}

}  // namespace

void AddGenerate(CLI::App& app, Runner& run) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Generate text from a prompt");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "Prompt text");
  cmd->add_option("-f,--prompt-file", a->prompt_file, "Read the prompt from a file")->excludes(p);
  cmd->add_option("-n,--n-predict", a->n, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temp", a->temp, "Temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "Top-k (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "Top-p (1 = off)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
  cmd->add_flag("--chat", a->chat, "Wrap the prompt in the model's chat template");
  cmd->add_flag("--json", a->json, "Print one JSON object instead of streaming text");
  cmd->add_option("-t,--threads", a->threads, "Threads (0 = all cores)")->capture_default_str();
  cmd->callback([&run, a] { run = [a] { return RunGenerate(*a); }; });
}

}  // namespace primekv::cli
