// A request of `primekv serve` runs as a turn of a Session: the compressions it makes are the
// schedule's (after the first prompt, every --interval tokens, back to the budget after a turn),
// counted in /metrics.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "common/random_models.h"
#include "server/engine.h"

namespace primekv::server {
namespace {

const char kModel[] = PRIMEKV_SOURCE_DIR "/models/primekv-retrieval.gguf";

std::unique_ptr<Engine> MakeEngine(ScheduleMode mode, int interval) {
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

std::vector<Token> RandomPrompt(const Model& m, int n, unsigned seed = 5) {
  std::mt19937 rng(seed);
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

double Metric(Engine& e, const std::string& name) {
  const std::string text = e.MetricsText();
  const std::string key = "\nprimekv_" + name + " ";
  const size_t at = text.find(key);
  Check(at != std::string::npos, name.c_str());
  return std::stod(text.substr(at + key.size()));
}

uint64_t Compressions(Engine& e) { return static_cast<uint64_t>(Metric(e, "compressions_total")); }

TEST(ServerTurn, DecodeModeCompressesAfterThePromptAndEveryIntervalTokens) {
  auto e = MakeEngine(ScheduleMode::kDecode, 4);
  auto out = RunTurn(*e, Request(RandomPrompt(e->model(), 200), 13));
  ASSERT_TRUE(out.ok()) << out.message();
  const int fed = static_cast<int>(out->appended.size());
  ASSERT_GT(fed, 4);  // at least one interval
  // Every 4th token fed with more to follow: the last one fed ends the turn.
  EXPECT_EQ(Compressions(*e), 1u + static_cast<uint64_t>((fed - 1) / 4)) << fed << " fed";
}

TEST(ServerTurn, MultiTurnComesBackToTheFirstPromptsBudgetAfterEachTurn) {
  auto e = MakeEngine(ScheduleMode::kMultiTurn, 512);
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

// A sliding-window model in the server: a request that continues a session reuses its cache
// (the windowed layers dropped what they no longer see as the turn decoded); one that departs
// from it inside the window's reach is prefilled whole and answers as a new session does.
TEST(ServerTurn, WindowedModelContinuesSessionsAndRefillsADeparture) {
  RandomModelSpec spec = SmallLlamaSpec(31);
  spec.arch = Arch::kGemma2;
  spec.n_layers = 4;
  spec.sliding_window = 16;
  spec.max_context = 4096;
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "primekv_server_gemma2.gguf";
  WriteAndLoad(spec, path);
  ServerOptions o;
  o.model_path = path.string();
  o.press = "knorm";
  o.ratio = 0.5;
  o.threads = 2;
  auto e = Engine::Create(o);
  ASSERT_TRUE(e.ok()) << e.message();
  const std::vector<Token> first = RandomPrompt((*e)->model(), 100);
  auto one = RunTurn(**e, Request(first, 24));
  ASSERT_TRUE(one.ok()) << one.message();
  std::vector<Token> next = first;
  next.insert(next.end(), one->appended.begin(), one->appended.end());
  next.insert(next.end(), {40, 41, 42});
  TurnRequest req = Request(next, 4);
  req.session_id = one->session_id;
  auto two = RunTurn(**e, std::move(req));
  ASSERT_TRUE(two.ok()) << two.message();
  EXPECT_EQ(two->cached_tokens, static_cast<int>(first.size() + one->appended.size()));

  std::vector<Token> departed(first.begin(), first.begin() + 90);
  departed.insert(departed.end(), {7, 8, 9});
  req = Request(departed, 8);
  req.session_id = one->session_id;
  auto three = RunTurn(**e, std::move(req));
  ASSERT_TRUE(three.ok()) << three.message();
  EXPECT_EQ(three->cached_tokens, 0);
  EXPECT_EQ(three->prefilled_tokens, static_cast<int>(departed.size()));
  auto fresh = Engine::Create(o);
  ASSERT_TRUE(fresh.ok()) << fresh.message();
  auto alone = RunTurn(**fresh, Request(departed, 8));
  ASSERT_TRUE(alone.ok()) << alone.message();
  EXPECT_EQ(three->tokens, alone->tokens);
}

// Two requests continue two stored sessions while a third turn holds the memory; when it ends,
// each restored cache leaves too little room for the other's, and no turn runs to free any.
// Waiting would only run out --memory-wait-s and refuse one with 503: instead one goes on and
// the other drops its cache (its file is current), then reads it back when that turn is done.
TEST(ServerTurn, RequestsThatWaitOnEachOthersMemoryAreAllAnswered) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("primekv_turn_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ServerOptions o;
  o.model_path = kModel;
  o.press = "knorm";
  o.ratio = 0;
  o.threads = 2;
  o.slots = 3;
  o.session_dir = dir.string();
  const int n = 300;
  std::vector<std::vector<Token>> next(2);
  std::vector<std::string> ids(2);
  double one_session = 0;
  {
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.message();
    for (int i = 0; i < 2; ++i) {
      TurnRequest req = Request(RandomPrompt((*e)->model(), n, 10 + i), 2);
      req.ratio = 0;
      next[i] = req.prompt;
      auto out = RunTurn(**e, std::move(req));
      ASSERT_TRUE(out.ok()) << out.message();
      ids[i] = out->session_id;
      next[i].insert(next[i].end(), out->appended.begin(), out->appended.end());
      next[i].insert(next[i].end(), {40, 41});
    }
    one_session = Metric(**e, "kv_bytes_held") / 2;
  }
  ASSERT_GT(one_session, 0);
  // Either stored session fits with its turn; both do not.
  o.kv_budget_bytes = static_cast<size_t>(1.5 * one_session);
  o.memory_wait_s = 30;
  auto created = Engine::Create(o);
  ASSERT_TRUE(created.ok()) << created.message();
  Engine& e = **created;
  TurnRequest big = Request(RandomPrompt(e.model(), n, 20), 4);
  big.ratio = 0;
  auto holder = e.Begin(std::move(big));
  ASSERT_TRUE(std::holds_alternative<std::unique_ptr<Turn>>(holder));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> results(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      TurnRequest req = Request(next[i], 2);
      req.ratio = 0;
      req.session_id = ids[i];
      auto out = RunTurn(e, std::move(req));
      results[i] = out.ok() ? "ok" : out.message();
    });
  }
  for (int tries = 0; Metric(e, "requests_waiting_memory") < 2 && tries < 2000; ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(Metric(e, "requests_waiting_memory"), 2);
  std::get<std::unique_ptr<Turn>>(holder).reset();  // the third turn ends without running
  for (auto& t : threads) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(results[0], "ok");
  EXPECT_EQ(results[1], "ok");
  EXPECT_EQ(Metric(e, "memory_gave_way_total"), 1);
  EXPECT_EQ(Metric(e, "requests_rejected_memory_total"), 0);
  EXPECT_LT(seconds, 20) << "a request waited out --memory-wait-s";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace primekv::server
