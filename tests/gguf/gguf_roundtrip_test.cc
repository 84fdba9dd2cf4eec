#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "gguf/gguf_test_util.h"
#include "primekv/gguf/gguf.h"

namespace primekv {
namespace {

using gguf_test::ByteBuilder;
using gguf_test::TempDir;

std::vector<uint8_t> FloatBytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(float));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Deterministic filler so every tensor's bytes differ.
std::vector<uint8_t> PatternBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (uint8_t& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return out;
}

// The writer's bytes for a tiny file, compared with a layout assembled by hand from the format
// description. This pins the format independently of the reader.
TEST(GgufWriter, MatchesHandAssembledBytes) {
  GgufWriter w;
  w.Add("a", GgufValue::Uint32(7));
  w.Add("s", GgufValue::String("xy"));
  w.Add("arr", GgufValue::Int32Array({-1, 2}));
  ASSERT_TRUE(w.AddTensor("t", GgmlType::kF32, {2}, FloatBytes({1.0f, 2.0f})).ok());
  ASSERT_TRUE(w.AddTensor("u", GgmlType::kF16, {3, 1}, {1, 2, 3, 4, 5, 6}).ok());

  ByteBuilder b;
  b.Raw("GGUF").Add<uint32_t>(3).Add<uint64_t>(2).Add<uint64_t>(3);
  b.Str("a").Add<uint32_t>(4).Add<uint32_t>(7);
  b.Str("s").Add<uint32_t>(8).Str("xy");
  b.Str("arr").Add<uint32_t>(9).Add<uint32_t>(5).Add<uint64_t>(2).Add<int32_t>(-1).Add<int32_t>(2);
  b.Str("t").Add<uint32_t>(1).Add<uint64_t>(2).Add<uint32_t>(0).Add<uint64_t>(0);
  b.Str("u").Add<uint32_t>(2).Add<uint64_t>(3).Add<uint64_t>(1).Add<uint32_t>(1).Add<uint64_t>(32);
  b.PadTo(32);
  b.Add(1.0f).Add(2.0f).PadTo(32);
  for (uint8_t x = 1; x <= 6; ++x) b.Add(x);
  b.PadTo(32);
  EXPECT_EQ(w.Serialize(), b.bytes());

  Result<GgufFile> f = GgufFile::FromMemory(b.bytes(), "hand.gguf");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->data_offset(), b.bytes().size() - 64);
  EXPECT_EQ(f->GetInt("a"), 7);
  EXPECT_EQ(f->GetString("s"), "xy");
  EXPECT_EQ(f->GetIntArray("arr"), (std::vector<int64_t>{-1, 2}));
  const GgufTensorInfo* u = f->FindTensor("u");
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->offset, 32u);
  EXPECT_EQ(u->n_bytes, 6u);
  EXPECT_EQ(f->TensorData(*u)[5], 6);
}

