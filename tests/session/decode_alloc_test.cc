// The decode loop makes no heap allocation per token: every operator new in this binary is
// counted, and the count must not move between two generated tokens after warm-up.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "primekv/model/random_model.h"
#include "primekv/session/pipeline.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace primekv {
namespace {

TEST(Decode, NoHeapAllocationPerToken) {
  RandomModelSpec spec;
  spec.n_layers = 2;
  spec.d_model = 128;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.head_dim = 32;
  spec.d_ff = 256;
  spec.vocab_size = 512;
  const auto path = std::filesystem::temp_directory_path() / "primekv_decode_alloc.gguf";
  ASSERT_TRUE(WriteRandomModel(spec, path).ok());
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok());
  for (const char* press : {"none", "primekv"}) {
    for (float temp : {0.0f, 0.8f}) {
      SCOPED_TRACE(::testing::Message() << press << " temp " << temp);
      ThreadPool pool(2);
      Compressor comp(*model, std::move(MakePress(*ParsePressSpec(press))).value());
      PipelineOptions opt;
      opt.ratio = 0.5;
      opt.max_new_tokens = 100;
      opt.sampler = {temp, 40, 0.95f, 1};
      std::vector<long> counts;
      counts.reserve(200);
      opt.on_token = [&](int, Token) {
        counts.push_back(g_allocations.load());
        return true;
      };
      std::vector<Token> ctx(300);
      for (size_t i = 0; i < ctx.size(); ++i) ctx[i] = static_cast<Token>(3 + i % 400);
      opt.sampler.top_k = 40;
      auto r = RunPipeline(*model, comp, opt, ctx, {}, pool);
      ASSERT_TRUE(r.ok()) << r.message();
      ASSERT_GT(counts.size(), 10u);
      // Token 1 may warm up buffers sized by the first decode step; from then on nothing.
      for (size_t i = 3; i < counts.size(); ++i) {
        if (counts[i] != counts[i - 1])
          ADD_FAILURE() << "token " << i << ": " << counts[i] - counts[i - 1] << " allocations";
      }
      EXPECT_EQ(counts.back() - counts[2], 0)
          << "allocations during " << counts.size() - 3 << " decode steps";
    }
  }
}

}  // namespace
}  // namespace primekv
