// Format facts shared by the GGUF reader and writer.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string_view>

#include "primekv/util/dtype.h"
#include "primekv/gguf/gguf.h"
#include "primekv/util/status.h"

namespace primekv::gguf_internal {

inline constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
inline constexpr int kMaxDims = kGgufMaxDims;
inline constexpr const char* kAlignmentKey = kGgufAlignmentKey;

// Metadata value types: how each is stored, its name, and its size in a file (for strings and
// arrays the fewest bytes: a u64 length; a u32 element type and a u64 count).
enum class ValueKind { kUnsigned, kSigned, kFloat, kBool, kString, kArray };
struct ValueTypeInfo {
  GgufType type;
  std::string_view name;
  ValueKind kind;
  int bytes;
};
// Indexed by type id.
inline constexpr ValueTypeInfo kValueTypes[] = {
    {GgufType::kUint8, "u8", ValueKind::kUnsigned, 1},
    {GgufType::kInt8, "i8", ValueKind::kSigned, 1},
    {GgufType::kUint16, "u16", ValueKind::kUnsigned, 2},
    {GgufType::kInt16, "i16", ValueKind::kSigned, 2},
    {GgufType::kUint32, "u32", ValueKind::kUnsigned, 4},
    {GgufType::kInt32, "i32", ValueKind::kSigned, 4},
    {GgufType::kFloat32, "f32", ValueKind::kFloat, 4},
    {GgufType::kBool, "bool", ValueKind::kBool, 1},
    {GgufType::kString, "string", ValueKind::kString, 8},
    {GgufType::kArray, "array", ValueKind::kArray, 12},
    {GgufType::kUint64, "u64", ValueKind::kUnsigned, 8},
    {GgufType::kInt64, "i64", ValueKind::kSigned, 8},
    {GgufType::kFloat64, "f64", ValueKind::kFloat, 8},
};
// The entry of a type id, or null for an unknown one.
constexpr const ValueTypeInfo* ValueType(GgufType t) {
  const auto id = static_cast<uint32_t>(t);
  return id < std::size(kValueTypes) ? &kValueTypes[id] : nullptr;
}
constexpr bool IsInteger(GgufType t) {
  const ValueTypeInfo* info = ValueType(t);
  return info != nullptr &&
         (info->kind == ValueKind::kUnsigned || info->kind == ValueKind::kSigned);
}

inline bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b);
std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b);
// `alignment` must be a power of two.
std::optional<uint64_t> AlignUp(uint64_t x, uint64_t alignment);

struct TensorSize {
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
};
// Validates a shape for `type` (1..4 dims, each >= 1, ne[0] a multiple of the block size, element
// and byte counts that fit in int64) and sizes it. Error messages name the problem, not the tensor.
Result<TensorSize> SizeTensor(GgmlType type, std::span<const int64_t> ne);

}  // namespace primekv::gguf_internal