// Every metadata value type, with edge values, plus nested arrays.
std::vector<GgufKv> AllValueKinds() {
  std::vector<GgufKv> kvs;
  auto add = [&](std::string key, GgufValue v) { kvs.push_back({std::move(key), std::move(v)}); };
  add("v.u8", GgufValue::Uint8(255));
  add("v.i8", GgufValue::Int8(-128));
  add("v.u16", GgufValue::Uint16(65535));
  add("v.i16", GgufValue::Int16(-32768));
  add("v.u32", GgufValue::Uint32(4294967295u));
  add("v.i32", GgufValue::Int32(std::numeric_limits<int32_t>::min()));
  add("v.f32", GgufValue::Float32(-1.5e-39f));  // subnormal
  add("v.bool_true", GgufValue::Bool(true));
  add("v.bool_false", GgufValue::Bool(false));
  add("v.string", GgufValue::String("h\xc3\xa9llo \xe2\x96\x81world"));
  add("v.empty_string", GgufValue::String(""));
  add("v.u64", GgufValue::Uint64(std::numeric_limits<uint64_t>::max()));
  add("v.i64", GgufValue::Int64(std::numeric_limits<int64_t>::min()));
  add("v.f64", GgufValue::Float64(3.141592653589793));
  add("v.arr_u8", GgufValue::Array(GgufType::kUint8, {GgufValue::Uint8(0), GgufValue::Uint8(200)}));
  add("v.arr_i8", GgufValue::Array(GgufType::kInt8, {GgufValue::Int8(-5), GgufValue::Int8(127)}));
  add("v.arr_u16", GgufValue::Array(GgufType::kUint16, {GgufValue::Uint16(40000)}));
  add("v.arr_i16", GgufValue::Array(GgufType::kInt16, {GgufValue::Int16(-300)}));
  add("v.arr_u32", GgufValue::Array(GgufType::kUint32, {GgufValue::Uint32(0xffffffffu)}));
  add("v.arr_i32", GgufValue::Int32Array({1, -2, 3}));
  add("v.arr_f32", GgufValue::Float32Array({0.5f, -0.25f, 1e30f}));
  add("v.arr_bool",
      GgufValue::Array(GgufType::kBool, {GgufValue::Bool(true), GgufValue::Bool(false)}));
  add("v.arr_string", GgufValue::StringArray({"a", "", "\xe2\x96\x81t"}));
  add("v.arr_u64", GgufValue::Array(GgufType::kUint64, {GgufValue::Uint64(1ull << 63)}));
  add("v.arr_i64", GgufValue::Array(GgufType::kInt64, {GgufValue::Int64(-(1ll << 62))}));
  add("v.arr_f64", GgufValue::Array(GgufType::kFloat64, {GgufValue::Float64(-2.5)}));
  add("v.arr_empty", GgufValue::Array(GgufType::kFloat32, {}));
  add("v.arr_nested",
      GgufValue::Array(GgufType::kArray, {GgufValue::Int32Array({1, 2}), GgufValue::Int32Array({}),
                                          GgufValue::Int32Array({3})}));
  add("v.arr_nested3",
      GgufValue::Array(GgufType::kArray,
                       {GgufValue::Array(GgufType::kArray, {GgufValue::StringArray({"x", "yz"})}),
                        GgufValue::Array(GgufType::kArray, {})}));
  return kvs;
}

struct TensorSpec {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
  size_t n_bytes;  // computed by hand from the block layout
};

std::vector<TensorSpec> SomeTensors() {
  return {
      {"f32", GgmlType::kF32, {3, 2}, 24},
      {"f16", GgmlType::kF16, {5}, 10},
      {"bf16", GgmlType::kBF16, {2, 2, 2}, 16},
      {"q8_0", GgmlType::kQ8_0, {64, 3}, 6 * 34},
      {"q4_0", GgmlType::kQ4_0, {32, 1, 2}, 2 * 18},
      {"q4_k", GgmlType::kQ4_K, {512}, 2 * 144},
      {"i32", GgmlType::kI32, {7}, 28},
      {"f64", GgmlType::kF64, {1, 1, 1, 2}, 16},
  };
}

class RoundTrip : public ::testing::TestWithParam<std::tuple<uint32_t, uint32_t>> {};

