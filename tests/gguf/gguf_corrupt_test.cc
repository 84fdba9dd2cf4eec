// Corrupt and truncated GGUF files must fail with a clear Status, never crash. Every case starts
// from a valid writer-produced file and patches bytes located by name.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf_test_util.h"
#include "primekv/gguf/gguf.h"

namespace primekv {
namespace {

using gguf_test::FindUnique;
using gguf_test::GetAt;
using gguf_test::PutAt;
using gguf_test::TempDir;

constexpr const char* kName = "corrupt.gguf";

std::vector<uint8_t> ValidFile() {
  GgufWriter w;
  w.SetAlignment(32);
  // Padding first: the header's count sanity check (every kv and tensor info needs a minimum
  // number of bytes) must not pre-empt the truncation cases inside later entries.
  w.Add("test.long", GgufValue::String(std::string(240, 'x')));
  w.Add("test.u32", GgufValue::Uint32(123456));
  w.Add("test.str", GgufValue::String("hello gguf world"));
  w.Add("test.arr", GgufValue::Int32Array({1, 2, 3, 4, 5, 6, 7, 8}));
  w.Add("test.key_a", GgufValue::Uint8(1));
  w.Add("test.key_b", GgufValue::Uint8(2));
  w.Add("test.flag", GgufValue::Bool(true));
  std::vector<uint8_t> a(64), b(68), c(64);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i);
  Check(w.AddTensor("tensor_a", GgmlType::kF32, {8, 2}, a).ok(), "tensor_a");
  Check(w.AddTensor("tensor_b", GgmlType::kQ8_0, {32, 2}, b).ok(), "tensor_b");
  Check(w.AddTensor("tensor_c", GgmlType::kF16, {4, 4, 2}, c).ok(), "tensor_c");
  return w.Serialize();
}

// Field positions, found by searching for the (unique) names.
size_t KeyStart(const std::vector<uint8_t>& f, std::string_view key) {
  return FindUnique(f, key) - sizeof(uint64_t);
}
size_t ValueTypePos(const std::vector<uint8_t>& f, std::string_view key) {
  return FindUnique(f, key) + key.size();
}
size_t ValuePos(const std::vector<uint8_t>& f, std::string_view key) {
  return ValueTypePos(f, key) + sizeof(uint32_t);
}
size_t NDimsPos(const std::vector<uint8_t>& f, std::string_view tensor) {
  return FindUnique(f, tensor) + tensor.size();
}
size_t NePos(const std::vector<uint8_t>& f, std::string_view tensor, int d) {
  return NDimsPos(f, tensor) + 4 + 8 * static_cast<size_t>(d);
}
size_t TensorTypePos(const std::vector<uint8_t>& f, std::string_view tensor) {
  const size_t n_dims = GetAt<uint32_t>(f, NDimsPos(f, tensor));
  return NDimsPos(f, tensor) + 4 + 8 * n_dims;
}
size_t OffsetPos(const std::vector<uint8_t>& f, std::string_view tensor) {
  return TensorTypePos(f, tensor) + 4;
}
void Rename(std::vector<uint8_t>& f, std::string_view from, std::string_view to) {
  ASSERT_EQ(from.size(), to.size());
  std::memcpy(f.data() + FindUnique(f, from), to.data(), to.size());
}

Result<GgufFile> Parse(const std::vector<uint8_t>& bytes) {
  // An exact-size heap copy, so ASan flags any read past the end.
  auto copy = std::make_unique<uint8_t[]>(bytes.size());
  if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
  Result<GgufFile> r = GgufFile::FromMemory({copy.get(), bytes.size()}, kName);
  EXPECT_FALSE(r.ok()) << "corrupt file accepted";  // copy dies here: never use a parsed result
  return r;
}

struct CorruptCase {
  const char* name;
  std::function<void(std::vector<uint8_t>&)> mutate;
  const char* phrase;
};

const std::vector<CorruptCase>& Cases() {
  using F = std::vector<uint8_t>;
  static const auto* cases = new std::vector<CorruptCase>{
      // Truncation inside each section.
      {"empty", [](F& f) { f.clear(); }, "file truncated: magic at offset 0"},
      {"truncated_header", [](F& f) { f.resize(20); }, "file truncated: metadata count"},
      {"truncated_in_key", [](F& f) { f.resize(KeyStart(f, "test.str") + 8 + 3); },
       "string of 8 bytes for key of metadata entry 3"},
      {"truncated_in_u32_value", [](F& f) { f.resize(ValuePos(f, "test.u32") + 2); },
       "file truncated: value of 'test.u32'"},
      {"truncated_in_string_value", [](F& f) { f.resize(ValuePos(f, "test.str") + 8 + 5); },
       "string of 16 bytes for value of 'test.str'"},
      {"truncated_in_array", [](F& f) { f.resize(ValuePos(f, "test.arr") + 12 + 4 * 3 + 1); },
       "array count 8 of 'test.arr' (i32 elements) cannot fit"},
      {"truncated_in_tensor_infos", [](F& f) { f.resize(NePos(f, "tensor_c", 1) + 3); },
       "file truncated: shape of tensor 'tensor_c'"},
      {"truncated_in_tensor_data", [](F& f) { f.resize(f.size() - 10); },
       "tensor 'tensor_c' data [offset"},
      // Header.
      {"bad_magic", [](F& f) { f[0] = 'X'; }, "bad magic 'XGUF'"},
      {"version_0", [](F& f) { PutAt<uint32_t>(f, 4, 0); }, "unsupported GGUF version 0"},
      {"version_1", [](F& f) { PutAt<uint32_t>(f, 4, 1); }, "unsupported GGUF version 1"},
      {"version_99", [](F& f) { PutAt<uint32_t>(f, 4, 99); }, "unsupported GGUF version 99"},
      {"big_endian", [](F& f) { PutAt<uint32_t>(f, 4, 0x03000000); },
       "big-endian GGUF not supported"},
      {"huge_n_kv", [](F& f) { PutAt<uint64_t>(f, 16, uint64_t{1} << 60); },
       "metadata count 1152921504606846976 cannot fit"},
      {"huge_n_tensors", [](F& f) { PutAt<uint64_t>(f, 8, ~uint64_t{0}); },
       "tensor count 18446744073709551615 cannot fit"},
      {"too_many_tensors", [](F& f) { PutAt<uint64_t>(f, 8, 4); },
       "tensor 3 has an empty name"},  // reads zero padding as a fourth tensor info
      // Metadata.
      {"huge_string_length", [](F& f) { PutAt<uint64_t>(f, ValuePos(f, "test.str"), 1ull << 62); },
       "string length 4611686018427387904 of value of 'test.str' exceeds the limit"},
      {"string_past_end", [](F& f) { PutAt<uint64_t>(f, ValuePos(f, "test.str"), f.size()); },
       "runs past end of file"},
      {"huge_key_length", [](F& f) { PutAt<uint64_t>(f, KeyStart(f, "test.u32"), ~0ull); },
       "exceeds the limit"},
      {"huge_array_count",
       [](F& f) { PutAt<uint64_t>(f, ValuePos(f, "test.arr") + 4, uint64_t{1} << 61); },
       "array count 2305843009213693952 of 'test.arr'"},
      {"unknown_value_type", [](F& f) { PutAt<uint32_t>(f, ValueTypePos(f, "test.u32"), 13); },
       "unknown value type 13 for 'test.u32'"},
      {"unknown_array_element_type", [](F& f) { PutAt<uint32_t>(f, ValuePos(f, "test.arr"), 77); },
       "unknown value type 77 for array elements of 'test.arr'"},
      {"invalid_bool", [](F& f) { f[ValuePos(f, "test.flag")] = 2; },
       "invalid bool value 2 in 'test.flag'"},
      {"duplicate_key", [](F& f) { Rename(f, "test.key_b", "test.key_a"); },
       "duplicate metadata key 'test.key_a'"},
      {"alignment_not_power_of_two",
       [](F& f) { PutAt<uint32_t>(f, ValuePos(f, "general.alignment"), 48); },
       "general.alignment 48 is not a power of two"},
      {"alignment_zero", [](F& f) { PutAt<uint32_t>(f, ValuePos(f, "general.alignment"), 0); },
       "general.alignment 0 is not a power of two"},
      {"alignment_wrong_type",
       [](F& f) { PutAt<uint32_t>(f, ValueTypePos(f, "general.alignment"), 5); },  // i32
       "general.alignment must be u32, not i32"},
      // Tensor infos.
      {"unknown_tensor_type", [](F& f) { PutAt<uint32_t>(f, TensorTypePos(f, "tensor_b"), 99); },
       "tensor 'tensor_b': unknown ggml type id 99"},
      {"removed_tensor_type", [](F& f) { PutAt<uint32_t>(f, TensorTypePos(f, "tensor_b"), 4); },
       "unknown ggml type id 4"},
      {"n_dims_5", [](F& f) { PutAt<uint32_t>(f, NDimsPos(f, "tensor_a"), 5); },
       "tensor 'tensor_a': n_dims 5 is outside 1..4"},
      {"n_dims_0", [](F& f) { PutAt<uint32_t>(f, NDimsPos(f, "tensor_a"), 0); }, "n_dims 0"},
      {"overflowing_shape",
       [](F& f) {
         PutAt<uint64_t>(f, NePos(f, "tensor_a", 0), uint64_t{1} << 62);
         PutAt<uint64_t>(f, NePos(f, "tensor_a", 1), uint64_t{1} << 62);
       },
       "tensor 'tensor_a': element count overflows int64"},
      {"byte_size_overflow",
       [](F& f) { PutAt<uint64_t>(f, NePos(f, "tensor_c", 0), uint64_t{1} << 59); },
       "tensor 'tensor_c': byte size overflows int64"},
      {"negative_dim", [](F& f) { PutAt<uint64_t>(f, NePos(f, "tensor_a", 1), ~0ull); },
       "tensor 'tensor_a': dimension 1 is -1"},
      {"zero_dim", [](F& f) { PutAt<uint64_t>(f, NePos(f, "tensor_a", 0), 0); },
       "dimension 0 is 0"},
      {"ne0_not_multiple_of_block", [](F& f) { PutAt<uint64_t>(f, NePos(f, "tensor_b", 0), 33); },
       "tensor 'tensor_b': ne[0] = 33 is not a multiple of the Q8_0 block size 32"},
      {"shape_larger_than_data", [](F& f) { PutAt<uint64_t>(f, NePos(f, "tensor_c", 2), 3); },
       "tensor 'tensor_c' data [offset"},
      {"tensor_offset_past_end",
       [](F& f) { PutAt<uint64_t>(f, OffsetPos(f, "tensor_c"), uint64_t{1} << 40); },
       "extends past end of file"},
      {"tensor_offset_overflow",
       [](F& f) { PutAt<uint64_t>(f, OffsetPos(f, "tensor_c"), ~uint64_t{31}); },
       "extends past end of file"},
      {"misaligned_tensor_offset", [](F& f) { PutAt<uint64_t>(f, OffsetPos(f, "tensor_b"), 68); },
       "tensor 'tensor_b': offset 68 is not a multiple of the alignment 32"},
      {"duplicate_tensor_name", [](F& f) { Rename(f, "tensor_b", "tensor_a"); },
       "duplicate tensor name 'tensor_a'"},
      {"overlapping_tensors",
       [](F& f) {
         PutAt<uint64_t>(f, OffsetPos(f, "tensor_c"), GetAt<uint64_t>(f, OffsetPos(f, "tensor_b")));
       },
       "data overlaps tensor"},
      {"empty_tensor_name", [](F& f) { PutAt<uint64_t>(f, FindUnique(f, "tensor_a") - 8, 0); },
       "has an empty name"},
  };
  return *cases;
}

TEST(GgufCorrupt, BaseFileIsValid) {
  const std::vector<uint8_t> f = ValidFile();
  Result<GgufFile> r = GgufFile::FromMemory(f, kName);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->tensors().size(), 3u);
  EXPECT_EQ(r->metadata().size(), 8u);
  // The last tensor ends exactly at the end of the file (no trailing padding), so every proper
  // prefix is missing data.
  const GgufTensorInfo& last = r->tensors().back();
  EXPECT_EQ(r->data_offset() + last.offset + last.n_bytes, f.size());
}

