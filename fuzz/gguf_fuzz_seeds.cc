// Writes small valid GGUF files for the fuzzer's seed corpus: gguf_fuzz_seeds OUTPUT_DIR.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "primekv/gguf/gguf.h"

namespace primekv {
namespace {

std::vector<uint8_t> Bytes(size_t n, uint8_t start) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(start + i * 7);
  return out;
}

Status WriteSeeds(const std::filesystem::path& dir) {
  std::vector<std::pair<std::string, GgufWriter>> seeds;

  {  // header only
    GgufWriter w;
    seeds.emplace_back("empty_v3.gguf", w);
  }
  {  // every scalar type, v2
    GgufWriter w;
    w.SetVersion(2);
    w.Add("u8", GgufValue::Uint8(200));
    w.Add("i8", GgufValue::Int8(-3));
    w.Add("u16", GgufValue::Uint16(60000));
    w.Add("i16", GgufValue::Int16(-300));
    w.Add("u32", GgufValue::Uint32(7));
    w.Add("i32", GgufValue::Int32(-7));
    w.Add("f32", GgufValue::Float32(0.5f));
    w.Add("b", GgufValue::Bool(true));
    w.Add("s", GgufValue::String("str"));
    w.Add("u64", GgufValue::Uint64(1ull << 40));
    w.Add("i64", GgufValue::Int64(-(1ll << 40)));
    w.Add("f64", GgufValue::Float64(-0.25));
    seeds.emplace_back("scalars_v2.gguf", w);
  }
  {  // arrays, nested arrays
    GgufWriter w;
    w.Add("tokens", GgufValue::StringArray({"<unk>", "<s>", "\xe2\x96\x81t", ""}));
    w.Add("scores", GgufValue::Float32Array({0, -1, -2}));
    w.Add("types", GgufValue::Int32Array({2, 3, 1}));
    w.Add("nested", GgufValue::Array(GgufType::kArray,
                                     {GgufValue::Int32Array({1, 2}), GgufValue::Int32Array({})}));
    w.Add("bools", GgufValue::Array(GgufType::kBool, {GgufValue::Bool(false)}));
    seeds.emplace_back("arrays.gguf", w);
  }
  {  // tensors of each computable type, custom alignment
    GgufWriter w;
    w.SetAlignment(16);
    w.Add("general.architecture", GgufValue::String("llama"));
    Status s = w.AddTensor("f32", GgmlType::kF32, {4, 2}, Bytes(32, 1));
    if (s.ok()) s = w.AddTensor("f16", GgmlType::kF16, {3}, Bytes(6, 2));
    if (s.ok()) s = w.AddTensor("bf16", GgmlType::kBF16, {1, 1, 2}, Bytes(4, 3));
    if (s.ok()) s = w.AddTensor("q8_0", GgmlType::kQ8_0, {32}, Bytes(34, 4));
    if (s.ok()) s = w.AddTensor("q4_0", GgmlType::kQ4_0, {32, 1, 1, 1}, Bytes(18, 5));
    if (!s.ok()) return s;
    seeds.emplace_back("tensors_align16.gguf", w);
  }
  {  // a K-quant tensor, alignment 1
    GgufWriter w;
    w.SetAlignment(1);
    Status s = w.AddTensor("q6_k", GgmlType::kQ6_K, {256}, Bytes(210, 6));
    if (s.ok()) s = w.AddTensor("i8", GgmlType::kI8, {3}, Bytes(3, 7));
    if (!s.ok()) return s;
    seeds.emplace_back("kquant_align1.gguf", w);
  }

  std::filesystem::create_directories(dir);
  for (const auto& [name, writer] : seeds) {
    if (Status s = writer.WriteFile(dir / name); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace
}  // namespace primekv

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  primekv::Status s = primekv::WriteSeeds(argv[1]);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
