// Option parsing, input files and convert's manifest reader: bad input gives a Status that names
// the problem; what convert accepts, the GGUF reader opens.
#include "cli/options.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "cli/manifest.h"
#include "primekv/gguf/gguf.h"

namespace primekv::cli {
namespace {

TEST(Options, IntegersAreStrict) {
  EXPECT_EQ(*ParseInteger("42", 0, 100), 42);
  EXPECT_EQ(*ParseInteger("-5", -10, 0), -5);
  for (const char* bad : {"", "2.9", "1e3", " 1", "1 ", "0x10", "+-1", "nan", "3abc"}) {
    auto r = ParseInteger(bad, -100, 100);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.message().find("is not an integer"), std::string::npos) << r.message();
  }
  EXPECT_NE(ParseInteger("101", 0, 100).message().find("outside [0, 100]"), std::string::npos);
  EXPECT_FALSE(ParseInteger("99999999999999999999", 0, 100).ok());
}

// Issue 55 item 12: --memory-limit sizes, and the estimate it is compared with.
TEST(Options, ByteSizesTakeBinarySuffixes) {
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("1K"), 1024u);
  EXPECT_EQ(*ParseByteSize("512m"), uint64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("2GiB"), uint64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("3GB"), uint64_t{3} << 30);
  EXPECT_EQ(*ParseByteSize("1T"), uint64_t{1} << 40);
  for (const char* bad : {"", "G", "-1G", "1.5G", "12Q", "1Gb", "1 G", "1GiBx"}) {
    auto r = ParseByteSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.message().find("is not a size"), std::string::npos) << r.message();
  }
  EXPECT_NE(ParseByteSize("16777216T").message().find("larger than 2^64"), std::string::npos);
}

TEST(Options, KvEstimateCountsWholePagesOfEveryHead) {
  ModelConfig c;
  c.n_layers = 5;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  // f16: a key row and a value row of 16 bytes and a 4-byte position, pages of 32 entries.
  EXPECT_EQ(KvCacheBytes(c, KvDType::kF16, 1), 32u * 36 * 20);
  EXPECT_EQ(KvCacheBytes(c, KvDType::kF16, 33), 64u * 36 * 20);
  EXPECT_EQ(KvCacheBytes(c, KvDType::kF16, 0), 0u);
  EXPECT_TRUE(CheckMemoryFits(100, 1000, 24, 1024).ok());
  const Status s = CheckMemoryFits(100, 1000, 25, 1024);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("more than --memory-limit"), std::string::npos) << s.message();
}

// Issue 55 item 14: the duplicate check eval and fidelity share.
TEST(Options, RepeatedPressesAndRatiosAreNamed) {
  const std::vector<std::string> presses{"knorm", "snapkv:window=8,kernel=3", "primekv"};
  const std::vector<double> ratios{0.25, 0.5};
  EXPECT_EQ(DuplicateInLists(presses, ratios), "");
  const std::vector<std::string> twice{"knorm", "snapkv:window=8,kernel=3",
                                       "snapkv:kernel=3,window=8"};
  EXPECT_EQ(DuplicateInLists(twice, ratios),
            "--presses: press snapkv:kernel=3,window=8 is listed twice (also as "
            "snapkv:window=8,kernel=3)");
  const std::vector<double> again{0.25, 0.5, 0.25};
  EXPECT_EQ(DuplicateInLists(presses, again), "--ratios: 0.25 is listed twice");
}

