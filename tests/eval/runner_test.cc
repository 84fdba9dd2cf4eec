// primekv eval end to end on a small random model: outputs exist, and an interrupted run
// resumes without recomputing finished units.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/random_models.h"
#include "eval/run_config.h"
#include "primekv/eval/eval_runner.h"
#include "primekv/press/press.h"

namespace primekv {
namespace {

std::vector<std::string> Lines(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// A small random model (context 2048) in a fresh folder.
struct Fixture {
  std::filesystem::path dir;
  std::filesystem::path model_path;
  Model model;
};

Fixture MakeFixture(const std::string& name, uint64_t seed = 1) {
  const auto dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto path = dir / "m.gguf";
  Model model = WriteAndLoad(TinyLlamaSpec(1, seed), path);
  return {dir, path, std::move(model)};
}

EvalRunSpec SmallSpec(const Fixture& f) {
  EvalRunSpec spec;
  spec.tasks = {"niah_single_1"};
  spec.presses = {"none"};
  spec.ratios = {0.5};
  spec.samples = 1;
  spec.length = 300;
  spec.max_new_tokens = 4;
  spec.progress = false;
  spec.out = f.dir / "run";
  spec.model_path = f.model_path;
  return spec;
}

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(EvalRunner, ResumeWithOtherSettingsIsRefusedNamingTheSetting) {
  Fixture f = MakeFixture("primekv_eval_config_test");
  const EvalRunSpec base = SmallSpec(f);
  ASSERT_TRUE(RunEvaluation(f.model, base).ok());
  const std::string config = Slurp(base.out / "config.json");
  const auto j = nlohmann::json::parse(config);
  EXPECT_EQ(j["model"]["size"], std::filesystem::file_size(f.model_path));
  EXPECT_EQ(j["model"]["scheme"], "mix64-full");
  EXPECT_EQ(j["settings"]["ctx-size"], 2048);

  struct Case {
    const char* setting;
    std::function<void(EvalRunSpec&)> change;
  };
  const std::vector<Case> cases = {
      {"--kv-type", [](EvalRunSpec& s) { s.kv_dtype = KvDType::kF32; }},
      {"--chat", [](EvalRunSpec& s) { s.chat = true; }},
      {"--max-new-tokens", [](EvalRunSpec& s) { s.max_new_tokens = 5; }},
      {"--ctx-size", [](EvalRunSpec& s) { s.ctx_size = 1000; }},
      {"--length", [](EvalRunSpec& s) { s.length = 310; }},
      {"--seed", [](EvalRunSpec& s) { s.seed = 7; }},
      {"--mode", [](EvalRunSpec& s) { s.mode = "decode"; }},
  };
  for (const Case& c : cases) {
    EvalRunSpec spec = base;
    c.change(spec);
    auto r = RunEvaluation(f.model, spec);
    ASSERT_FALSE(r.ok()) << c.setting;
    EXPECT_NE(r.message().find(std::string("another ") + c.setting + " ("), std::string::npos)
        << r.message();
  }
  // A different model file (same shape, other weights) at the same path.
  Fixture other = MakeFixture("primekv_eval_config_test_other", /*seed=*/2);
  std::filesystem::copy_file(other.model_path, f.model_path,
                             std::filesystem::copy_options::overwrite_existing);
  auto r = RunEvaluation(other.model, base);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("another model file"), std::string::npos) << r.message();
  // Nothing was appended by the refused runs; the config is unchanged.
  EXPECT_EQ(Slurp(base.out / "config.json"), config);

  // Adding a task or a press is a legitimate extension of the same run.
  ASSERT_TRUE(WriteRandomModel(TinyLlamaSpec(), f.model_path).ok());
  EvalRunSpec more = base;
  more.tasks.push_back("niah_single_2");
  more.presses.push_back("knorm");
  auto ok = RunEvaluation(f.model, more);
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->skipped, 1);

  // A folder with results but no config (an older primekv) cannot be checked.
  std::filesystem::remove(base.out / "config.json");
  r = RunEvaluation(f.model, base);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("no config.json"), std::string::npos) << r.message();
}

