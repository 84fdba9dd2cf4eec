// The decode loop makes no heap allocation per token, for the dense and the mixture-of-experts
// forward pass (routing, expert grouping and expert outputs live in the reusable
// ForwardWorkspace). Every operator new of this binary is counted, and the count must not move
// between two generated tokens after warm-up.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>

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

// Generates `max_new` tokens after a 300-token context compressed by half with `press`, and
// fails on any allocation after the third token (token 1 may size buffers for decode).
void ExpectNoAllocationPerToken(const Model& model, const std::string& press, float temperature,
                                int max_new) {
  SCOPED_TRACE(::testing::Message() << press << " temperature " << temperature);
  ThreadPool pool(2);
  Compressor comp(model, std::move(MakePress(*ParsePressSpec(press))).value());
  PipelineOptions opt;
  opt.schedule.ratio = 0.5;
  opt.max_new_tokens = max_new;
  opt.sampler = {temperature, 40, 0.95f, 1};
  std::vector<long> counts;
  counts.reserve(static_cast<size_t>(max_new) + 8);
  opt.on_token = [&](int, Token) {
    counts.push_back(g_allocations.load());
    return true;
  };
  std::vector<Token> ctx(300);
  for (size_t i = 0; i < ctx.size(); ++i) ctx[i] = static_cast<Token>(3 + i % 400);
  auto r = RunPipeline(model, comp, opt, ctx, {}, pool);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_GT(counts.size(), 10u);
  for (size_t i = 3; i < counts.size(); ++i) {
    if (counts[i] != counts[i - 1])
      ADD_FAILURE() << "token " << i << ": " << counts[i] - counts[i - 1] << " allocations";
  }
}

TEST(Decode, NoHeapAllocationPerToken) {
  const Model model = WriteAndLoad(
      SmallLlamaSpec(), std::filesystem::temp_directory_path() / "primekv_decode_alloc.gguf");
  for (const char* press : {"none", "primekv"})
    for (float temperature : {0.0f, 0.8f})
      ExpectNoAllocationPerToken(model, press, temperature, 100);
}

TEST(Decode, Qwen3MoeNoHeapAllocationPerToken) {
  RandomModelSpec spec = MoeSpec(/*n_layers=*/2, /*d_model=*/128, /*head_dim=*/64,
                                 /*n_experts=*/8, /*n_used=*/3, /*d_ff_expert=*/64);
  spec.vocab_size = 512;
  const Model model = WriteAndLoad(
      spec, std::filesystem::temp_directory_path() / "primekv_qwen3moe_decode_alloc.gguf");
  ExpectNoAllocationPerToken(model, "primekv", 0.0f, 60);
}

}  // namespace
}  // namespace primekv