TEST(Options, SeedsCoverUint64AndNothingElse) {
  EXPECT_EQ(*ParseUnsigned("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*ParseUnsigned("0"), 0u);
  EXPECT_NE(ParseUnsigned("-1").message().find("negative"), std::string::npos);
  EXPECT_NE(ParseUnsigned("18446744073709551616").message().find("larger"), std::string::npos);
  EXPECT_FALSE(ParseUnsigned("1.5").ok());
}

TEST(Options, RealsAreFinite) {
  EXPECT_DOUBLE_EQ(*ParseReal("0.25"), 0.25);
  EXPECT_DOUBLE_EQ(*ParseReal("1e-2"), 0.01);
  for (const char* bad : {"", "nan", "inf", "-inf", "1e999", "0.5x", "."}) {
    EXPECT_FALSE(ParseReal(bad).ok()) << bad;
  }
}

TEST(Options, ValidatorsName) {
  std::string v = "1.5";
  EXPECT_NE(RealIn(0, 1, false, true)(v).find("outside [0, 1)"), std::string::npos);
  v = "0";
  EXPECT_NE(RealIn(0, 1, true)(v).find("outside (0, 1]"), std::string::npos);
  // A value stored as float keeps its bounds after rounding: 1e-50 is 0 as a float.
  v = "1e-50";
  EXPECT_EQ(RealIn(0, 1, true)(v), "");
  EXPECT_NE(FloatIn(0, 1, true)(v).find("is 0 as a float, outside (0, 1]"), std::string::npos);
  v = "1e-6";
  EXPECT_EQ(FloatIn(0, 1, true)(v), "");
  v = std::to_string(MaxThreads() + 1);
  EXPECT_NE(Threads()(v).find("is more than"), std::string::npos);
  v = std::to_string(MaxThreads());
  EXPECT_EQ(Threads()(v), "");
  v = "adakv";
  EXPECT_NE(PressList(true)(v).find("inner press"), std::string::npos);
  v = "none;primekv:key=cosine,value=norm";
  EXPECT_EQ(PressList(false)(v), "");
  EXPECT_NE(PressList(true)(v).find("give one"), std::string::npos);
}

TEST(Options, PrintableEscapesEverythingButAscii) {
  EXPECT_EQ(Printable("a\x1b[1m\xc3\xa9\n"), "a\\x1b[1m\\xc3\\xa9\\x0a");
  EXPECT_EQ(Printable(std::string(100, 'x'), 4), "xxxx...");
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/primekv_options_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

using ReadFile = TempDir;

TEST_F(ReadFile, RefusesDirectoriesAndFifosWithoutBlocking) {
  EXPECT_NE(ReadInputFile(dir_.string(), "--text-file").message().find("is a directory"),
            std::string::npos);
  const auto fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto r = ReadInputFile(fifo.string(), "manifest");  // would block forever without O_NONBLOCK
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("manifest '"), std::string::npos);
  EXPECT_NE(r.message().find("not a regular file"), std::string::npos);
  std::ofstream(dir_ / "t.txt") << "hello";
  EXPECT_EQ(*ReadInputFile((dir_ / "t.txt").string(), "x"), "hello");
  EXPECT_FALSE(ReadInputFile((dir_ / "missing").string(), "x").ok());
}

std::string ManifestError(const std::string& json) {
  auto m = ParseManifest(json, "m.json");
  return m.ok() ? "OK" : m.message();
}

TEST(Manifest, RefusesWhatTheWriterOrReaderCannotTake) {
  struct Case {
    std::string json, want;
  };
  const std::string tensor_ok = R"({"name":"a","ne":[4],"offset":0})";
  auto meta = [](const std::string& entry) {
    return R"({"metadata":[)" + entry + R"(],"tensors":[]})";
  };
  auto tensor = [](const std::string& t) { return R"({"metadata":[],"tensors":[)" + t + "]}"; };
  const Case cases[] = {
      {"[]", "must be a JSON object, not array"},
      {"null", "not null"},
      {"5", "not number"},
      {"{", "not valid JSON"},
      {R"({"data":5})", "\"data\" must be a file name"},
      {R"({"metadata":[]})", "missing \"tensors\""},
      {R"({"metadata":5,"tensors":[]})", "\"metadata\" must be an array"},
      {meta("5"), "metadata[0] must be an object"},
      {meta(R"({"key":"x","type":"uint8","value":300})"), "key 'x': 300 is outside [0, 255]"},
      {meta(R"({"key":"x","type":"uint32","value":-1})"), "-1 is outside [0, 4294967295]"},
      {meta(R"({"key":"x","type":"int8","value":-1000})"), "-1000 is outside [-128, 127]"},
      {meta(R"({"key":"x","type":"uint64","value":18446744073709551616})"), "want an integer"},
      {meta(R"({"key":"x","type":"int32","value":2.5})"), "want an integer"},
      {meta(R"({"key":"x","type":"bool","value":1})"), "want true or false"},
      {meta(R"({"key":"x","type":"float32","value":1e300})"), "overflows float32"},
      {meta(R"({"key":"x","type":"float7","value":1})"), "unknown value type 'float7'"},
      {meta(R"({"key":"x","type":"array[uint8]","value":[1,256]})"), "element 1: 256"},
      {meta(R"({"key":"","type":"uint8","value":1})"), "\"key\" is empty"},
      {meta(R"({"key":"general.alignment","type":"uint32","value":0})"), "power of two"},
      {meta(R"({"key":"general.alignment","type":"uint32","value":3})"), "power of two"},
      {meta(R"({"key":"general.alignment","type":"uint64","value":32})"), "uint32 power of two"},
      {meta(R"({"key":"a","type":"bool","value":true},{"key":"a","type":"bool","value":true})"),
       "appears twice"},
      {tensor(R"({"name":"a","ne":[],"offset":0})"), "\"ne\" must be an array of 1 to 4"},
      {tensor(R"({"name":"a","ne":[1,1,1,1,1],"offset":0})"), "1 to 4 dimensions"},
      {tensor(R"({"name":"a","ne":[2.7],"offset":0})"), "dimension 2.7 must be an integer"},
      {tensor(R"({"name":"a","ne":[0],"offset":0})"), "dimension 0 must be"},
      {tensor(R"({"name":"a","ne":[4],"offset":-4})"), "\"offset\""},
      {tensor(R"({"name":"a","ne":[4]})"), "missing \"offset\""},
      {tensor(R"({"name":"","ne":[4],"offset":0})"), "\"name\" is empty"},
      {tensor(R"({"name":"a","ne":[4],"offset":0,"dtype":"F16"})"), "only F32"},
      {tensor(tensor_ok + "," + tensor_ok), "tensor 'a' appears twice"},
      {tensor(R"({"name":"a","ne":[4194304,4194304,4],"offset":0})"), "more than"},
  };
  for (const Case& c : cases) {
    const std::string e = ManifestError(c.json);
    EXPECT_NE(e.find(c.want), std::string::npos) << c.json << " -> " << e;
    EXPECT_EQ(e.rfind("m.json: ", 0), 0u) << e;
  }
}

TEST(Manifest, WhatItAcceptsTheReaderOpensUnchanged) {
  const std::string json = R"({"metadata":[
      {"key":"general.alignment","type":"uint32","value":64},
      {"key":"s","type":"string","value":"h\u00e9"},
      {"key":"f","type":"float32","value":0.1},
      {"key":"d","type":"float64","value":1e300},
      {"key":"u","type":"uint64","value":18446744073709551615},
      {"key":"i","type":"int8","value":-128},
      {"key":"a","type":"array[int16]","value":[-32768,32767]}],
    "tensors":[{"name":"m","ne":[32,2],"offset":0},{"name":"v","ne":[3],"offset":8}]})";
  auto m = ParseManifest(json, "m.json");
  ASSERT_TRUE(m.ok()) << m.message();
  std::vector<float> blob(100);
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<float>(i) * 0.5f;
  auto read = [&](uint64_t offset, std::span<float> out) {
    std::memcpy(out.data(), reinterpret_cast<const char*>(blob.data()) + offset, out.size_bytes());
    return Status::Ok();
  };
  auto w = BuildGguf(*m, GgmlType::kF32, blob.size() * 4, read);
  ASSERT_TRUE(w.ok()) << w.message();
  const std::vector<uint8_t> bytes = w->Serialize();
  auto f = GgufFile::FromMemory(bytes, "out.gguf");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->GetString("s"), "h\xc3\xa9");
  EXPECT_FLOAT_EQ(static_cast<float>(*f->GetFloat("f")), 0.1f);
  EXPECT_EQ(f->Find("u")->u, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f->GetInt("i"), -128);
  EXPECT_EQ(f->GetIntArray("a"), (std::vector<int64_t>{-32768, 32767}));
  const GgufTensorInfo* v = f->FindTensor("v");
  ASSERT_NE(v, nullptr);
  float got[3];
  std::memcpy(got, f->TensorData(*v).data(), sizeof(got));
  EXPECT_EQ(got[0], 1.0f);  // byte offset 8 = float index 2
  EXPECT_EQ(got[2], 2.0f);

  // Data past the blob, and non-finite data, are refused before anything is written.
  m->tensors[1].offset = 396;
  EXPECT_NE(BuildGguf(*m, GgmlType::kF32, blob.size() * 4, read).message().find("past the end"),
            std::string::npos);
  m->tensors[1].offset = 8;
  blob[3] = std::numeric_limits<float>::infinity();
  EXPECT_NE(BuildGguf(*m, GgmlType::kF32, blob.size() * 4, read).message().find("NaN or infinity"),
            std::string::npos);
}

