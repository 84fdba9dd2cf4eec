// primekv eval end to end on a small random model: outputs exist, and an interrupted run
// resumes without recomputing finished units.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "primekv/eval_runner.h"

namespace primekv {
namespace {

std::vector<std::string> Lines(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

TEST(EvalRunner, WritesReportsAndResumes) {
  const auto dir = std::filesystem::temp_directory_path() / "primekv_eval_runner_test";
  std::filesystem::remove_all(dir);
  RandomModelSpec ms;
  ms.n_layers = 2;
  ms.d_model = 64;
  ms.n_heads = 2;
  ms.n_kv_heads = 1;
  ms.head_dim = 32;
  ms.d_ff = 128;
  ms.vocab_size = 1024;
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteRandomModel(ms, dir / "m.gguf").ok());
  auto model = Model::Load(dir / "m.gguf");
  ASSERT_TRUE(model.ok());
  EvalRunSpec spec;
  spec.tasks = {"niah_single_1"};
  spec.presses = {"none", "primekv", "snapkv"};
  spec.ratios = {0.5};
  spec.samples = 2;
  spec.length = 700;
  spec.max_new_tokens = 8;
  spec.progress = false;
  spec.out = dir / "run";
  auto first = RunEvaluation(*model, spec);
  ASSERT_TRUE(first.ok()) << first.message();
  EXPECT_EQ(first->computed, 6);
  EXPECT_EQ(first->skipped, 0);
  for (const char* f : {"results.jsonl", "results.csv", "report.md"})
    EXPECT_TRUE(std::filesystem::exists(spec.out / f)) << f;
  const auto lines = Lines(spec.out / "results.jsonl");
  ASSERT_EQ(lines.size(), 6u);

  // Interrupt: the last unit's line is lost and the one before is cut in half.
  {
    std::ofstream out(spec.out / "results.jsonl", std::ios::trunc);
    for (size_t i = 0; i + 2 < lines.size(); ++i) out << lines[i] << "\n";
    out << lines[4].substr(0, lines[4].size() / 2) << "\n";
  }
  auto second = RunEvaluation(*model, spec);
  ASSERT_TRUE(second.ok()) << second.message();
  EXPECT_EQ(second->computed, 2);
  EXPECT_EQ(second->skipped, 4);
  auto again = RunEvaluation(*model, spec);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->computed, 0);
  EXPECT_EQ(again->skipped, 6);
  // The recomputed unit reproduces the lost line exactly but for its timings.
  const auto after = Lines(spec.out / "results.jsonl");
  auto strip = [](std::string s) {
    for (const char* key : {"\"answer_ms\"", "\"prefill_ms\"", "\"score_ms\""}) {
      const auto p = s.find(key);
      if (p != std::string::npos) s.erase(p, s.find(',', p) - p);
    }
    return s;
  };
  ASSERT_EQ(after.size(), lines.size()) << "the cut line is dropped, the lost ones come back";
  EXPECT_EQ(strip(after.back()), strip(lines.back()));
}

}  // namespace
}  // namespace primekv