TEST(GgufCorrupt, TableOfMutations) {
  ASSERT_GE(Cases().size(), 15u);
  for (const CorruptCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> f = ValidFile();
    c.mutate(f);
    Result<GgufFile> r = Parse(f);
    if (r.ok()) continue;  // already reported by Parse
    EXPECT_EQ(r.message().rfind(std::string(kName) + ": ", 0), 0u) << r.message();
    EXPECT_NE(r.message().find(c.phrase), std::string::npos)
        << "message: " << r.message() << "\nwanted: " << c.phrase;
  }
}

TEST(GgufCorrupt, ArraysNestedTooDeep) {
  GgufValue v = GgufValue::Int32Array({1});
  for (int depth = 1; depth < kGgufMaxArrayDepth; ++depth) {
    v = GgufValue::Array(GgufType::kArray, {v});
  }
  GgufWriter ok_writer;
  ok_writer.Add("deep", v);
  const std::vector<uint8_t> ok_bytes = ok_writer.Serialize();
  EXPECT_TRUE(GgufFile::FromMemory(ok_bytes, kName).ok());  // exactly at the limit

  GgufWriter w;
  w.Add("deep", GgufValue::Array(GgufType::kArray, {v}));
  Result<GgufFile> r = Parse(w.Serialize());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("corrupt.gguf: arrays nested deeper than 8 levels in 'deep'"),
            std::string::npos)
      << r.message();
}