TEST_P(RoundTrip, EveryValueTypeAndTensor) {
  const auto [version, alignment] = GetParam();  // alignment 0: default, not written
  GgufWriter w;
  w.SetVersion(version);
  if (alignment != 0) w.SetAlignment(alignment);
  std::vector<GgufKv> expected_kvs;
  if (alignment != 0) expected_kvs.push_back({"general.alignment", GgufValue::Uint32(alignment)});
  for (GgufKv& kv : AllValueKinds()) {
    w.Add(kv.key, kv.value);
    expected_kvs.push_back(std::move(kv));
  }
  std::vector<TensorSpec> specs = SomeTensors();
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(w.AddTensor(specs[i].name, specs[i].type, specs[i].ne,
                            PatternBytes(specs[i].n_bytes, static_cast<uint32_t>(i)))
                    .ok());
  }
  const std::vector<uint8_t> bytes = w.Serialize();
  const uint64_t align = alignment != 0 ? alignment : 32;
  EXPECT_EQ(bytes.size() % align, 0u);

  Result<GgufFile> f = GgufFile::FromMemory(bytes, "rt.gguf");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->display_name(), "rt.gguf");
  EXPECT_EQ(f->version(), version);
  EXPECT_EQ(f->alignment(), align);
  EXPECT_EQ(f->file_size(), bytes.size());
  EXPECT_EQ(f->data_offset() % align, 0u);
  ASSERT_EQ(f->metadata().size(), expected_kvs.size());
  for (size_t i = 0; i < expected_kvs.size(); ++i) {
    EXPECT_EQ(f->metadata()[i].key, expected_kvs[i].key);
    EXPECT_TRUE(f->metadata()[i].value == expected_kvs[i].value) << expected_kvs[i].key;
    const GgufValue* found = f->Find(expected_kvs[i].key);
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(found, &f->metadata()[i].value);
  }
  EXPECT_EQ(f->Find("v.missing"), nullptr);

  ASSERT_EQ(f->tensors().size(), specs.size());
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(specs[i].name);
    const GgufTensorInfo& t = f->tensors()[i];
    EXPECT_EQ(f->FindTensor(specs[i].name), &t);
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(t.type, specs[i].type);
    EXPECT_EQ(t.ne, specs[i].ne);
    uint64_t n = 1;
    for (int64_t d : specs[i].ne) n *= static_cast<uint64_t>(d);
    EXPECT_EQ(t.n_elements, n);
    EXPECT_EQ(t.n_bytes, specs[i].n_bytes);
    EXPECT_EQ(t.offset, expected_offset);
    expected_offset += (specs[i].n_bytes + align - 1) / align * align;
    std::span<const uint8_t> data = f->TensorData(t);
    const std::vector<uint8_t> want = PatternBytes(specs[i].n_bytes, static_cast<uint32_t>(i));
    ASSERT_EQ(data.size(), want.size());
    EXPECT_TRUE(std::equal(data.begin(), data.end(), want.begin()));
    EXPECT_EQ(data.data(), bytes.data() + f->data_offset() + t.offset);  // no copy
  }
  EXPECT_EQ(f->FindTensor("nope"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(VersionsAndAlignments, RoundTrip,
                         ::testing::Combine(::testing::Values(2u, 3u),
                                            ::testing::Values(0u, 1u, 8u, 64u, 256u)));

TEST(GgufReader, TypedGetters) {
  GgufWriter w;
  for (GgufKv& kv : AllValueKinds()) w.Add(kv.key, kv.value);
  const std::vector<uint8_t> bytes = w.Serialize();
  Result<GgufFile> r = GgufFile::FromMemory(bytes, "getters.gguf");
  ASSERT_TRUE(r.ok()) << r.message();
  const GgufFile& f = *r;

  EXPECT_EQ(f.GetInt("v.u8"), 255);
  EXPECT_EQ(f.GetInt("v.i8"), -128);
  EXPECT_EQ(f.GetInt("v.u16"), 65535);
  EXPECT_EQ(f.GetInt("v.i16"), -32768);
  EXPECT_EQ(f.GetInt("v.u32"), 4294967295ll);
  EXPECT_EQ(f.GetInt("v.i32"), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(f.GetInt("v.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_FALSE(f.GetInt("v.u64").has_value());  // does not fit in int64
  EXPECT_FALSE(f.GetInt("v.f32").has_value());
  EXPECT_FALSE(f.GetInt("v.bool_true").has_value());
  EXPECT_FALSE(f.GetInt("v.missing").has_value());

  EXPECT_EQ(f.GetFloat("v.f32"), static_cast<double>(-1.5e-39f));
  EXPECT_EQ(f.GetFloat("v.f64"), 3.141592653589793);
  EXPECT_FALSE(f.GetFloat("v.i32").has_value());

  EXPECT_EQ(f.GetBool("v.bool_true"), true);
  EXPECT_EQ(f.GetBool("v.bool_false"), false);
  EXPECT_FALSE(f.GetBool("v.u8").has_value());

  EXPECT_EQ(f.GetString("v.string"), "h\xc3\xa9llo \xe2\x96\x81world");
  EXPECT_EQ(f.GetString("v.empty_string"), "");
  EXPECT_FALSE(f.GetString("v.arr_string").has_value());

  EXPECT_EQ(f.GetStringArray("v.arr_string"), (std::vector<std::string>{"a", "", "\xe2\x96\x81t"}));
  EXPECT_FALSE(f.GetStringArray("v.string").has_value());
  EXPECT_FALSE(f.GetStringArray("v.arr_i32").has_value());

  EXPECT_EQ(f.GetFloatArray("v.arr_f32"), (std::vector<float>{0.5f, -0.25f, 1e30f}));
  EXPECT_EQ(f.GetFloatArray("v.arr_f64"), (std::vector<float>{-2.5f}));
  EXPECT_EQ(f.GetFloatArray("v.arr_empty"), std::vector<float>{});
  EXPECT_FALSE(f.GetFloatArray("v.arr_i32").has_value());

  EXPECT_EQ(f.GetIntArray("v.arr_i32"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.GetIntArray("v.arr_u8"), (std::vector<int64_t>{0, 200}));
  EXPECT_EQ(f.GetIntArray("v.arr_i8"), (std::vector<int64_t>{-5, 127}));
  EXPECT_EQ(f.GetIntArray("v.arr_u16"), (std::vector<int64_t>{40000}));
  EXPECT_EQ(f.GetIntArray("v.arr_i16"), (std::vector<int64_t>{-300}));
  EXPECT_EQ(f.GetIntArray("v.arr_u32"), (std::vector<int64_t>{4294967295ll}));
  EXPECT_EQ(f.GetIntArray("v.arr_i64"), (std::vector<int64_t>{-(1ll << 62)}));
  EXPECT_FALSE(f.GetIntArray("v.arr_u64").has_value());  // 2^63 does not fit
  EXPECT_FALSE(f.GetIntArray("v.arr_f32").has_value());
  EXPECT_FALSE(f.GetIntArray("v.arr_nested").has_value());

  const GgufValue* nested = f.Find("v.arr_nested3");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->array.size(), 2u);
  ASSERT_EQ(nested->array[0].array.size(), 1u);
  EXPECT_EQ(nested->array[0].array[0].array[1].s, "yz");
  EXPECT_TRUE(nested->array[1].array.empty());
  EXPECT_EQ(nested->array[1].array_type, GgufType::kArray);
}

TEST(GgufReader, ReleaseMetadataKeepsTheTensors) {
  GgufWriter w;
  w.Add("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b", "c"}));
  w.Add("general.name", GgufValue::String("x"));
  ASSERT_TRUE(w.AddTensor("t", GgmlType::kF32, {2}, FloatBytes({1.0f, 2.0f})).ok());
  const std::vector<uint8_t> bytes = w.Serialize();
  Result<GgufFile> r = GgufFile::FromMemory(bytes, "release.gguf");
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->metadata().size(), 2u);
  r->ReleaseMetadata();
  EXPECT_TRUE(r->metadata().empty());
  EXPECT_EQ(r->Find("general.name"), nullptr);
  EXPECT_FALSE(r->GetStringArray("tokenizer.ggml.tokens").has_value());
  const GgufTensorInfo* t = r->FindTensor("t");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(r->TensorData(*t).size(), 8u);
  EXPECT_EQ(r->TensorData(*t)[0], FloatBytes({1.0f})[0]);
}

TEST(GgufWriter, AddReplacesExistingKey) {
  GgufWriter w;
  w.Add("k", GgufValue::Uint32(1));
  w.Add("other", GgufValue::Bool(true));
  w.Add("k", GgufValue::String("second"));
  const std::vector<uint8_t> bytes = w.Serialize();
  Result<GgufFile> f = GgufFile::FromMemory(bytes, "replace.gguf");
  ASSERT_TRUE(f.ok()) << f.message();
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].key, "k");
  EXPECT_EQ(f->GetString("k"), "second");
}

