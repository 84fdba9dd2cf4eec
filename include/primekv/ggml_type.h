// Tensor element types as numbered in GGUF files (ggml's type ids).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
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

// Known ids (including types we can size but not compute); nullopt for unknown ids.
std::optional<GgmlTypeInfo> TypeInfo(uint32_t type_id);
inline std::optional<GgmlTypeInfo> TypeInfo(GgmlType t) {
  return TypeInfo(static_cast<uint32_t>(t));
}
// Parses "F32", "f16", "Q8_0", ... (case-insensitive).
std::optional<GgmlType> ParseGgmlType(std::string_view name);

}  // namespace primekv
