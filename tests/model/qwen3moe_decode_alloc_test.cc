// The qwen3moe decode loop makes no heap allocation per token: routing, expert grouping and
// expert outputs live in the reusable ForwardWorkspace. Every operator new of this binary is
// counted, and the count must not move between two generated tokens after warm-up.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "common/random_models.h"
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

TEST(Qwen3MoeDecode, NoHeapAllocationPerToken) {
  RandomModelSpec spec = MoeSpec(/*n_layers=*/2, /*d_model=*/128, /*head_dim=*/64,
                                 /*n_experts=*/8, /*n_used=*/3, /*d_ff_expert=*/64);
  spec.vocab_size = 512;
  const auto path = std::filesystem::temp_directory_path() / "primekv_qwen3moe_decode_alloc.gguf";
  ASSERT_TRUE(WriteRandomModel(spec, path).ok());
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  ThreadPool pool(2);
  Compressor comp(*model, std::move(MakePress(*ParsePressSpec("primekv"))).value());
  PipelineOptions opt;
  opt.ratio = 0.5;
  opt.max_new_tokens = 60;
  std::vector<long> counts;
  counts.reserve(200);
  opt.on_token = [&](int, Token) {
    counts.push_back(g_allocations.load());
    return true;
  };
  std::vector<Token> ctx(300);
  for (size_t i = 0; i < ctx.size(); ++i) ctx[i] = static_cast<Token>(3 + i % 400);
  auto r = RunPipeline(*model, comp, opt, ctx, {}, pool);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_GT(counts.size(), 10u);
  // Token 1 may warm up buffers sized by the first decode step; from then on nothing.
  EXPECT_EQ(counts.back() - counts[2], 0)
      << "allocations during " << counts.size() - 3 << " decode steps";
}

}  // namespace
}  // namespace primekv
