// The session store of `primekv serve` (server/session_store.h): prefix matching within a
// tenant and salt, named sessions, tenants' caps, which idle session eviction takes, and the
// charge of a page pool that sessions share.
#include "server/session_store.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/random_models.h"
#include "server/server_metrics.h"
#include "server/session_backend.h"

namespace primekv::server {
namespace {

class SessionStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new Model(WriteLoadAndRemove(TinyLlamaSpec(), "session_store_test.gguf"));
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  // Budgets and sizes count in units of one pool chunk (what a cache's first entry allocates).
  void Make(size_t budget = 20, size_t tenant_cap = 0, bool prefix_reuse = true) {
    KvCache probe = model_->NewCache(KvCacheOptions{});
    Fill(probe, 1);
    unit_ = probe.BytesAllocated();
    ServerOptions o;
    o.kv_budget_bytes = budget * unit_;
    o.tenant_kv_bytes = tenant_cap * unit_;
    o.prefix_reuse = prefix_reuse;
    store_ = std::make_unique<SessionStore>(*model_, KvCacheOptions{}, o, nullptr, metrics_, pool_,
                                            model_mutex_);
  }

  // Appends rows to one head until the pool holds `units` chunks.
  void Fill(KvCache& c, size_t units) {
    const int n = c.page_tokens();
    std::vector<float> rows(static_cast<size_t>(n * c.head_dim()), 0.5f);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    while (c.BytesAllocated() < units * unit_ || c.Length(0, 0) == 0) {
      for (int i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = c.NextPosition() + i;
      ASSERT_TRUE(c.AppendHead(0, 0, rows, rows, pos).ok());
    }
  }

  // An idle session of `tenant`; `units` > 0 gives it a cache in memory of that many chunks,
  // charged.
  Session& Add(const std::string& id, const std::string& tenant, std::vector<Token> tokens,
               size_t units = 0, uint64_t last_used = 0, const std::string& salt = "") {
    const int n = static_cast<int>(tokens.size());
    Session& s = store_->Add({.id = id,
                              .tenant = tenant,
                              .cache_salt = salt,
                              .press = "knorm",
                              .schedule = {.ratio = 0.5},
                              .last_prompt_len = n,
                              .tokens = std::move(tokens)},
                             units > 0);
    s.last_used = last_used;
    if (units > 0) {
      Fill(s.conv->cache(), units);
      store_->Account(s);
    }
    return s;
  }

  static TurnRequest Request(const std::string& tenant, std::vector<Token> prompt) {
    TurnRequest r;
    r.tenant = tenant;
    r.prompt = std::move(prompt);
    r.press = "knorm";
    r.ratio = 0.5;
    return r;
  }

  static Model* model_;
  Metrics metrics_;
  ThreadPool pool_{1};
  std::mutex model_mutex_;
  std::unique_ptr<SessionStore> store_;
  size_t unit_ = 0;
};

Model* SessionStoreTest::model_ = nullptr;

TEST_F(SessionStoreTest, PrefixMatchPicksTheLongestSessionOfTheTenantAndSalt) {
  Make();
  Add("short", "t1", {1, 2, 3});
  Session& longest = Add("long", "t1", {1, 2, 3, 4, 5});
  Add("other-tenant", "t2", {1, 2, 3, 4, 5, 6, 7});
  Add("other-salt", "t1", {1, 2, 3, 4, 5, 6, 7}, 0, 0, "x");
  // Departs inside its last prompt: the request does not contain it.
  Add("departs", "t1", {1, 2, 3, 4, 5, 6, 9});
  auto found = store_->Find(Request("t1", {1, 2, 3, 4, 5, 6, 7}));
  ASSERT_TRUE(std::holds_alternative<SessionStore::Found>(found));
  const auto& f = std::get<SessionStore::Found>(found);
  EXPECT_EQ(f.source, &longest);
  EXPECT_EQ(f.keep, 5u);
  ASSERT_NE(f.session, nullptr);
  EXPECT_NE(f.session, &longest);  // a new session, copied from the source
  EXPECT_EQ(f.session->record().tenant, "t1");
  EXPECT_TRUE(f.session->busy && longest.busy);
  EXPECT_EQ(store_->size(), 6u);

  // Another tenant never starts from t1's sessions, though they match further.
  auto t3 = store_->Find(Request("t3", {1, 2, 3, 4, 5, 6, 7}));
  ASSERT_TRUE(std::holds_alternative<SessionStore::Found>(t3));
  EXPECT_EQ(std::get<SessionStore::Found>(t3).source, nullptr);
  // The salt separates a tenant's own sessions too.
  TurnRequest salted = Request("t1", {1, 2, 3, 4, 5, 6, 7, 8});
  salted.cache_salt = "x";
  auto s = store_->Find(salted);
  ASSERT_TRUE(std::holds_alternative<SessionStore::Found>(s));
  EXPECT_EQ(std::get<SessionStore::Found>(s).source->record().id, "other-salt");
  EXPECT_EQ(std::get<SessionStore::Found>(s).keep, 7u);
}

TEST_F(SessionStoreTest, NoPrefixReuseWhenItIsOff) {
  Make(20, 0, /*prefix_reuse=*/false);
  Add("a", "t1", {1, 2, 3});
  auto found = store_->Find(Request("t1", {1, 2, 3, 4}));
  ASSERT_TRUE(std::holds_alternative<SessionStore::Found>(found));
  EXPECT_EQ(std::get<SessionStore::Found>(found).source, nullptr);
}

TEST_F(SessionStoreTest, AnotherTenantsNamedSessionIsUnknownAndABusyOneIsRefused) {
  Make();
  Add("mine", "t1", {1, 2, 3});
  TurnRequest req = Request("t2", {1, 2, 3, 4});
  req.session_id = "mine";
  EXPECT_EQ(store_->ClaimNamed("t2", "mine"), SessionStore::Claim::kUnknown);
  auto theirs = store_->Find(req);
  ASSERT_TRUE(std::holds_alternative<HttpError>(theirs));
  EXPECT_EQ(std::get<HttpError>(theirs).status, 404);
  EXPECT_EQ(store_->ClaimNamed("t1", "mine"), SessionStore::Claim::kClaimed);
  EXPECT_EQ(store_->ClaimNamed("t1", "mine"), SessionStore::Claim::kBusy);
  req.tenant = "t1";
  auto busy = store_->Find(req);
  ASSERT_TRUE(std::holds_alternative<HttpError>(busy));
  EXPECT_EQ(std::get<HttpError>(busy).status, 409);
  store_->Unclaim("mine");
  auto ok = store_->Find(req);
  ASSERT_TRUE(std::holds_alternative<SessionStore::Found>(ok));
  EXPECT_EQ(std::get<SessionStore::Found>(ok).keep, 3u);
}

TEST_F(SessionStoreTest, EvictionTakesTenantsOverTheirShareFirstLeastRecentlyUsed) {
  Make(/*budget=*/20);
  // t1 holds 16 of 20 units; its share with t2 and t3 holding memory is a third.
  Add("t1-new", "t1", {1}, 4, /*last_used=*/9);
  Session& old = Add("t1-old", "t1", {2}, 6, /*last_used=*/2);
  old.persisted = true;
  Add("t1-mid", "t1", {3}, 6, /*last_used=*/5);
  Add("t2", "t2", {4}, 1, /*last_used=*/1);
  Add("t3", "t3", {5}, 1, /*last_used=*/0).persisted = true;
  const auto units = [&](size_t n) { return std::optional<size_t>(n * unit_); };
  // For t2, the oldest session of t1 goes, though t3's and t2's own are older: its file is
  // current, so only its cache is dropped.
  EXPECT_EQ(store_->EvictOne(nullptr, "t2", false), units(6));
  EXPECT_FALSE(old.conv->has_cache());
  EXPECT_EQ(store_->size(), 5u);
  // Then the next oldest of t1 (without a file it is forgotten).
  EXPECT_EQ(store_->EvictOne(nullptr, "t2", false), units(6));
  EXPECT_EQ(store_->size(), 4u);
  EXPECT_EQ(store_->TenantBytes().at("t1"), 4 * unit_);
  // t1 is within its share now (a quarter with t4's): a request of t4 evicts nobody...
  EXPECT_EQ(store_->EvictOne(nullptr, "t4", false), std::nullopt);
  // ...and one of t3 only its own (also when asked for its own only).
  EXPECT_EQ(store_->EvictOne(nullptr, "t3", true), units(1));
  EXPECT_EQ(store_->TenantBytes().at("t3"), 0u);
  EXPECT_EQ(metrics_.count(Metrics::Event::kEviction), 3u);
  // A busy session, or the requester's own, is never taken.
  Session& t1 = Add("t1-busy", "t1", {6}, 18, 0);
  t1.busy = true;
  EXPECT_EQ(store_->EvictOne(nullptr, "t2", false), units(4));  // t1-new
  EXPECT_EQ(store_->EvictOne(nullptr, "t2", false), units(1));  // t2's own
  EXPECT_EQ(store_->EvictOne(nullptr, "t2", false), std::nullopt);
}

TEST_F(SessionStoreTest, TenantCapCountsSessionsAndReservations) {
  Make(/*budget=*/200, /*tenant_cap=*/10);
  Session& s = Add("a", "t1", {1}, 6);
  store_->SetReserved(s, 2 * unit_);
  EXPECT_TRUE(store_->TenantFits("t1", 2 * unit_));
  EXPECT_FALSE(store_->TenantFits("t1", 2 * unit_ + 1));
  EXPECT_TRUE(store_->TenantFits("t2", 10 * unit_));
  EXPECT_FALSE(store_->TenantFits("t2", 10 * unit_ + 1));
}

TEST_F(SessionStoreTest, FinishAccountsTheTurnAndForgetsAFailedNewSession) {
  Make();
  Session& s = Add("a", "t1", {1, 2}, 3);
  s.busy = true;
  store_->SetReserved(s, 200);
  Fill(s.conv->cache(), 4);  // the turn grew the cache by a chunk
  const Accounted a = store_->Finish(s, /*ok=*/true, /*modified=*/true);
  EXPECT_EQ(a.before, 3 * unit_ + 200);
  EXPECT_EQ(a.after, 4 * unit_);
  EXPECT_FALSE(s.busy);
  EXPECT_EQ(s.reserved, 0u);
  Session& failed = Add("b", "t1", {}, 1);
  failed.busy = true;
  const Accounted f = store_->Finish(failed, /*ok=*/false, /*modified=*/true);
  EXPECT_EQ(f.before, unit_);
  EXPECT_EQ(f.after, 0u);
  EXPECT_EQ(store_->size(), 1u);
}

// A prefix match shares its source's pages: the pool is charged once, whatever session changed
// it, and its memory is freed with the last session that holds it.
TEST_F(SessionStoreTest, APoolThatSessionsShareIsChargedOnce) {
  Make();
  Session& doc = Add("doc", "t1", {1, 2, 3}, 3);
  auto found = store_->Find(Request("t1", {1, 2, 3, 4}));
  ASSERT_TRUE(std::holds_alternative<SessionStore::Found>(found));
  auto f = std::get<SessionStore::Found>(found);
  ASSERT_EQ(f.source, &doc);
  const Accounted copied = store_->CopyPrefix(*f.session, doc, {1, 2, 3, 4}, f.keep);
  EXPECT_EQ(copied.after - copied.before, 0u) << "a share allocates nothing";
  EXPECT_EQ(f.session->conv->cache().Length(0, 0), doc.conv->cache().Length(0, 0));
  const Accounted joined = store_->Account(*f.session);
  EXPECT_EQ(joined.before, 3 * unit_);
  EXPECT_EQ(joined.after, 3 * unit_);
  EXPECT_EQ(store_->census().bytes_held, 3 * unit_);
  EXPECT_EQ(store_->census().kv_pools, 1u);
  EXPECT_EQ(store_->TenantBytes().at("t1"), 3 * unit_);
  // The copy grows the pool: the pool's charge follows, once.
  Fill(f.session->conv->cache(), 5);
  const Accounted grown = store_->Finish(*f.session, /*ok=*/true, /*modified=*/true);
  EXPECT_EQ(grown.after - grown.before, 2 * unit_);
  EXPECT_EQ(store_->census().bytes_held, 5 * unit_);
  // Dropping one of the two frees nothing (the other holds the pool); the last frees it all.
  EXPECT_EQ(store_->GiveWay(doc, /*forget=*/true), 0u);
  EXPECT_EQ(store_->census().bytes_held, 5 * unit_);
  EXPECT_EQ(store_->GiveWay(*f.session, /*forget=*/true), 5 * unit_);
  EXPECT_EQ(store_->census().bytes_held, 0u);
  EXPECT_EQ(store_->census().kv_pools, 0u);
}

}  // namespace
}  // namespace primekv::server
