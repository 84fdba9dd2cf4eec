#include "primekv/util/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace primekv {
namespace {

Result<int> Doubled(int x) {
  if (x < 0) return Status::Error("negative: " + std::to_string(x));
  return 2 * x;
}

Status CheckedDouble(int x) {
  PRIMEKV_RETURN_IF_ERROR(Doubled(x));
  return Status::Ok();
}

Result<int> DoubleTwicePlusOne(int x, int* calls) {
  ++*calls;
  PRIMEKV_ASSIGN_OR_RETURN(int once, Doubled(x));
  ++*calls;
  PRIMEKV_ASSIGN_OR_RETURN(auto twice, Doubled(once - 3));
  ++*calls;
  return twice + 1;
}

Result<std::unique_ptr<int>> MoveOnly(int x) {
  PRIMEKV_ASSIGN_OR_RETURN(int v, Doubled(x));
  return std::make_unique<int>(v);
}

Result<int> Deref(int x) {
  PRIMEKV_ASSIGN_OR_RETURN(std::unique_ptr<int> p, MoveOnly(x));
  return *p;
}

TEST(StatusMacros, AssignOrReturnPassesValuesAndStopsAtFirstError) {
  int calls = 0;
  auto r = DoubleTwicePlusOne(5, &calls);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 15);  // 2 * (10 - 3) + 1
  EXPECT_EQ(calls, 3);

  calls = 0;
  auto first = DoubleTwicePlusOne(-4, &calls);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.message(), "negative: -4");
  EXPECT_EQ(calls, 1);

  calls = 0;
  auto second = DoubleTwicePlusOne(1, &calls);  // 2 - 3 = -1 fails in the second step
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.message(), "negative: -1");
  EXPECT_EQ(calls, 2);
}

TEST(StatusMacros, ReturnIfErrorAndMoveOnlyValues) {
  EXPECT_TRUE(CheckedDouble(3).ok());
  Status bad = CheckedDouble(-2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message(), "negative: -2");
  auto v = Deref(21);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 42);
  EXPECT_FALSE(Deref(-1).ok());
}

}  // namespace
}  // namespace primekv
