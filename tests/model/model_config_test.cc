// Metadata a model file states and make-model writes: Phi-3 LongRoPE's factor choice by the
// context size (the one rule every entry point uses), the type of rope.scaling.type, and the
// bounds make-model shares with the loader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/random_models.h"
#include "primekv/gguf/gguf.h"

namespace primekv {
namespace {

namespace fs = std::filesystem;

class ModelConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("primekv_model_config_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // phi3 with LongRoPE factors: original context 64 of a trained 256.
  static RandomModelSpec LongRopeSpec() {
    RandomModelSpec s = TinyLlamaSpec();
    s.arch = Arch::kPhi3;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.head_dim = 16;
    s.d_model = 64;
    s.max_context = 256;
    s.long_rope = true;
    s.rope_original_context = 64;
    return s;
  }

  fs::path Write(const RandomModelSpec& s, const std::string& name) {
    const fs::path p = dir_ / name;
    const Status st = WriteRandomModel(s, p);
    EXPECT_TRUE(st.ok()) << st.message();
    return p;
  }

  // `from` copied with `edit` applied after every key and tensor.
  fs::path Rewrite(const fs::path& from, const std::function<void(GgufWriter&)>& edit) {
    auto f = GgufFile::Open(from);
    EXPECT_TRUE(f.ok()) << f.message();
    GgufWriter w;
    for (const GgufKv& kv : f->metadata())
      if (kv.key != "general.alignment") w.Add(kv.key, kv.value);
    for (const GgufTensorInfo& t : f->tensors()) {
      auto bytes = f->TensorData(t);
      EXPECT_TRUE(w.AddTensor(t.name, t.type, t.ne, {bytes.begin(), bytes.end()}).ok());
    }
    edit(w);
    const fs::path p = dir_ / "edited.gguf";
    EXPECT_TRUE(w.WriteFile(p).ok());
    return p;
  }

  fs::path dir_;
};

// llama.cpp's rule: the long factors when the context size exceeds the original context.
TEST_F(ModelConfigTest, LongRopeFactorsFollowTheContextSize) {
  const fs::path p = Write(LongRopeSpec(), "phi3.gguf");
  struct Case {
    int64_t context;
    bool long_factors;
  };
  std::vector<float> short_freq, long_freq;
  for (const Case c : {Case{1, false}, Case{64, false}, Case{65, true}, Case{256, true},
                       Case{0, true}, Case{1000, true}}) {
    auto m = Model::Load(p, WeightMemory::kMapped, c.context);
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_TRUE(m->config().long_rope);
    EXPECT_EQ(m->config().rope_long_factors, c.long_factors) << "context " << c.context;
    EXPECT_EQ(UsesLongRopeFactors(m->config(), c.context), c.long_factors);
    const auto freq = m->rope_inv_freq();
    (c.long_factors ? long_freq : short_freq).assign(freq.begin(), freq.end());
  }
  EXPECT_NE(short_freq, long_freq);
}

// A rope.scaling.type that is not a string was taken for an absent one, so the model ran
// unscaled; it is refused, naming the key.
TEST_F(ModelConfigTest, NonStringRopeScalingTypeIsRefused) {
  const fs::path p = Write(TinyLlamaSpec(), "llama.gguf");
  for (const GgufValue& v : {GgufValue::Uint32(1), GgufValue::StringArray({"linear"})}) {
    auto m = Model::Load(Rewrite(p, [&](GgufWriter& w) { w.Add("llama.rope.scaling.type", v); }));
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.message().find("'llama.rope.scaling.type' is a"), std::string::npos) << m.message();
    EXPECT_NE(m.message().find("not a string"), std::string::npos) << m.message();
  }
  auto none = Model::Load(Rewrite(
      p, [](GgufWriter& w) { w.Add("llama.rope.scaling.type", GgufValue::String("none")); }));
  EXPECT_TRUE(none.ok()) << none.message();
  auto yarn = Model::Load(Rewrite(
      p, [](GgufWriter& w) { w.Add("llama.rope.scaling.type", GgufValue::String("yarn")); }));
  ASSERT_FALSE(yarn.ok());
  EXPECT_NE(yarn.message().find("'yarn' is not supported"), std::string::npos) << yarn.message();
}

// make-model refuses what its loader would refuse, rather than writing such a file.
TEST_F(ModelConfigTest, RandomModelSpecWithinTheLoadersBounds) {
  RandomModelSpec window = LongRopeSpec();
  window.long_rope = false;
  window.sliding_window = kMaxSlidingWindow + 1;
  const Status too_wide = WriteRandomModel(window, dir_ / "wide.gguf");
  ASSERT_FALSE(too_wide.ok());
  EXPECT_NE(too_wide.message().find("--sliding-window"), std::string::npos) << too_wide.message();
  window.sliding_window = kMaxSlidingWindow;
  auto widest = Model::Load(Write(window, "widest.gguf"));
  ASSERT_TRUE(widest.ok()) << widest.message();
  EXPECT_EQ(widest->config().sliding_window, kMaxSlidingWindow);

  RandomModelSpec one = LongRopeSpec();
  one.rope_original_context = 1;
  const Status st = WriteRandomModel(one, dir_ / "one.gguf");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("original context of 2 or more"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace primekv