// What a default change looks like to an --out folder: the recorded resolution of a press
// differs from what the binary now resolves the same name to.
TEST(EvalRunner, ResumeRefusesAPressWhoseResolutionChangedOrWasNeverRecorded) {
  Fixture f = MakeFixture("primekv_eval_presses_test");
  EvalRunSpec spec = SmallSpec(f);
  spec.presses = {"none", "primekv", "adakv:snapkv:window=16"};
  ASSERT_TRUE(RunEvaluation(f.model, spec).ok());
  const auto config_path = spec.out / "config.json", rows_path = spec.out / "results.jsonl";
  auto j = nlohmann::json::parse(Slurp(config_path));
  const std::string now = MakePress(*ParsePressSpec("primekv"))->resolved;
  EXPECT_EQ(j["presses"],
            nlohmann::json({{"none", "none"},
                            {"primekv", now},
                            {"adakv:snapkv:window=16", "adakv:snapkv:kernel=5,window=16"}}));
  const std::string rows = Slurp(rows_path);
  ASSERT_EQ(Lines(rows_path).size(), 3u);
  EXPECT_NE(Slurp(spec.out / "report.md").find("`primekv` = `" + now + "`"), std::string::npos);

  // The folder made under an "old default" of primekv.
  const std::string old = "primekv:combine=logit,key=old,rounds=one,value=wo_centered";
  j["presses"]["primekv"] = old;
  std::ofstream(config_path) << j.dump(2) << "\n";
  const std::string config = Slurp(config_path);
  auto r = RunEvaluation(f.model, spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("press primekv resolved as \"" + old +
                             "\", and it now resolves as \"" + now + "\""),
            std::string::npos)
      << r.message();
  // Refused before anything was written; a run without primekv still resumes.
  EXPECT_EQ(Slurp(config_path), config);
  EXPECT_EQ(Slurp(rows_path), rows);
  EvalRunSpec others = spec;
  others.presses = {"none", "adakv:snapkv:window=16"};
  r = RunEvaluation(f.model, others);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->skipped, 2);

  // A config.json from before presses were recorded, with primekv rows: refused.
  j.erase("presses");
  std::ofstream(config_path) << j.dump(2) << "\n";
  r = RunEvaluation(f.model, spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("has rows of press "), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("but no record of what that press resolved to"), std::string::npos);
  EXPECT_EQ(Slurp(rows_path), rows);
  // ... but a run of presses without rows there (and "none") resumes and records them.
  EvalRunSpec fresh = spec;
  fresh.presses = {"none", "knorm"};
  r = RunEvaluation(f.model, fresh);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->skipped, 1);
  EXPECT_EQ(r->computed, 1);
  j = nlohmann::json::parse(Slurp(config_path));
  EXPECT_EQ(j["presses"], nlohmann::json({{"none", "none"}, {"knorm", "knorm"}}));
  // The unrecorded primekv rows stay refused.
  r = RunEvaluation(f.model, spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("no record"), std::string::npos) << r.message();
}

TEST(EvalRunner, EditedTaskFileIsRefused) {
  Fixture f = MakeFixture("primekv_eval_taskfile_test");
  const auto tasks = f.dir / "t.jsonl";
  const std::string line =
      R"({"id": "a", "context": "The key is under the pot.", "turns": [{"question": )"
      R"("Where is the key?", "answers": ["pot"]}], "metric": "string_match_all"})";
  std::ofstream(tasks) << line << "\n";
  EvalRunSpec spec = SmallSpec(f);
  spec.tasks = {"jsonl:" + tasks.string()};
  ASSERT_TRUE(RunEvaluation(f.model, spec).ok());
  std::ofstream(tasks) << line.substr(0, line.find("pot")) << "table."
                       << line.substr(line.find("pot") + 3) << "\n";
  auto r = RunEvaluation(f.model, spec);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("another version of task jsonl:"), std::string::npos) << r.message();
}

