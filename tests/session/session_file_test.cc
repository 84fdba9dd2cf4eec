// Session files (session/session_file.h): a compressed (ragged) cache round-trips bit-exactly; a
// flipped byte, a truncation, a wrong model shape or a renamed file is refused.
#include "primekv/session/session_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "common/random_models.h"
#include "primekv/model/random_model.h"
#include "primekv/press/compressor.h"

namespace primekv {
namespace {

class SessionFileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / "primekv_session_file_test";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    RandomModelSpec ms = SessionFileSpec();
    ASSERT_TRUE(WriteRandomModel(ms, dir_ / "m.gguf").ok());
    ms.n_layers = 3;
    ASSERT_TRUE(WriteRandomModel(ms, dir_ / "other.gguf").ok());
  }
  static std::filesystem::path dir_;
};
std::filesystem::path SessionFileTest::dir_;

std::vector<char> ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void WriteAll(const std::filesystem::path& p, const std::vector<char>& d) {
  std::ofstream(p, std::ios::binary).write(d.data(), static_cast<std::streamsize>(d.size()));
}

TEST_F(SessionFileTest, CompressedCacheRoundTripsAndDamageIsRefused) {
  auto model = Model::Load(dir_ / "m.gguf");
  ASSERT_TRUE(model.ok()) << model.message();
  ThreadPool pool(1);
  KvCache cache = model->NewCache();
  std::vector<Token> tokens(150);
  std::iota(tokens.begin(), tokens.end(), 3);
  std::vector<float> logits(512);
  ForwardWorkspace ws;
  ASSERT_TRUE(model->Forward(tokens, cache, {}, {logits.data(), 1, 512}, pool, ws).ok());
  // A head-adaptive press leaves heads of different lengths: the file must keep each one.
  auto press = MakePress(*ParsePressSpec("adakv:primekv"));
  ASSERT_TRUE(press.ok()) << press.message();
  Compressor compressor(*model, std::move(press).value());
  ASSERT_TRUE(compressor.Compress(cache, 0.6, nullptr, pool).ok());

  ConversationRecord snap;
  snap.id = "abc_123";
  snap.press = "adakv:primekv";
  snap.schedule = {.ratio = 0.6, .mode = ScheduleMode::kMultiTurn};
  snap.budget = 60;
  snap.last_prompt_len = 150;
  snap.tokens = tokens;
  snap.cache = cache.Clone();
  ASSERT_TRUE(WriteSessionFile(dir_.string(), snap).ok());
  const auto path = dir_ / "abc_123.pkvs";
  EXPECT_FALSE(std::filesystem::exists(dir_ / "abc_123.pkvs.tmp"));

  auto back = ReadSessionFile(path.string(), *model, {}, false);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->tokens, tokens);
  EXPECT_EQ(back->budget, 60);
  EXPECT_EQ(back->press, "adakv:primekv");
  EXPECT_EQ(back->schedule.ratio, 0.6);
  EXPECT_EQ(back->schedule.mode, ScheduleMode::kMultiTurn);
  const KvCache& c = *back->cache;
  EXPECT_EQ(c.NextPosition(), cache.NextPosition());
  bool ragged = false;
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 2; ++h) {
      std::vector<float> k1, v1, k2, v2;
      std::vector<int32_t> p1, p2;
      cache.ReadHead(l, h, &k1, &v1, &p1);
      c.ReadHead(l, h, &k2, &v2, &p2);
      EXPECT_EQ(p1, p2);
      EXPECT_EQ(k1, k2);  // exact: f16 -> f32 -> f16 is lossless
      EXPECT_EQ(v1, v2);
      ragged = ragged || cache.Length(l, h) != cache.Length(0, 0);
    }
  }
  EXPECT_TRUE(ragged) << "the test should cover heads of different lengths";
  EXPECT_LT(c.TotalEntries(), 2 * 2 * 150);

  const std::vector<char> good = ReadAll(path);
  auto expect_refused = [&](std::vector<char> bytes, const std::string& why) {
    WriteAll(path, bytes);
    auto r = ReadSessionFile(path.string(), *model, {}, false);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.message().find(why), std::string::npos) << r.message();
    auto h = ReadSessionFile(path.string(), *model, {}, true);
    EXPECT_FALSE(h.ok()) << "header-only reads verify the checksum too";
  };
  for (size_t at : {size_t{30}, good.size() / 2, good.size() - 12}) {
    std::vector<char> flipped = good;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x40);
    expect_refused(flipped, "checksum");
  }
  expect_refused(std::vector<char>(good.begin(), good.end() - 1), "truncated");
  expect_refused(std::vector<char>(good.begin(), good.begin() + 10), "");
  std::vector<char> magic = good;
  magic[0] = 'X';
  expect_refused(magic, "magic");

  WriteAll(path, good);
  auto other = Model::Load(dir_ / "other.gguf");
  ASSERT_TRUE(other.ok());
  auto wrong = ReadSessionFile(path.string(), *other, {}, false);
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("another shape"), std::string::npos) << wrong.message();
  std::filesystem::copy_file(path, dir_ / "renamed.pkvs",
                             std::filesystem::copy_options::overwrite_existing);
  auto renamed = ReadSessionFile((dir_ / "renamed.pkvs").string(), *model, {}, false);
  EXPECT_FALSE(renamed.ok());
}

TEST(SessionIds, OnlyPlainTokens) {
  EXPECT_TRUE(ValidSessionId("s0123abcdef"));
  EXPECT_TRUE(ValidSessionId("A-b_9"));
  for (const char* bad : {"", "../x", "a/b", "a.b", "a b", "x\n", "%2e%2e"})
    EXPECT_FALSE(ValidSessionId(bad)) << bad;
  EXPECT_FALSE(ValidSessionId(std::string(65, 'a')));
}

TEST(KvCacheReserve, AllocatedAfterReserveIsExact) {
  KvCache cache(2, 2, 16, {KvDType::kF16, 8, 0});
  for (int extra : {1, 7, 8, 9, 500, 1200}) {
    const size_t predicted = cache.BytesAllocatedAfterReserve(extra);
    cache.Reserve(extra);
    EXPECT_EQ(cache.BytesAllocated(), predicted) << extra;
  }
}

}  // namespace
}  // namespace primekv
