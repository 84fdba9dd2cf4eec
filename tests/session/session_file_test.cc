// Session files (session/session_file.h): a compressed (ragged) cache round-trips bit-exactly; a
// flipped byte, a truncation, a wrong model shape or a renamed file is refused.
#include "primekv/session/session_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "common/random_models.h"
#include "primekv/model/random_model.h"
#include "primekv/press/compressor.h"
#include "primekv/session/conversation.h"

namespace primekv {
namespace {

class SessionFileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One folder per process: ctest runs each test of this suite as its own process, at once.
    dir_ = std::filesystem::temp_directory_path() /
           ("primekv_session_file_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    RandomModelSpec ms = SessionFileSpec();
    ASSERT_TRUE(WriteRandomModel(ms, dir_ / "m.gguf").ok());
    ms.n_layers = 3;
    ASSERT_TRUE(WriteRandomModel(ms, dir_ / "other.gguf").ok());
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
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

// A cache is stored as it is held: f16 rows for an f16 cache and q8_0 blocks for a q8_0 one,
// read back bit for bit, or converted when the reader's cache is of another type. Per entry and
// head (head_dim 32) a file holds 4 + 2 x 128 bytes in f32, 4 + 2 x 64 in f16 and 4 + 2 x 34 in
// q8_0: 51% and 28% of f32, which is what every cache cost before (version 1 stored f32 rows).
TEST_F(SessionFileTest, EachCacheTypeIsStoredAsItIsHeld) {
  auto model = Model::Load(dir_ / "m.gguf");
  ASSERT_TRUE(model.ok()) << model.message();
  ThreadPool pool(1);
  Compressor compressor(*model, std::move(MakePress(*ParsePressSpec("adakv:primekv"))).value());
  std::vector<Token> tokens(300);
  std::iota(tokens.begin(), tokens.end(), 3);
  std::map<KvDType, size_t> bytes;
  for (KvDType t : {KvDType::kF32, KvDType::kF16, KvDType::kQ8_0}) {
    SCOPED_TRACE(KvDTypeName(t));
    Conversation conv(*model, compressor, pool, {.id = std::string("t_") + KvDTypeName(t)},
                      {.dtype = t});
    ASSERT_TRUE(conv.Prefill(tokens).ok());
    ASSERT_TRUE(conv.CompressNow(0.5).ok());  // ragged heads
    ASSERT_TRUE(conv.Save(dir_.string()).ok());
    const auto path = dir_ / (conv.record().id + ".pkvs");
    bytes[t] = std::filesystem::file_size(path);
    auto same = ReadSessionFile(path.string(), *model, {.dtype = t}, false);
    ASSERT_TRUE(same.ok()) << same.message();
    ASSERT_EQ(same->cache->dtype(), t);
    for (int l = 0; l < 2; ++l) {
      for (int h = 0; h < 2; ++h) {
        std::vector<uint8_t> k1, v1, k2, v2;
        std::vector<int32_t> p1, p2;
        conv.cache().ReadHeadRaw(l, h, &k1, &v1, &p1);
        same->cache->ReadHeadRaw(l, h, &k2, &v2, &p2);
        EXPECT_EQ(p1, p2);
        EXPECT_EQ(k1, k2);
        EXPECT_EQ(v1, v2);
      }
    }
    // Read into an f32 cache: the stored rows, converted exactly (f16 and q8_0 are exact in f32).
    auto wide = ReadSessionFile(path.string(), *model, {.dtype = KvDType::kF32}, false);
    ASSERT_TRUE(wide.ok()) << wide.message();
    std::vector<float> k1, v1, k2, v2;
    std::vector<int32_t> p1, p2;
    conv.cache().ReadHead(1, 1, &k1, &v1, &p1);
    wide->cache->ReadHead(1, 1, &k2, &v2, &p2);
    EXPECT_EQ(k1, k2);
    EXPECT_EQ(v1, v2);
    EXPECT_EQ(p1, p2);
  }
  const double f16 = double(bytes[KvDType::kF16]) / double(bytes[KvDType::kF32]);
  const double q8 = double(bytes[KvDType::kQ8_0]) / double(bytes[KvDType::kF32]);
  // The rows dominate: each ratio is its entries' (key and value rows and a 4-byte position)
  // against f32's, plus at most a point for the header.
  const int d = model->config().head_dim;
  const auto entry = [d](KvDType t) { return 2.0 * double(KvRowBytes(t, d)) + 4.0; };
  const double want_f16 = entry(KvDType::kF16) / entry(KvDType::kF32);
  const double want_q8 = entry(KvDType::kQ8_0) / entry(KvDType::kF32);
  EXPECT_GE(f16, want_f16 - 1e-3);
  EXPECT_LT(f16, want_f16 + 0.01) << bytes[KvDType::kF16] << " of " << bytes[KvDType::kF32];
  EXPECT_GE(q8, want_q8 - 1e-3);
  EXPECT_LT(q8, want_q8 + 0.01) << bytes[KvDType::kQ8_0] << " of " << bytes[KvDType::kF32];
}

// A file of format version 1 (f32 rows, written before the cache's own type was kept) still
// loads, into whatever cache type the reader holds.
TEST_F(SessionFileTest, VersionOneFilesStillLoad) {
  auto model = Model::Load(dir_ / "m.gguf");
  ASSERT_TRUE(model.ok()) << model.message();
  const std::string path = std::string(PRIMEKV_SOURCE_DIR) + "/tests/session/data/v1-session.pkvs";
  for (KvDType t : {KvDType::kF16, KvDType::kQ8_0}) {
    auto r = ReadSessionFile(path, *model, {.dtype = t}, false);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->tokens.size(), 40u);
    EXPECT_EQ(r->tokens.front(), 3);
    EXPECT_EQ(r->press, "knorm");
    EXPECT_EQ(r->turn, 1u);
    EXPECT_EQ(r->cache->dtype(), t);
    EXPECT_EQ(r->cache->NextPosition(), 40);
    EXPECT_EQ(r->cache->MaxLength(), 20);  // multiturn at ratio 0.5 after its first turn
  }
  // An unknown version is named in the refusal.
  std::vector<char> bytes = ReadAll(path);
  bytes[8] = 9;
  WriteAll(dir_ / "v1-session.pkvs", bytes);
  auto refused = ReadSessionFile((dir_ / "v1-session.pkvs").string(), *model, {}, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("unsupported version 9"), std::string::npos)
      << refused.message();
}

// `file` (one base record) with `from` replaced by `to` in its JSON header, in a valid envelope:
// payload size, header length and checksum rewritten, so the reader gets to the header's fields.
std::vector<char> EditHeader(const std::vector<char>& file, const std::string& from,
                             const std::string& to) {
  constexpr size_t kPayloadAt = 20;  // magic (8), version (4), payload size (8)
  uint32_t hlen = 0;
  std::memcpy(&hlen, file.data() + kPayloadAt, 4);
  std::string header(file.data() + kPayloadAt + 4, hlen);
  const size_t at = header.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at == std::string::npos) return file;
  header.replace(at, from.size(), to);
  std::string payload(4, '\0');
  hlen = static_cast<uint32_t>(header.size());
  std::memcpy(payload.data(), &hlen, 4);
  payload += header;
  payload.append(file.begin() + static_cast<std::ptrdiff_t>(kPayloadAt + 4 + from.size() +
                                                            header.size() - to.size()),
                 file.end() - 8);
  uint64_t sum = 1469598103934665603ull;  // the format's checksum (session_file.cc's basis)
  for (unsigned char c : payload) sum = (sum ^ c) * 1099511628211ull;
  std::vector<char> out(file.begin(), file.begin() + kPayloadAt);
  const uint64_t size = payload.size();
  std::memcpy(out.data() + 12, &size, 8);
  out.insert(out.end(), payload.begin(), payload.end());
  out.insert(out.end(), reinterpret_cast<const char*>(&sum),
             reinterpret_cast<const char*>(&sum) + 8);
  return out;
}

// Header counts are checked as JSON integers: a float or a negative count is refused with the
// field's name, never converted (1e80 does not fit an int).
TEST_F(SessionFileTest, HeaderCountsMustBeIntegersInRange) {
  auto model = Model::Load(dir_ / "m.gguf");
  ASSERT_TRUE(model.ok()) << model.message();
  const std::vector<char> v1 =
      ReadAll(std::string(PRIMEKV_SOURCE_DIR) + "/tests/session/data/v1-session.pkvs");
  const auto path = dir_ / "v1-session.pkvs";  // the file name is the id
  // The unedited envelope reads: the rewrite itself is sound.
  WriteAll(path, EditHeader(v1, "\"budget\":20", "\"budget\":20"));
  auto same = ReadSessionFile(path.string(), *model, {}, false);
  ASSERT_TRUE(same.ok()) << same.message();
  EXPECT_EQ(same->budget, 20);
  const std::pair<std::string, std::string> bad[] = {
      {"\"budget\":2e80", "header.budget: expected an integer, got a number"},
      {"\"budget\":-3", "header.budget: -3 is outside"},
      {"\"budget\":20.5", "header.budget: expected an integer"},
  };
  for (const auto& [field, why] : bad) {
    WriteAll(path, EditHeader(v1, "\"budget\":20", field));
    auto r = ReadSessionFile(path.string(), *model, {}, false);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_NE(r.message().find(why), std::string::npos) << field << ": " << r.message();
  }
  WriteAll(path, EditHeader(v1, "\"head_dim\":32", "\"head_dim\":3.2e90"));
  auto dim = ReadSessionFile(path.string(), *model, {}, false);
  ASSERT_FALSE(dim.ok());
  EXPECT_NE(dim.message().find("header.head_dim: expected an integer"), std::string::npos)
      << dim.message();
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
