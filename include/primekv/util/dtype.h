// Tensor element types as numbered in GGUF files (ggml's type ids). In util, the bottom layer, so
// tensors and the quant kernels name a type without depending on the GGUF reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace primekv {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  std::string_view name;  // "F32", "Q8_0", ...
  int block_size;         // elements per block (1 for plain types)
  size_t block_bytes;     // bytes per block
  bool computable;        // true if quant/ can dequantize and dot it
};

struct GgmlTypeEntry {
  GgmlType id;
  GgmlTypeInfo info;
};

// The one table of type facts; everything else (GGUF sizes, quant's block layouts, the
// supported-types message) reads it. The computable types come first, in the order messages
// list them. Block layouts: Q8_0 = f16 scale + 32 int8; Q4_0 = f16 scale + 16 bytes of nibbles;
// the _1 variants add an f16 min (Q8_1: f16 scale + f16 sum); Q5 adds 4 bytes of high bits.
// K-quants use 256-element super-blocks; IQ4_NL is Q4_0's layout with a non-linear grid,
// IQ4_XS a 256-element block of eight such sub-blocks with 6-bit scales.
inline constexpr GgmlTypeEntry kGgmlTypes[] = {
    {GgmlType::kF32, {"F32", 1, 4, true}},           {GgmlType::kF16, {"F16", 1, 2, true}},
    {GgmlType::kBF16, {"BF16", 1, 2, true}},         {GgmlType::kQ8_0, {"Q8_0", 32, 34, true}},
    {GgmlType::kQ4_0, {"Q4_0", 32, 18, true}},       {GgmlType::kQ4_1, {"Q4_1", 32, 20, true}},
    {GgmlType::kQ5_0, {"Q5_0", 32, 22, true}},       {GgmlType::kQ5_1, {"Q5_1", 32, 24, true}},
    {GgmlType::kQ2_K, {"Q2_K", 256, 84, true}},      {GgmlType::kQ3_K, {"Q3_K", 256, 110, true}},
    {GgmlType::kQ4_K, {"Q4_K", 256, 144, true}},     {GgmlType::kQ5_K, {"Q5_K", 256, 176, true}},
    {GgmlType::kQ6_K, {"Q6_K", 256, 210, true}},     {GgmlType::kIQ4_NL, {"IQ4_NL", 32, 18, true}},
    {GgmlType::kIQ4_XS, {"IQ4_XS", 256, 136, true}}, {GgmlType::kQ8_1, {"Q8_1", 32, 36, false}},
    {GgmlType::kQ8_K, {"Q8_K", 256, 292, false}},    {GgmlType::kI8, {"I8", 1, 1, false}},
    {GgmlType::kI16, {"I16", 1, 2, false}},          {GgmlType::kI32, {"I32", 1, 4, false}},
    {GgmlType::kI64, {"I64", 1, 8, false}},          {GgmlType::kF64, {"F64", 1, 8, false}},
};

// Known ids (including types we can size but not compute); nullopt for unknown ids.
constexpr std::optional<GgmlTypeInfo> TypeInfo(uint32_t type_id) {
  for (const GgmlTypeEntry& entry : kGgmlTypes) {
    if (static_cast<uint32_t>(entry.id) == type_id) return entry.info;
  }
  return std::nullopt;
}
constexpr std::optional<GgmlTypeInfo> TypeInfo(GgmlType t) {
  return TypeInfo(static_cast<uint32_t>(t));
}
// Parses "F32", "f16", "Q8_0", ... (case-insensitive).
std::optional<GgmlType> ParseGgmlType(std::string_view name);
// The computable types' names, comma-separated, as error messages list them.
std::string ComputableTypeNames();

}  // namespace primekv