using Writer = TempDir;

TEST_F(Writer, RefusesSpecialFilesAndWhatTheReaderWouldReject) {
  GgufWriter w;
  w.Add("x", GgufValue::Uint32(1));
  const auto fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::filesystem::path& p : {fifo, dir_, std::filesystem::path("/dev/null")}) {
    Status s = w.WriteFile(p);
    ASSERT_FALSE(s.ok()) << p;
    EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.message();
  }
  struct stat st = {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));  // still the device
  ASSERT_TRUE(w.WriteFile(dir_ / "ok.gguf").ok());
  EXPECT_TRUE(GgufFile::Open(dir_ / "ok.gguf").ok());
  // Only ok.gguf and the FIFO remain: no temporary files left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 2);

  for (auto bad : {GgufValue::Uint32(0), GgufValue::Uint32(3), GgufValue::Uint64(32)}) {
    GgufWriter a;
    a.Add("general.alignment", bad);
    EXPECT_FALSE(a.Validate().ok());
    EXPECT_FALSE(a.WriteFile(dir_ / "bad.gguf").ok());
  }
  GgufWriter empty_key;
  empty_key.Add("", GgufValue::Uint8(1));
  EXPECT_NE(empty_key.Validate().message().find("empty metadata key"), std::string::npos);
  GgufWriter inf;
  inf.Add("f", GgufValue::Float64(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(inf.Validate().ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ / "bad.gguf"));
}

}  // namespace
}  // namespace primekv::cli
