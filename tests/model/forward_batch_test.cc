// Model::ForwardDecodeBatch against one-token Model::Forward calls: for every architecture and
// a float, an 8-bit and a K-quant weight type, each slot's logits must be the same bits as
// decoding that sequence alone, for batches of 1 to 7 (beyond kDecodeBatchRows, so the split
// into groups is covered), with caches at different positions and of different lengths.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/model/random_model.h"

namespace primekv {
namespace {

struct Case {
  std::string arch;
  GgmlType type;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.arch + "_" + std::string(TypeInfo(info.param.type)->name);
}

class ForwardBatch : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    RandomModelSpec s;
    s.arch = ArchFromName(GetParam().arch).value();
    if (s.arch == Arch::kQwen3Moe) {
      s.n_experts = 8;
      s.n_experts_used = 2;
    }
    s.type = GetParam().type;
    s.d_model = 256;
    s.d_ff = 512;
    s.d_ff_expert = 256;
    s.vocab_size = 512;
    s.seed = 7;
    path_ = std::filesystem::temp_directory_path() /
            ("primekv_forward_batch_" + CaseName({GetParam(), 0}) + ".gguf");
    ASSERT_TRUE(WriteRandomModel(s, path_).ok());
    auto m = Model::Load(path_);
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::make_unique<Model>(std::move(m).value());
  }
  void TearDown() override { std::filesystem::remove(path_); }

  // Sequence i's prompt: 3 + 5 i tokens, so the slots sit at different positions.
  std::vector<Token> Prompt(int i) const {
    std::vector<Token> p;
    for (int t = 0; t < 3 + 5 * i; ++t)
      p.push_back(static_cast<Token>((37 * i + 11 * t + 1) % 512));
    return p;
  }

  std::filesystem::path path_;
  std::unique_ptr<Model> model_;
};

// Records what a tap sees, to compare the batched and the single path.
class RecordingTap : public ForwardTap {
 public:
  void OnQueries(int layer, std::span<const int32_t> pos, MatView<const float> q) override {
    seen.push_back(static_cast<float>(layer));
    seen.push_back(static_cast<float>(pos[0]));
    seen.insert(seen.end(), q.Row(0), q.Row(0) + q.cols);
  }
  void OnAttentionOutput(int layer, MatView<const float> o) override {
    seen.push_back(static_cast<float>(-1 - layer));
    seen.insert(seen.end(), o.Row(0), o.Row(0) + o.cols);
  }
  std::vector<float> seen;
};

