#include "primekv/ggml_type.h"

#include <array>
#include <cstdint>

namespace primekv {
namespace {

struct TypeEntry {
  GgmlType id;
  GgmlTypeInfo info;
};

// Block layouts: Q8_0 = f16 scale + 32 int8; Q4_0 = f16 scale + 16 bytes of nibbles; the _1
// variants add an f16 min (Q8_1: f16 scale + f16 sum); Q5 adds 4 bytes of high bits. K-quants use
// 256-element super-blocks; IQ4_NL is Q4_0's layout with a non-linear grid, IQ4_XS a 256-element
// block of eight such sub-blocks with 6-bit scales.
constexpr std::array<TypeEntry, 22> kTypes = {{
    {GgmlType::kF32, {"F32", 1, 4, true}},         {GgmlType::kF16, {"F16", 1, 2, true}},
    {GgmlType::kQ4_0, {"Q4_0", 32, 18, true}},     {GgmlType::kQ4_1, {"Q4_1", 32, 20, true}},
    {GgmlType::kQ5_0, {"Q5_0", 32, 22, true}},     {GgmlType::kQ5_1, {"Q5_1", 32, 24, true}},
    {GgmlType::kQ8_0, {"Q8_0", 32, 34, true}},     {GgmlType::kQ8_1, {"Q8_1", 32, 36, false}},
    {GgmlType::kQ2_K, {"Q2_K", 256, 84, true}},    {GgmlType::kQ3_K, {"Q3_K", 256, 110, true}},
    {GgmlType::kQ4_K, {"Q4_K", 256, 144, true}},   {GgmlType::kQ5_K, {"Q5_K", 256, 176, true}},
    {GgmlType::kQ6_K, {"Q6_K", 256, 210, true}},   {GgmlType::kQ8_K, {"Q8_K", 256, 292, false}},
    {GgmlType::kIQ4_NL, {"IQ4_NL", 32, 18, true}}, {GgmlType::kIQ4_XS, {"IQ4_XS", 256, 136, true}},
    {GgmlType::kI8, {"I8", 1, 1, false}},          {GgmlType::kI16, {"I16", 1, 2, false}},
    {GgmlType::kI32, {"I32", 1, 4, false}},        {GgmlType::kI64, {"I64", 1, 8, false}},
    {GgmlType::kF64, {"F64", 1, 8, false}},        {GgmlType::kBF16, {"BF16", 1, 2, true}},
}};

char ToUpper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ToUpper(a[i]) != ToUpper(b[i])) return false;
  }
  return true;
}

}  // namespace

std::optional<GgmlTypeInfo> TypeInfo(uint32_t type_id) {
  for (const TypeEntry& entry : kTypes) {
    if (static_cast<uint32_t>(entry.id) == type_id) return entry.info;
  }
  return std::nullopt;
}

std::optional<GgmlType> ParseGgmlType(std::string_view name) {
  for (const TypeEntry& entry : kTypes) {
    if (EqualsIgnoreCase(entry.info.name, name)) return entry.id;
  }
  return std::nullopt;
}

}  // namespace primekv
