#include "primekv/util/dtype.h"

#include <gtest/gtest.h>

#include <string>

namespace primekv {
namespace {

struct Expected {
  GgmlType type;
  const char* name;
  int block_size;
  size_t block_bytes;
  bool computable;
};

// Block sizes derived from each layout rather than copied: f16 scale (2) / f32 scale (4), packed
// quants, high-bit planes and K-quant sub-block scales.
constexpr size_t kF16 = 2;
constexpr size_t kF32 = 4;
const Expected kExpected[] = {
    {GgmlType::kF32, "F32", 1, 4, true},
    {GgmlType::kF16, "F16", 1, 2, true},
    {GgmlType::kBF16, "BF16", 1, 2, true},
    {GgmlType::kQ4_0, "Q4_0", 32, kF16 + 32 / 2, true},
    {GgmlType::kQ4_1, "Q4_1", 32, 2 * kF16 + 32 / 2, true},
    {GgmlType::kQ5_0, "Q5_0", 32, kF16 + 32 / 8 + 32 / 2, true},
    {GgmlType::kQ5_1, "Q5_1", 32, 2 * kF16 + 32 / 8 + 32 / 2, true},
    {GgmlType::kQ8_0, "Q8_0", 32, kF16 + 32, true},
    {GgmlType::kQ8_1, "Q8_1", 32, 2 * kF16 + 32, false},
    {GgmlType::kQ2_K, "Q2_K", 256, 256 / 16 + 256 / 4 + 2 * kF16, true},
    {GgmlType::kQ3_K, "Q3_K", 256, 256 / 8 + 256 / 4 + 12 + kF16, true},
    {GgmlType::kQ4_K, "Q4_K", 256, 2 * kF16 + 12 + 256 / 2, true},
    {GgmlType::kQ5_K, "Q5_K", 256, 2 * kF16 + 12 + 256 / 8 + 256 / 2, true},
    {GgmlType::kQ6_K, "Q6_K", 256, 256 / 2 + 256 / 4 + 256 / 16 + kF16, true},
    {GgmlType::kQ8_K, "Q8_K", 256, kF32 + 256 + 256 / 16 * 2, false},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, kF16 + 32 / 2, true},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, kF16 + 2 + 256 / 64 + 256 / 2, true},
    {GgmlType::kI8, "I8", 1, 1, false},
    {GgmlType::kI16, "I16", 1, 2, false},
    {GgmlType::kI32, "I32", 1, 4, false},
    {GgmlType::kI64, "I64", 1, 8, false},
    {GgmlType::kF64, "F64", 1, 8, false},
};

TEST(GgmlType, TableMatchesLayouts) {
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.name);
    std::optional<GgmlTypeInfo> info = TypeInfo(e.type);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->name, e.name);
    EXPECT_EQ(info->block_size, e.block_size);
    EXPECT_EQ(info->block_bytes, e.block_bytes);
    EXPECT_EQ(info->computable, e.computable);
  }
  // Spot values from the format description, as literals.
  EXPECT_EQ(TypeInfo(GgmlType::kQ8_0)->block_bytes, 34u);
  EXPECT_EQ(TypeInfo(GgmlType::kQ4_0)->block_bytes, 18u);
  EXPECT_EQ(TypeInfo(GgmlType::kQ6_K)->block_bytes, 210u);
  EXPECT_EQ(TypeInfo(GgmlType::kQ8_K)->block_bytes, 292u);
}

TEST(GgmlType, UnknownIdsAreRejected) {
  int known = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    if (TypeInfo(id)) ++known;
  }
  EXPECT_EQ(known, static_cast<int>(std::size(kExpected)));
  for (uint32_t id : {4u, 5u, 16u, 21u, 22u, 29u, 31u, 1000u, 0xffffffffu}) {
    EXPECT_FALSE(TypeInfo(id).has_value()) << id;
  }
}

TEST(GgmlType, ParseIsCaseInsensitiveAndInvertsNames) {
  for (const Expected& e : kExpected) {
    EXPECT_EQ(ParseGgmlType(e.name), e.type) << e.name;
    std::string lower = e.name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(ParseGgmlType(lower), e.type) << lower;
  }
  EXPECT_EQ(ParseGgmlType("q4_k"), GgmlType::kQ4_K);
  EXPECT_EQ(ParseGgmlType("Bf16"), GgmlType::kBF16);
  EXPECT_FALSE(ParseGgmlType("").has_value());
  EXPECT_FALSE(ParseGgmlType("Q9_0").has_value());
  EXPECT_FALSE(ParseGgmlType("F32 ").has_value());
  EXPECT_FALSE(ParseGgmlType("Q8").has_value());
}

}  // namespace
}  // namespace primekv

namespace primekv {
namespace {

// The supported-types message lists the computable types of the one table, in its order.
TEST(GgmlType, ComputableTypeNamesListsTheComputableTypes) {
  EXPECT_EQ(ComputableTypeNames(),
            "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, "
            "IQ4_XS");
}

}  // namespace
}  // namespace primekv