TEST(EvalRunner, FailuresBeforeRunningLeaveNoOutFolder) {
  Fixture f = MakeFixture("primekv_eval_early_test");
  const std::vector<std::function<void(EvalRunSpec&)>> bad = {
      [](EvalRunSpec& s) { s.tasks = {"nosuchtask"}; },
      [](EvalRunSpec& s) { s.presses = {"nosuchpress"}; },
      [](EvalRunSpec& s) { s.samples = 0; },
      [](EvalRunSpec& s) { s.max_new_tokens = 2147483647; },
      [](EvalRunSpec& s) { s.length = 4096; },
      [](EvalRunSpec& s) { s.ctx_size = 4096; },            // above the trained 2048, not allowed
      [](EvalRunSpec& s) { s.allow_ctx_overflow = true; },  // without a --ctx-size
      [](EvalRunSpec& s) { s.tasks = {"jsonl:/nonexistent.jsonl"}; },
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    EvalRunSpec spec = SmallSpec(f);
    bad[i](spec);
    auto r = RunEvaluation(f.model, spec);
    EXPECT_FALSE(r.ok()) << i;
    EXPECT_FALSE(std::filesystem::exists(spec.out)) << i << ": " << r.message();
  }
}

TEST(EvalRunner, SamplesOverTheContextAreMarkedAndNotScored) {
  Fixture f = MakeFixture("primekv_eval_overctx_test");
  const auto tasks = f.dir / "t.jsonl";
  {
    std::ofstream out(tasks);
    std::string long_context;
    for (int i = 0; i < 400; ++i) long_context += "The quick brown fox jumps. ";
    for (const auto& [id, context] : std::vector<std::pair<std::string, std::string>>{
             {"short", "The key is under the pot."}, {"long", long_context}}) {
      out << nlohmann::json{{"id", id},
                            {"context", context},
                            {"turns", {{{"question", "Where?"}, {"answers", {"pot"}}}}},
                            {"metric", "string_match_all"}}
                 .dump()
          << "\n";
    }
  }
  EvalRunSpec spec = SmallSpec(f);
  spec.tasks = {"jsonl:" + tasks.string()};
  spec.presses = {"none", "knorm"};
  spec.samples = 2;
  spec.ctx_size = 512;
  std::vector<std::string> seen;
  spec.on_warning = [&](const std::string& w) { seen.push_back(w); };
  auto r = RunEvaluation(f.model, spec);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->over_context, 1);
  EXPECT_EQ(r->ctx_size, 512);
  EXPECT_EQ(r->computed, 2);  // the short sample under both presses
  ASSERT_FALSE(seen.empty());
  // Its text alone is more bytes than 512 tokens can cover, so it is not even tokenized.
  EXPECT_NE(seen[0].find("sample \"long\": its text is "), std::string::npos) << seen[0];
  EXPECT_NE(seen[0].find("more than the context size of 512"), std::string::npos) << seen[0];
  int ok = 0, over = 0;
  for (const std::string& line : Lines(spec.out / "results.jsonl")) {
    const auto j = nlohmann::json::parse(line);
    if (j["id"] == "long") {
      EXPECT_EQ(j["status"], "over_context");
      EXPECT_FALSE(j.contains("score"));
      EXPECT_GT(j["needed_tokens"].get<int>(), 512);
      EXPECT_EQ(j["ctx_size"], 512);
      ++over;
    } else {
      EXPECT_EQ(j["status"], "ok");
      EXPECT_TRUE(j.contains("score"));
      ++ok;
    }
  }
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(over, 2);
  const std::string md = Slurp(spec.out / "report.md");
  EXPECT_NE(md.find("## Samples that did not fit the context (not scored)"), std::string::npos);
  EXPECT_NE(md.find("| 1 |"), std::string::npos) << md;
  // Resuming finds every unit done, the over-context ones included.
  auto again = RunEvaluation(f.model, spec);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->computed, 0);
  EXPECT_EQ(again->skipped, 4);
}