TEST(GgufWriter, AlignmentKeyAddedDirectlyActsLikeSetAlignment) {
  GgufWriter w;
  w.Add("general.alignment", GgufValue::Uint32(128));
  ASSERT_TRUE(w.AddTensor("a", GgmlType::kF32, {3}, FloatBytes({1, 2, 3})).ok());
  ASSERT_TRUE(w.AddTensor("b", GgmlType::kF32, {1}, FloatBytes({4})).ok());
  const std::vector<uint8_t> bytes = w.Serialize();
  Result<GgufFile> f = GgufFile::FromMemory(bytes, "align.gguf");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->alignment(), 128u);
  EXPECT_EQ(f->data_offset() % 128, 0u);
  EXPECT_EQ(f->FindTensor("b")->offset, 128u);
}

TEST(GgufWriter, AddTensorRejectsBadInput) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("x", GgmlType::kF32, {2}, FloatBytes({1, 2})).ok());
  struct Case {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    size_t bytes;
    const char* phrase;
  };
  const Case cases[] = {
      {"x", GgmlType::kF32, {2}, 8, "duplicate tensor name 'x'"},
      {"", GgmlType::kF32, {2}, 8, "name is empty"},
      {"y", GgmlType::kF32, {2}, 12, "has 12 bytes of data but its type and shape need 8"},
      {"y", GgmlType::kQ8_0, {33}, 34, "not a multiple of the Q8_0 block size 32"},
      {"y", GgmlType::kF32, {1, 1, 1, 1, 1}, 4, "n_dims 5"},
      {"y", GgmlType::kF32, {}, 4, "n_dims 0"},
      {"y", GgmlType::kF32, {4, 0}, 0, "dimension 1 is 0"},
      {"y", GgmlType::kF32, {-4}, 0, "dimension 0 is -4"},
      {"y", GgmlType::kF32, {1ll << 40, 1ll << 40}, 0, "element count overflows"},
      {"y", GgmlType::kF64, {1ll << 61}, 0, "byte size overflows"},
      {"y", static_cast<GgmlType>(4), {1}, 1, "unknown ggml type id 4"},
  };
  for (const Case& c : cases) {
    Status s = w.AddTensor(c.name, c.type, c.ne, std::vector<uint8_t>(c.bytes));
    ASSERT_FALSE(s.ok()) << c.phrase;
    EXPECT_NE(s.message().find(c.phrase), std::string::npos) << s.message();
  }
}