TEST_P(ForwardBatch, LogitsEqualSingleDecodeBitForBit) {
  const Model& m = *model_;
  const int vocab = m.config().vocab_size;
  ThreadPool pool(2);
  constexpr int kSteps = 4;
  for (int batch = 1; batch <= 7; ++batch) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    std::vector<KvCache> single, batched;
    std::vector<Token> next_single(static_cast<size_t>(batch)),
        next_batched(static_cast<size_t>(batch));
    std::vector<float> logits(static_cast<size_t>(vocab) * static_cast<size_t>(batch));
    ForwardWorkspace ws;
    for (int i = 0; i < batch; ++i) {
      for (auto* caches : {&single, &batched}) {
        caches->push_back(m.NewCache());
        ASSERT_TRUE(m.Forward(Prompt(i), caches->back(), {},
                              MatView<float>(logits.data(), 1, vocab), pool, ws)
                        .ok());
      }
      next_single[static_cast<size_t>(i)] = next_batched[static_cast<size_t>(i)] =
          static_cast<Token>(i * 3 + 2);
    }
    std::vector<RecordingTap> taps_single(static_cast<size_t>(batch)),
        taps_batched(static_cast<size_t>(batch));
    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::vector<float>> expect;
      for (int i = 0; i < batch; ++i) {
        std::vector<float> row(static_cast<size_t>(vocab));
        const size_t si = static_cast<size_t>(i);
        ASSERT_TRUE(m.Forward(std::span<const Token>(&next_single[si], 1), single[si], {},
                              MatView<float>(row.data(), 1, vocab), pool, ws, &taps_single[si])
                        .ok());
        expect.push_back(row);
      }
      std::vector<DecodeSlot> slots;
      for (int i = 0; i < batch; ++i) {
        const size_t si = static_cast<size_t>(i);
        slots.push_back({next_batched[si], &batched[si], &taps_batched[si]});
      }
      ForwardWorkspace batch_ws;
      ASSERT_TRUE(
          m.ForwardDecodeBatch(slots, MatView<float>(logits.data(), batch, vocab), pool, batch_ws)
              .ok());
      for (int i = 0; i < batch; ++i) {
        const size_t si = static_cast<size_t>(i);
        const float* got = logits.data() + si * static_cast<size_t>(vocab);
        ASSERT_EQ(std::memcmp(got, expect[si].data(), expect[si].size() * sizeof(float)), 0)
            << "slot " << i << " step " << step;
        EXPECT_EQ(batched[si].NextPosition(), single[si].NextPosition());
        // Greedy continuation, the same for both paths once the logits are equal.
        Token best = 0;
        for (int v = 1; v < vocab; ++v)
          if (got[v] > got[best]) best = static_cast<Token>(v);
        next_single[si] = next_batched[si] = best;
      }
    }
    for (int i = 0; i < batch; ++i) {
      const size_t si = static_cast<size_t>(i);
      EXPECT_EQ(taps_batched[si].seen, taps_single[si].seen) << "tap of slot " << i;
      EXPECT_EQ(batched[si].MaxLength(), single[si].MaxLength());
    }
  }
}

TEST_P(ForwardBatch, RefusesBadSlotsBeforeTouchingAnyCache) {
  const Model& m = *model_;
  const int vocab = m.config().vocab_size;
  ThreadPool pool(1);
  ForwardWorkspace ws;
  std::vector<float> logits(static_cast<size_t>(vocab) * 2);
  KvCache a = m.NewCache(), b = m.NewCache();
  ASSERT_TRUE(m.Forward(Prompt(1), a, {}, MatView<float>(logits.data(), 1, vocab), pool, ws).ok());
  const int32_t pa = a.NextPosition();
  const MatView<float> lv(logits.data(), 2, vocab);

  std::vector<DecodeSlot> shared = {{1, &a, nullptr}, {2, &a, nullptr}};
  EXPECT_FALSE(m.ForwardDecodeBatch(shared, lv, pool, ws).ok());
  std::vector<DecodeSlot> bad_token = {{1, &a, nullptr}, {vocab, &b, nullptr}};
  EXPECT_FALSE(m.ForwardDecodeBatch(bad_token, lv, pool, ws).ok());
  std::vector<DecodeSlot> no_cache = {{1, &a, nullptr}, {2, nullptr, nullptr}};
  EXPECT_FALSE(m.ForwardDecodeBatch(no_cache, lv, pool, ws).ok());
  EXPECT_FALSE(m.ForwardDecodeBatch({}, lv, pool, ws).ok());
  EXPECT_EQ(a.NextPosition(), pa);
  EXPECT_EQ(a.MaxLength(), pa);
  EXPECT_EQ(b.NextPosition(), 0);
  EXPECT_EQ(b.MaxLength(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Types, ForwardBatch,
    ::testing::Values(Case{"llama", GgmlType::kF32}, Case{"qwen2", GgmlType::kQ8_0},
                      Case{"qwen3", GgmlType::kQ4_K}, Case{"qwen3moe", GgmlType::kQ4_0},
                      Case{"llama", GgmlType::kF16}, Case{"granite", GgmlType::kF32},
                      Case{"phi3", GgmlType::kQ8_0}, Case{"gemma", GgmlType::kF16},
                      Case{"gemma2", GgmlType::kQ4_K}),
    CaseName);

}  // namespace
}  // namespace primekv