TEST(GgufCorrupt, TensorPastEndMessageHasOffsetsAndSizes) {
  std::vector<uint8_t> f = ValidFile();
  Result<GgufFile> valid = GgufFile::FromMemory(f, kName);
  ASSERT_TRUE(valid.ok());
  const uint64_t data_offset = valid->data_offset();
  const uint64_t c_offset = valid->FindTensor("tensor_c")->offset;
  f.resize(f.size() - 10);
  Result<GgufFile> r = Parse(f);
  ASSERT_FALSE(r.ok());
  const std::string want =
      "corrupt.gguf: tensor 'tensor_c' data [offset " + std::to_string(data_offset + c_offset) +
      ", 64 bytes] extends past end of file (" + std::to_string(f.size()) + " bytes)";
  EXPECT_EQ(r.message(), want);
}

TEST(GgufCorrupt, OpenReportsThePath) {
  TempDir dir;
  std::vector<uint8_t> f = ValidFile();
  PutAt<uint32_t>(f, 4, 1);
  const std::filesystem::path path = dir.path() / "v1.gguf";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size()));
  Result<GgufFile> r = GgufFile::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(),
            path.string() + ": unsupported GGUF version 1 (only versions 2 and 3 are supported)");
}

TEST(GgufCorrupt, EveryTruncationFails) {
  const std::vector<uint8_t> f = ValidFile();
  for (size_t len = 0; len < f.size(); ++len) {
    std::vector<uint8_t> prefix(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(len));
    Result<GgufFile> r = Parse(prefix);
    ASSERT_FALSE(r.ok()) << "prefix of " << len << " bytes accepted";
    ASSERT_EQ(r.message().rfind(std::string(kName) + ": ", 0), 0u) << r.message();
  }
}

// A cheap deterministic sweep the fuzzer generalises: single-byte changes anywhere must never
// crash (most are still valid files, e.g. inside tensor data).
TEST(GgufCorrupt, SingleByteChangesNeverCrash) {
  const std::vector<uint8_t> f = ValidFile();
  int rejected = 0;
  for (size_t pos = 0; pos < f.size(); ++pos) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xff}, static_cast<uint8_t>(f[pos] ^ 0x80),
                      static_cast<uint8_t>(f[pos] + 1)}) {
      std::vector<uint8_t> g = f;
      g[pos] = v;
      auto copy = std::make_unique<uint8_t[]>(g.size());
      std::memcpy(copy.get(), g.data(), g.size());
      Result<GgufFile> r = GgufFile::FromMemory({copy.get(), g.size()}, kName);
      if (!r.ok()) {
        ++rejected;
        continue;
      }
      for (const GgufTensorInfo& t : r->tensors()) {
        std::span<const uint8_t> data = r->TensorData(t);
        EXPECT_LE(data.data() + data.size(), copy.get() + g.size());
      }
    }
  }
  EXPECT_GT(rejected, 100);
}

}  // namespace
}  // namespace primekv