TEST(EvalRunner, BadResultLinesAreReportedAndSkipped) {
  Fixture f = MakeFixture("primekv_eval_badrows_test");
  EvalRunSpec spec = SmallSpec(f);
  ASSERT_TRUE(RunEvaluation(f.model, spec).ok());
  const auto results = spec.out / "results.jsonl";
  const std::string good = Lines(results).at(0);
  {
    std::ofstream out(results, std::ios::app);
    out << "null\n";
    auto wrong = nlohmann::json::parse(good);
    wrong["ratio"] = "0.5";
    out << wrong.dump() << "\n";
    out << "[1,2]\n";
    out << R"({"task":"t","id":"i","press":"none","ratio":0,"turn":3,"turns":1,"score":1})"
        << "\n";
    // The last line lacks its newline but is complete.
    std::string other = good;
    other.replace(other.find("\"niah_single_1\""), 15, "\"other_task___\"");
    out << other;
  }
  std::vector<std::string> seen;
  spec.on_warning = [&](const std::string& w) { seen.push_back(w); };
  spec.presses = {"none", "knorm"};
  auto r = RunEvaluation(f.model, spec);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->computed, 1);
  const std::string f_ = results.string();
  const std::vector<std::string> want = {
      f_ + ":2: not a JSON object but null; line skipped",
      f_ + ":3: \"ratio\" must be a finite number (it is string); line skipped",
      f_ + ":4: not a JSON object but array; line skipped",
      f_ + ":5: \"turn\" must be below \"turns\"; line skipped"};
  EXPECT_EQ(seen, want);
  // Every line is whole JSON: the appended record was not glued to the unterminated one.
  const auto lines = Lines(results);
  ASSERT_EQ(lines.size(), 7u);
  for (const std::string& l : lines) EXPECT_TRUE(nlohmann::json::accept(l)) << l;
  EXPECT_NE(lines[5].find("other_task___"), std::string::npos);
  // The report counts the two good tasks' rows, not the bad ones.
  const std::string csv = Slurp(spec.out / "results.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 3);
  EXPECT_NE(Slurp(spec.out / "report.md").find("(4 unusable lines of results.jsonl"),
            std::string::npos);
}

TEST(RunConfig, HashIsStreamingAndSeesEveryByte) {
  std::vector<unsigned char> data(100000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  eval_internal::Mix64 whole;
  whole.Update(data.data(), data.size());
  // Any split of the stream gives the same digest.
  for (size_t step : {1, 7, 31, 32, 33, 4096}) {
    eval_internal::Mix64 parts;
    for (size_t i = 0; i < data.size(); i += step)
      parts.Update(data.data() + i, std::min(step, data.size() - i));
    EXPECT_EQ(parts.Digest(), whole.Digest()) << step;
  }
  // A flipped bit anywhere (head, middle, the unaligned tail) or a dropped byte changes it.
  for (size_t at : {size_t{0}, size_t{50000}, data.size() - 1}) {
    auto changed = data;
    changed[at] ^= 1;
    eval_internal::Mix64 h;
    h.Update(changed.data(), changed.size());
    EXPECT_NE(h.Digest(), whole.Digest()) << at;
  }
  eval_internal::Mix64 shorter;
  shorter.Update(data.data(), data.size() - 1);
  EXPECT_NE(shorter.Digest(), whole.Digest());
  // The file fingerprint of a small file hashes it whole.
  const auto path = std::filesystem::temp_directory_path() / "primekv_mix64_test.bin";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  auto fp = eval_internal::FingerprintFile(path);
  ASSERT_TRUE(fp.ok()) << fp.message();
  EXPECT_EQ(fp->size, data.size());
  EXPECT_EQ(fp->scheme, "mix64-full");
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(whole.Digest()));
  EXPECT_EQ(fp->hash, hex);
  std::filesystem::remove(path);
  EXPECT_FALSE(eval_internal::FingerprintFile(path).ok());
  EXPECT_FALSE(eval_internal::FingerprintFile(std::filesystem::temp_directory_path()).ok());
}

TEST(EvalRunner, WritesReportsAndResumes) {
  const auto dir = std::filesystem::temp_directory_path() / "primekv_eval_runner_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteRandomModel(TinyLlamaSpec(2), dir / "m.gguf").ok());
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
    for (const char* key :
         {"\"answer_ms\"", "\"prefill_ms\"", "\"second_pass_ms\"", "\"score_ms\""}) {
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