TEST(GgufFileIo, WriteFileThenOpenMapsTheSameBytes) {
  TempDir dir;
  GgufWriter w;
  w.SetVersion(2);
  w.SetAlignment(64);
  w.Add("general.name", GgufValue::String("io"));
  ASSERT_TRUE(w.AddTensor("q", GgmlType::kQ8_0, {32, 2}, PatternBytes(68, 9)).ok());
  ASSERT_TRUE(w.AddTensor("f", GgmlType::kF32, {2}, FloatBytes({-1.0f, 0.125f})).ok());
  const std::filesystem::path path = dir.path() / "io.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "io.gguf.tmp"));

  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
  EXPECT_EQ(on_disk, w.Serialize());

  Result<GgufFile> f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->display_name(), path.string());
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->GetString("general.name"), "io");
  const GgufTensorInfo* t = f->FindTensor("f");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->offset, 128u);
  std::span<const uint8_t> data = f->TensorData(*t);
  float values[2];
  ASSERT_EQ(data.size(), sizeof(values));
  std::memcpy(values, data.data(), sizeof(values));
  EXPECT_EQ(values[0], -1.0f);
  EXPECT_EQ(values[1], 0.125f);

  // The GgufFile stays valid after a move; the mapping moves with it.
  GgufFile moved = std::move(f.value());
  EXPECT_EQ(moved.TensorData(*moved.FindTensor("q")).size(), 68u);
}

