// Dumps the logits of every position for given token ids: the hook for reference checks.
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "primekv/model.h"

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

}  // namespace

void AddLogits(CLI::App& app, Runner& run) {
  struct Args {
    std::string model, tokens, text, out;
    KvDType kv_type = KvDType::kF32;
    int threads = 0;
    int chunk = 0;
  };
  auto a = std::make_shared<Args>();
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
  cmd->callback([&run, a] {
    run = [a] {
      auto model = Model::Load(a->model);
      if (!model.ok()) return Fail(model.message());
      if (Status s = CheckKvDType(a->kv_type, model->config().head_dim); !s.ok())
        return Fail(s.message());
      std::vector<Token> ids;
      if (!a->text.empty()) {
        ids = model->tokenizer().Encode(a->text, true);
      } else {
        auto parsed = ParseIds(a->tokens);
        if (!parsed.ok()) return Fail(parsed.message());
        ids = std::move(parsed).value();
      }
      if (ids.empty()) return Fail("no tokens");
      KvCacheOptions kv;
      kv.dtype = a->kv_type;
      for (const Token id : ids) {
        if (id < 0 || id >= model->config().vocab_size) {
          return Fail("--tokens: id " + std::to_string(id) + " is outside the vocabulary [0, " +
                      std::to_string(model->config().vocab_size) + ")");
        }
      }
      const int vocab = model->config().vocab_size;
      std::vector<float> logits(ids.size() * static_cast<size_t>(vocab));
      ThreadPool pool(a->threads);
      KvCache cache = model->NewCache(kv);
      ForwardWorkspace ws;
      const size_t chunk = a->chunk > 0 ? static_cast<size_t>(a->chunk) : ids.size();
      for (size_t b = 0; b < ids.size(); b += chunk) {
        const size_t n = std::min(chunk, ids.size() - b);
        MatView<float> out(logits.data() + b * vocab, static_cast<int64_t>(n), vocab);
        Status s =
            model->Forward(std::span<const Token>(ids.data() + b, n), cache, {true}, out, pool, ws);
        if (!s.ok()) return Fail(s.message());
      }
      std::ofstream f(a->out, std::ios::binary);
      f.write(reinterpret_cast<const char*>(logits.data()),
              static_cast<std::streamsize>(logits.size() * sizeof(float)));
      if (!f) return Fail("cannot write '" + a->out + "'");
      std::fprintf(stderr, "wrote %zu x %d logits to %s\n", ids.size(), vocab, a->out.c_str());
      return 0;
    };
  });
}

}  // namespace primekv::cli
