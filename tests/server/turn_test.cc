// A request of `primekv serve` runs as a turn of a Session: the compressions it makes are the
// schedule's (after the first prompt, every --interval tokens, back to the budget after a turn),
// counted in /metrics.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "server/server_internal.h"

namespace primekv::server {
namespace {

const char kModel[] = PRIMEKV_SOURCE_DIR "/models/primekv-retrieval.gguf";

std::unique_ptr<Engine> MakeEngine(CompressionMode mode, int interval) {
  ServerOptions o;
  o.model_path = kModel;
  o.press = "knorm";
  o.ratio = 0.5;
  o.mode = mode;
  o.interval = interval;
  o.threads = 2;
  auto e = Engine::Create(o);
  Check(e.ok(), e.ok() ? "" : e.message().c_str());
  return std::move(e).value();
}

TurnRequest Request(std::vector<Token> prompt, int max_tokens) {
  TurnRequest r;
  r.prompt = std::move(prompt);
  r.press = "knorm";
  r.ratio = 0.5;
  r.max_tokens = max_tokens;
  return r;
}

std::vector<Token> RandomPrompt(const Model& m, int n) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> d(3, m.config().vocab_size - 1);
  std::vector<Token> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

Result<TurnOutcome> RunTurn(Engine& e, TurnRequest req) {
  auto begun = e.Begin(std::move(req));
  if (auto* err = std::get_if<HttpError>(&begun)) return Status::Error(err->message);
  return std::get<std::unique_ptr<Turn>>(begun)->Run(nullptr);
}

uint64_t Compressions(Engine& e) {
  const std::string text = e.MetricsText();
  const std::string key = "\nprimekv_compressions_total ";
  const size_t at = text.find(key);
  Check(at != std::string::npos, "compressions_total");
  return std::stoull(text.substr(at + key.size()));
}

TEST(ServerTurn, DecodeModeCompressesAfterThePromptAndEveryIntervalTokens) {
  auto e = MakeEngine(CompressionMode::kDecode, 4);
  auto out = RunTurn(*e, Request(RandomPrompt(e->model(), 200), 13));
  ASSERT_TRUE(out.ok()) << out.message();
  const int fed = static_cast<int>(out->appended.size());
  ASSERT_GT(fed, 4);  // at least one interval
  // Every 4th token fed with more to follow: the last one fed ends the turn.
  EXPECT_EQ(Compressions(*e), 1u + static_cast<uint64_t>((fed - 1) / 4)) << fed << " fed";
}

TEST(ServerTurn, MultiTurnComesBackToTheFirstPromptsBudgetAfterEachTurn) {
  auto e = MakeEngine(CompressionMode::kMultiTurn, 512);
  const std::vector<Token> first = RandomPrompt(e->model(), 200);
  auto one = RunTurn(*e, Request(first, 8));
  ASSERT_TRUE(one.ok()) << one.message();
  // After the prompt (to 100 entries per head), then the answer takes the cache over 100.
  EXPECT_EQ(Compressions(*e), 2u);
  std::vector<Token> next = first;
  next.insert(next.end(), one->appended.begin(), one->appended.end());
  next.insert(next.end(), {40, 41, 42});
  TurnRequest req = Request(next, 4);
  req.session_id = one->session_id;
  auto two = RunTurn(*e, std::move(req));
  ASSERT_TRUE(two.ok()) << two.message();
  EXPECT_EQ(two->cached_tokens, static_cast<int>(first.size() + one->appended.size()));
  EXPECT_EQ(Compressions(*e), 3u);  // only the end of the second turn: its prompt continued
}

}  // namespace
}  // namespace primekv::server
