// The sampler refuses what it cannot sample from instead of emitting an arbitrary token.
#include "primekv/model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace primekv {
namespace {

TEST(Sampler, NonFiniteLogitsAreAnError) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float temperature : {0.0f, 0.8f}) {
    for (float bad : {nan, inf, -inf}) {
      Sampler s({temperature, 40, 0.95f, 1});
      std::vector<float> logits = {0.5f, 1.0f, bad, -2.0f};
      auto t = s.Sample(logits);
      ASSERT_FALSE(t.ok()) << temperature << " " << bad;
      EXPECT_NE(t.message().find("non-finite logits"), std::string::npos);
    }
    Sampler all_nan({temperature, 0, 1.0f, 1});
    EXPECT_FALSE(all_nan.Sample(std::vector<float>(30, nan)).ok());
  }
}

TEST(Sampler, FiniteLogitsStillSample) {
  Sampler greedy({0.0f, 0, 1.0f, 0});
  auto t = greedy.Sample(std::vector<float>{0.1f, 3.0f, -1.0f});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, 1);
  Sampler top1({1.0f, 1, 1.0f, 7});  // top-k 1 at any temperature is the argmax
  auto u = top1.Sample(std::vector<float>{0.1f, -3.0f, 2.5f});
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(*u, 2);
}

TEST(Sampler, InvalidOptionsAreAnError) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const SamplerOptions bad[] = {{nan, 0, 1.0f, 0},  {-1.0f, 0, 1.0f, 0}, {0.5f, -1, 1.0f, 0},
                                {0.5f, 0, 0.0f, 0}, {0.5f, 0, 1.5f, 0},  {0.5f, 0, nan, 0}};
  for (const SamplerOptions& o : bad) {
    EXPECT_FALSE(ValidateSamplerOptions(o).ok());
    Sampler s(o);
    EXPECT_FALSE(s.Sample(std::vector<float>{1.0f, 2.0f}).ok());
  }
  EXPECT_TRUE(ValidateSamplerOptions({0.0f, 0, 1.0f, 0}).ok());
}

}  // namespace
}  // namespace primekv
