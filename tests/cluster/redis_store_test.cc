// The Redis session backend against a redis-server this test starts on a free loopback port:
// a session round-trips bit-exactly; a save of an older (or the same) turn is refused; a damaged
// value, or one copied under another tenant's or session's key, is refused; keys hold the tenant
// id. Skipped without redis-server, except under CI=true.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>

#include "common/random_models.h"
#include "primekv/model/random_model.h"
#include "primekv/session/conversation.h"
#include "server/session_backend.h"

extern char** environ;

namespace primekv::server {
namespace {

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string redis = FindOnPath("redis-server");
    if (redis.empty()) {
      const char* ci = std::getenv("CI");
      if (ci && std::string(ci) == "true") FAIL() << "redis-server is required under CI=true";
      GTEST_SKIP() << "redis-server not installed (bash scripts/setup.sh --cluster)";
    }
    dir_ = std::filesystem::temp_directory_path() /
           ("primekv_redis_store_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    port_ = FreePort();
    const std::string port = std::to_string(port_), dir = dir_.string();
    const char* argv[] = {redis.c_str(), "--bind",    "127.0.0.1", "--port", port.c_str(),
                          "--dir",       dir.c_str(), "--save",    "",       "--appendonly",
                          "no",          "--logfile", "redis.log", nullptr};
    ASSERT_EQ(
        posix_spawn(&pid_, redis.c_str(), nullptr, nullptr, const_cast<char**>(argv), environ), 0);
    for (int i = 0; i < 200 && !Ping(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    ASSERT_TRUE(Ping()) << "redis-server did not start on port " << port_;

    RandomModelSpec ms = SessionFileSpec();
    ASSERT_TRUE(WriteRandomModel(ms, dir_ / "m.gguf").ok());
    auto model = Model::Load(dir_ / "m.gguf");
    ASSERT_TRUE(model.ok()) << model.message();
    model_.emplace(std::move(model).value());
    auto address = ParseRedisUrl("redis://127.0.0.1:" + port + "/3");
    ASSERT_TRUE(address.ok()) << address.message();
    store_ = MakeRedisBackend(*address, 60, size_t{1} << 20, *model_, {});
  }

  void TearDown() override {
    store_.reset();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  bool Ping() const {
    redisContext* c = redisConnect("127.0.0.1", port_);
    bool ok = false;
    if (c && !c->err) {
      auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
      ok = r && r->type == REDIS_REPLY_STATUS;
      if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return ok;
  }

  // A raw command on database 3 (where the store under test writes); returns the reply's string.
  std::string Raw(const std::vector<std::string>& args) const {
    redisContext* c = redisConnect("127.0.0.1", port_);
    std::string out;
    if (c && !c->err) {
      freeReplyObject(redisCommand(c, "SELECT 3"));
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (const auto& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
      }
      auto* r = static_cast<redisReply*>(
          redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
      if (r && r->type == REDIS_REPLY_STRING) out.assign(r->str, r->len);
      if (r && r->type == REDIS_REPLY_INTEGER) out = std::to_string(r->integer);
      if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return out;
  }

  // A conversation at `turn` over n_tokens tokens, their K/V in its cache.
  std::unique_ptr<Conversation> Conv(uint64_t turn, int n_tokens) {
    ConversationRecord r;
    r.id = "s0123abcd";
    r.tenant = "tfeedbeef";
    r.press = "primekv";
    r.schedule = {.ratio = 0.5, .mode = ScheduleMode::kMultiTurn};
    r.budget = 10;
    r.turn = turn;
    std::vector<Token> tokens(static_cast<size_t>(n_tokens));
    std::iota(tokens.begin(), tokens.end(), 3);
    r.last_prompt_len = n_tokens;
    if (!compressor_)
      compressor_.emplace(*model_, std::move(MakePress(*ParsePressSpec("primekv"))).value());
    auto c = std::make_unique<Conversation>(*model_, *compressor_, pool_, std::move(r));
    EXPECT_TRUE(c->Prefill(tokens).ok());
    return c;
  }

  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  std::optional<Model> model_;
  std::optional<Compressor> compressor_;
  ThreadPool pool_{1};
  std::unique_ptr<SessionBackend> store_;
};

TEST_F(RedisStoreTest, RoundTripAndCompareAndSet) {
  const auto s2 = Conv(2, 40);
  const KvCache& c2 = s2->cache();
  auto saved = store_->Save(*s2);
  ASSERT_TRUE(saved.ok()) << saved.message();
  EXPECT_EQ(*saved, SessionBackend::Saved::kSaved);
  // The key holds the tenant id; the value is the session file image.
  const std::string key = RedisSessionKey("tfeedbeef", "s0123abcd");
  EXPECT_EQ(key, "primekv:session:tfeedbeef:s0123abcd");
  EXPECT_EQ(Raw({"HGET", key, "turn"}), "2");
  EXPECT_EQ(Raw({"HGET", key, "data"}).substr(0, 8), "PKVSESS1");

  auto loaded = store_->Load("tfeedbeef", "s0123abcd");
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  ASSERT_EQ(loaded->found, SessionBackend::Found::kFound) << loaded->why;
  EXPECT_EQ(loaded->snapshot.tokens, s2->tokens());
  EXPECT_EQ(loaded->snapshot.turn, 2u);
  std::vector<float> k1, v1, k2, v2;
  std::vector<int32_t> p1, p2;
  for (int l = 0; l < c2.n_layers(); ++l) {
    for (int h = 0; h < c2.n_kv_heads(); ++h) {
      c2.ReadHead(l, h, &k1, &v1, &p1);
      loaded->snapshot.cache->ReadHead(l, h, &k2, &v2, &p2);
      EXPECT_EQ(k1, k2);
      EXPECT_EQ(v1, v2);
      EXPECT_EQ(p1, p2);
    }
  }

  // An older turn, or the same turn again, never replaces the stored one.
  auto older = store_->Save(*Conv(1, 20));
  ASSERT_TRUE(older.ok());
  EXPECT_EQ(*older, SessionBackend::Saved::kStale);
  auto same = store_->Save(*Conv(2, 20));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, SessionBackend::Saved::kStale);
  EXPECT_EQ(store_->Load("tfeedbeef", "s0123abcd")->snapshot.tokens.size(), 40u);
  EXPECT_EQ(*store_->Save(*Conv(3, 30)), SessionBackend::Saved::kSaved);
  EXPECT_EQ(*store_->StoredTurn("tfeedbeef", "s0123abcd"), std::optional<uint64_t>(3));
  EXPECT_GT(std::stoi(Raw({"TTL", key})), 0);  // --store-ttl-s

  const StoreStats st = store_->stats();
  EXPECT_EQ(st.saves, 2u);
  EXPECT_EQ(st.stale_saves, 2u);
  EXPECT_EQ(st.loads, 2u);
}

// After the first save a turn appends a delta (a hash field `dN`) onto the turn it follows; a
// load applies them all, bit for bit. A replica whose copy is behind writes nothing (stale), and
// one whose delta follows another turn than the store holds writes the whole image instead.
TEST_F(RedisStoreTest, TurnsAppendDeltasOntoTheTurnTheyFollow) {
  const std::string key = RedisSessionKey("tfeedbeef", "s0123abcd");
  auto a = Conv(1, 40);
  ASSERT_EQ(*store_->Save(*a), SessionBackend::Saved::kSaved);
  const size_t base = Raw({"HGET", key, "data"}).size();
  for (int turn = 2; turn <= 4; ++turn) {
    std::vector<Token> more(6, static_cast<Token>(100 + turn));
    ASSERT_TRUE(a->Prefill(more).ok());
    ASSERT_TRUE(a->CompressNow(0.5).ok());  // removes entries: the delta names their rows
    ASSERT_TRUE(a->EndTurn().ok());
    ASSERT_EQ(a->record().turn, static_cast<uint64_t>(turn));
    ASSERT_EQ(*store_->Save(*a), SessionBackend::Saved::kSaved);
    EXPECT_EQ(Raw({"HGET", key, "nd"}), std::to_string(turn - 1));
    EXPECT_EQ(Raw({"HGET", key, "data"}).size(), base) << "the base is not rewritten";
    const std::string delta = Raw({"HGET", key, "d" + std::to_string(turn - 1)});
    EXPECT_EQ(delta.substr(0, 8), "PKVDELT1");
    EXPECT_LT(delta.size(), base);
    auto loaded = store_->Load("tfeedbeef", "s0123abcd");
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    ASSERT_EQ(loaded->found, SessionBackend::Found::kFound) << loaded->why;
    EXPECT_EQ(loaded->extent.deltas, turn - 1);
    EXPECT_EQ(loaded->snapshot.turn, static_cast<uint64_t>(turn));
    EXPECT_EQ(loaded->snapshot.tokens, a->tokens());
    for (int l = 0; l < a->cache().n_layers(); ++l) {
      for (int h = 0; h < a->cache().n_kv_heads(); ++h) {
        std::vector<uint8_t> k1, v1, k2, v2;
        std::vector<int32_t> p1, p2;
        a->cache().ReadHeadRaw(l, h, &k1, &v1, &p1);
        loaded->snapshot.cache->ReadHeadRaw(l, h, &k2, &v2, &p2);
        EXPECT_EQ(p1, p2);
        EXPECT_TRUE(k1 == k2 && v1 == v2);
      }
    }
  }
  // Another replica loaded turn 4 and saves turn 5 as a delta over it.
  auto b = Conv(4, 40);
  auto at4 = store_->Load("tfeedbeef", "s0123abcd");
  ASSERT_TRUE(at4.ok());
  auto held = DescribeStored(at4->snapshot, "redis", at4->extent);
  b->Restore(std::move(at4->snapshot), std::move(held));
  // Meanwhile `a`, still at turn 4 in its own view, saves a turn 5 first: b's is then stale.
  ASSERT_TRUE(a->EndTurn().ok());  // turn 5
  ASSERT_EQ(*store_->Save(*a), SessionBackend::Saved::kSaved);
  ASSERT_TRUE(b->EndTurn().ok());  // turn 5
  EXPECT_EQ(*store_->Save(*b), SessionBackend::Saved::kStale);
  // b's turn 6 follows turn 4, which the store no longer holds: the whole image replaces it.
  ASSERT_TRUE(b->EndTurn().ok());  // turn 6
  ASSERT_EQ(*store_->Save(*b), SessionBackend::Saved::kSaved);
  EXPECT_EQ(Raw({"HGET", key, "nd"}), "0");
  auto at6 = store_->Load("tfeedbeef", "s0123abcd");
  ASSERT_TRUE(at6.ok());
  ASSERT_EQ(at6->found, SessionBackend::Found::kFound) << at6->why;
  EXPECT_EQ(at6->snapshot.turn, 6u);
  EXPECT_EQ(at6->extent.deltas, 0);
}

TEST_F(RedisStoreTest, TenantsAndDamagedValuesAreRefused) {
  ASSERT_TRUE(store_->Save(*Conv(1, 30)).ok());
  // Another tenant asks for the same id: a different key, so nothing is found.
  auto other = store_->Load("tother", "s0123abcd");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->found, SessionBackend::Found::kMissing);
  // The value copied under another tenant's key is refused (the image names its tenant).
  const std::string key = RedisSessionKey("tfeedbeef", "s0123abcd");
  std::string data = Raw({"HGET", key, "data"});
  Raw({"HSET", RedisSessionKey("tother", "s0123abcd"), "turn", "1", "data", data});
  auto copied = store_->Load("tother", "s0123abcd");
  ASSERT_TRUE(copied.ok());
  EXPECT_EQ(copied->found, SessionBackend::Found::kDamaged);
  // One flipped byte: the checksum refuses it.
  data[data.size() / 2] = static_cast<char>(data[data.size() / 2] ^ 0x20);
  Raw({"HSET", key, "data", data});
  auto damaged = store_->Load("tfeedbeef", "s0123abcd");
  ASSERT_TRUE(damaged.ok());
  EXPECT_EQ(damaged->found, SessionBackend::Found::kDamaged);
  EXPECT_NE(damaged->why.find("checksum"), std::string::npos) << damaged->why;
  // A turn counter that does not match the value's.
  Raw({"HSET", key, "turn", "7", "data",
       Raw({"HGET", RedisSessionKey("tother", "s0123abcd"), "data"})});
  EXPECT_EQ(store_->Load("tfeedbeef", "s0123abcd")->found, SessionBackend::Found::kDamaged);
  EXPECT_EQ(store_->stats().rejected, 3u);
}

TEST_F(RedisStoreTest, UnreachableStoreIsAnErrorAndUrlsAreChecked) {
  auto a = ParseRedisUrl("redis://127.0.0.1:1/0");
  ASSERT_TRUE(a.ok());
  auto dead = MakeRedisBackend(*a, 0, 1024, *model_, {});
  EXPECT_FALSE(dead->Load("t", "s1").ok());
  EXPECT_EQ(*store_->Save(*Conv(1, 30)), SessionBackend::Saved::kSaved);
  auto small = MakeRedisBackend(*ParseRedisUrl("redis://127.0.0.1:" + std::to_string(port_)), 0,
                                1024, *model_, {});
  EXPECT_EQ(*small->Save(*Conv(2, 30)), SessionBackend::Saved::kTooLarge);
  for (const char* bad : {"", "redis://", "http://h:1", "redis://h:0", "redis://h:70000",
                          "redis://h:1/x", "redis://u@h:1", "redis://h:1/1001"})
    EXPECT_FALSE(ParseRedisUrl(bad).ok()) << bad;
  auto full = ParseRedisUrl("redis://10.0.0.2:6380/2");
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->host, "10.0.0.2");
  EXPECT_EQ(full->port, 6380);
  EXPECT_EQ(full->db, 2);
  EXPECT_EQ(ParseRedisUrl("redis://h")->port, 6379);
}

}  // namespace
}  // namespace primekv::server