// --no-mmap: the file read into anonymous memory holds the same bytes, parses the same and stays
// read-only, as the mapping does.
TEST(GgufFileIo, CopiedHoldsTheMappedBytesReadOnly) {
  TempDir dir;
  GgufWriter w;
  w.SetAlignment(64);
  w.Add("general.name", GgufValue::String("copied"));
  ASSERT_TRUE(w.AddTensor("q", GgmlType::kQ8_0, {32, 3}, PatternBytes(102, 5)).ok());
  ASSERT_TRUE(w.AddTensor("f", GgmlType::kF32, {2}, FloatBytes({3.5f, -0.25f})).ok());
  const std::filesystem::path path = dir.path() / "copied.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());

  Result<GgufFile> mapped = GgufFile::Open(path, WeightMemory::kMapped);
  Result<GgufFile> copied = GgufFile::Open(path, WeightMemory::kCopied);
  ASSERT_TRUE(mapped.ok()) << mapped.message();
  ASSERT_TRUE(copied.ok()) << copied.message();
  EXPECT_EQ(copied->display_name(), path.string());
  EXPECT_EQ(copied->file_size(), w.Serialize().size());
  EXPECT_EQ(copied->GetString("general.name"), "copied");
  ASSERT_EQ(copied->tensors().size(), 2u);
  for (const char* name : {"q", "f"}) {
    const std::span<const uint8_t> a = mapped->TensorData(*mapped->FindTensor(name));
    const std::span<const uint8_t> b = copied->TensorData(*copied->FindTensor(name));
    ASSERT_EQ(a.size(), b.size()) << name;
    EXPECT_NE(a.data(), b.data()) << name;  // a copy, not the mapping
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << name;
  }
  const uint8_t* q = copied->TensorData(*copied->FindTensor("q")).data();
  EXPECT_DEATH(*const_cast<volatile uint8_t*>(q) = 1, "") << "the copy must be read-only";
}

TEST(GgufFileIo, ErrorsNameThePath) {
  TempDir dir;
  const std::filesystem::path missing = dir.path() / "missing.gguf";
  Result<GgufFile> f = GgufFile::Open(missing);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find(missing.string() + ": cannot open"), std::string::npos) << f.message();

  Result<GgufFile> fc = GgufFile::Open(missing, WeightMemory::kCopied);
  ASSERT_FALSE(fc.ok());
  EXPECT_NE(fc.message().find(missing.string() + ": cannot open"), std::string::npos)
      << fc.message();

  Result<GgufFile> d = GgufFile::Open(dir.path());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.message().find("not a regular file"), std::string::npos) << d.message();

  const std::filesystem::path empty = dir.path() / "empty.gguf";
  std::ofstream(empty).close();
  for (WeightMemory memory : {WeightMemory::kMapped, WeightMemory::kCopied}) {
    Result<GgufFile> e = GgufFile::Open(empty, memory);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.message().find(empty.string() + ": file truncated"), std::string::npos)
        << e.message();
  }

  GgufWriter w;
  const std::filesystem::path bad = dir.path() / "no_such_dir" / "out.gguf";
  Status s = w.WriteFile(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no_such_dir"), std::string::npos) << s.message();
}

TEST(GgufTypeName, NamesEveryType) {
  EXPECT_EQ(GgufTypeName(GgufType::kUint8), "u8");
  EXPECT_EQ(GgufTypeName(GgufType::kString), "string");
  EXPECT_EQ(GgufTypeName(GgufType::kArray), "array");
  EXPECT_EQ(GgufTypeName(GgufType::kFloat64), "f64");
  EXPECT_EQ(GgufTypeName(static_cast<GgufType>(13)), "unknown");
}

}  // namespace
}  // namespace primekv
