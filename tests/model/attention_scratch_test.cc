// Model::Forward's attention scratch (ForwardWorkspace::attention) is sized by the kernel's tile
// and page, never by the context: a 16K-token prefill needs what a 1K-token one does.
#include <gtest/gtest.h>

#include <vector>

#include "common/random_models.h"
#include "primekv/model/model.h"
#include "primekv/util/thread_pool.h"

namespace primekv {
namespace {

TEST(Attention, SixteenThousandTokenPrefillUsesTileScratchOnly) {
  const Model m = WriteLoadAndRemove(LongPrefillSpec(), "primekv_attention_scratch.gguf");
  ThreadPool pool(2);
  const int V = m.config().vocab_size;
  std::vector<float> logits(V);
  size_t small = 0;
  for (int n : {1024, 16384}) {
    ForwardWorkspace ws;
    KvCache cache = m.NewCache();
    const std::vector<Token> tokens = RandomTokenIds(n, 5, 3, 500);
    ASSERT_TRUE(m.Forward(tokens, cache, {}, {logits.data(), 1, V}, pool, ws).ok());
    if (small == 0) small = ws.attention.HighWaterBytes();
    EXPECT_EQ(ws.attention.HighWaterBytes(), small) << "attention scratch must not grow with n";
    EXPECT_LT(ws.attention.HighWaterBytes(), 1u << 20);
  }
}

}  // namespace
}  // namespace primekv
