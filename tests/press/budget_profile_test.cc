// Budget profiles (profile=FILE): parsing refuses malformed files with a message, shares
// interpolate between the measured ratios, and a press with a profile keeps in each head exactly
// the profile's share of the tokens seen, in one compression and in a chunked one.
#include "primekv/press/budget_profile.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "common/random_models.h"
#include "primekv/press/compressor.h"

namespace primekv {
namespace {

// Two ratios, 2 layers x 2 KV heads; each ratio's shares average 1 - ratio.
BudgetProfile HandProfile() {
  BudgetProfile p;
  p.method = "test";
  p.contexts = 1;
  p.n_layers = 2;
  p.n_kv_heads = 2;
  p.ratios = {0.5, 0.9};
  p.fractions = {0.9,  0.1,  0.6,  0.4,    // ratio 0.5
                 0.30, 0.02, 0.06, 0.02};  // ratio 0.9
  return p;
}

std::string Text(const std::string& fractions, const std::string& ratios = "[0.5, 0.9]") {
  return R"({"format": "primekv-budget-profile", "n_layers": 2, "n_kv_heads": 1, "ratios": )" +
         ratios + R"(, "fractions": )" + fractions + "}";
}

TEST(BudgetProfile, ParsesAndRefusesMalformedFiles) {
  auto ok = BudgetProfile::Parse(Text("[[[0.8], [0.2]], [[0.15], [0.05]]]"), "t");
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_DOUBLE_EQ(ok->At(1, 0, 0), 0.15);
  const std::pair<std::string, std::string> bad[] = {
      {"not json", "t"},
      {R"({"format": "other"})", "not a primekv-budget-profile"},
      {Text("[[[0.8], [0.2]]]"), "[ratios][layers][heads]"},                    // one ratio short
      {Text("[[[0.8], [0.2], [0.1]], [[0.15], [0.05]]]"), "[ratios][layers]"},  // too many
      {Text("[[[1.5], [-0.5]], [[0.15], [0.05]]]"), "not in [0, 1]"},
      {Text("[[[0.9], [0.9]], [[0.15], [0.05]]]"), "not 1 - ratio"},
      {Text("[[[0.8], [0.2]], [[0.15], [0.05]]]", "[0.9, 0.5]"), "ascend"},
      {Text("[[[\"a\"], [0.2]], [[0.15], [0.05]]]"), "t"},
      {R"({"format": "primekv-budget-profile", "n_layers": -1, "n_kv_heads": 1, "ratios": [0.5],
          "fractions": [[[0.5]]]})",
       "t.n_layers: -1 is outside [1, 4096]"},
      // Counts that are not integers are refused, never converted (1e80 does not fit an int).
      {R"({"format": "primekv-budget-profile", "n_layers": 5.55556e+74, "n_kv_heads": 1,
          "ratios": [0.5], "fractions": [[[0.5]]]})",
       "t.n_layers: expected an integer, got a number"},
      {R"({"format": "primekv-budget-profile", "n_layers": 1, "n_kv_heads": 1.5,
          "ratios": [0.5], "fractions": [[[0.5]]]})",
       "t.n_kv_heads: expected an integer"},
      {R"({"format": "primekv-budget-profile", "n_layers": 1, "n_kv_heads": 1, "contexts": 1e80,
          "ratios": [0.5], "fractions": [[[0.5]]]})",
       "t.contexts: expected an integer"},
      {R"({"format": "primekv-budget-profile", "n_layers": 1, "n_kv_heads": 1, "method": 7,
          "ratios": [0.5], "fractions": [[[0.5]]]})",
       "t.method: expected a string"},
  };
  for (const auto& [text, message] : bad) {
    auto r = BudgetProfile::Parse(text, "t");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.message().find(message), std::string::npos) << text << ": " << r.message();
  }
  EXPECT_FALSE(BudgetProfile::Load("/nonexistent/profile.json").ok());
}

TEST(BudgetProfile, FormatVersionIsReadWrittenAndANewerOneRefused) {
  auto v1 = BudgetProfile::Parse(Text("[[[0.8], [0.2]], [[0.15], [0.05]]]"), "t");
  ASSERT_TRUE(v1.ok()) << v1.message();
  EXPECT_EQ(v1->version, 1);  // a file without the field
  const std::string body =
      R"("n_layers": 1, "n_kv_heads": 1, "ratios": [0.5], "fractions": [[[0.5]]]})";
  auto v2 = BudgetProfile::Parse(
      R"({"format": "primekv-budget-profile", "format_version": 2, "model_sha256": "ab", )" + body,
      "t");
  ASSERT_TRUE(v2.ok()) << v2.message();
  EXPECT_EQ(v2->version, 2);
  EXPECT_EQ(v2->model_sha256, "ab");
  auto v3 = BudgetProfile::Parse(
      R"({"format": "primekv-budget-profile", "format_version": 3, )" + body, "t");
  ASSERT_FALSE(v3.ok());
  EXPECT_NE(v3.message().find("format_version 3 is newer than this build reads (1 to 2)"),
            std::string::npos)
      << v3.message();
  const auto path = std::filesystem::temp_directory_path() / "primekv_budget_profile_v.json";
  BudgetProfile p = HandProfile();
  p.model_sha256 = "0123";
  ASSERT_TRUE(p.Save(path).ok());
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"format_version\": 2"), std::string::npos) << text;
  auto back = BudgetProfile::Load(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->version, 2);
  EXPECT_EQ(back->model_sha256, "0123");
}

TEST(BudgetProfile, SharesInterpolateAndScaleOutsideTheMeasuredRatios) {
  const BudgetProfile p = HandProfile();
  ASSERT_TRUE(p.Validate().ok()) << p.Validate().message();
  EXPECT_DOUBLE_EQ(p.Fraction(0.5, 0, 0), 0.9);
  EXPECT_NEAR(p.Fraction(0.7, 0, 0), 0.6, 1e-12);    // halfway between 0.9 and 0.30
  EXPECT_NEAR(p.Fraction(0.25, 1, 1), 0.6, 1e-12);   // 0.4 / 0.5 * 0.75
  EXPECT_NEAR(p.Fraction(0.95, 0, 1), 0.01, 1e-12);  // 0.02 / 0.1 * 0.05
  EXPECT_NEAR(p.Fraction(0.1, 0, 0), 1.0, 1e-12);    // 0.9 / 0.5 * 0.9 = 1.62, capped
  EXPECT_EQ(p.Keep(100, 0.9, 0, 0), 30);
  EXPECT_EQ(p.Keep(100, 0.9, 0, 1), 2);
  EXPECT_EQ(p.Keep(10, 0.9, 0, 1), 1);  // never none
  // Each interpolated ratio still spends 1 - ratio on average.
  for (double r : {0.55, 0.7, 0.85}) {
    double sum = 0;
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h) sum += p.Fraction(r, l, h);
    EXPECT_NEAR(sum / 4, 1 - r, 1e-12) << r;
  }
}

TEST(BudgetProfile, NestedBelowKeepsEachNeedAndSpreadsTheRestEvenly) {
  const BudgetProfile p = HandProfile();
  // Needs at 0.7 (halfway): 0.6, 0.06, 0.33, 0.21. At 0.5 the budget is 2 of 4 heads: the
  // level w with max(need, w) summing to 2 raises three heads to w = (2 - 0.6) / 3.
  const BudgetProfile n = p.NestedBelow(0.7);
  ASSERT_TRUE(n.Validate().ok()) << n.Validate().message();
  EXPECT_TRUE(n.spread.empty());
  EXPECT_EQ(n.ratios, (std::vector<double>{0.5, 0.7, 0.9}));
  const double w = 1.4 / 3;
  const double want_05[] = {0.6, w, w, w};
  const double need_07[] = {0.6, 0.06, 0.33, 0.21};
  for (int c = 0; c < 4; ++c) {
    EXPECT_NEAR(n.Fraction(0.5, c / 2, c % 2), want_05[c], 1e-12) << c;
    EXPECT_NEAR(n.Fraction(0.7, c / 2, c % 2), need_07[c], 1e-12) << c;
    // At and above the need ratio nothing moves (the hand profile is linear between its ends).
    for (double r : {0.8, 0.9, 0.95})
      EXPECT_NEAR(n.Fraction(r, c / 2, c % 2), p.Fraction(r, c / 2, c % 2), 1e-12) << r;
    // Below it every head keeps at least its need: the plain profile's 0.1 for head (0, 1)
    // at 0.5 becomes w.
    for (double r : {0.3, 0.5, 0.6}) EXPECT_GE(n.Fraction(r, c / 2, c % 2), need_07[c] - 1e-12);
  }
  EXPECT_NEAR(p.Fraction(0.5, 0, 1), 0.1, 1e-12);
  // Needs at 0.9 sum to 0.4, far under 0.5's budget of 2: every head rises to the uniform 0.5.
  const BudgetProfile u = p.NestedBelow(0.9);
  ASSERT_TRUE(u.Validate().ok()) << u.Validate().message();
  EXPECT_EQ(u.ratios, (std::vector<double>{0.5, 0.9}));  // a measured need ratio is not repeated
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(u.Fraction(0.5, c / 2, c % 2), 0.5, 1e-12) << c;
  // Needs over a budget (a ratio just under the need ratio) are scaled down to spend it.
  BudgetProfile over = p;
  over.ratios = {0.5, 0.895, 0.9};
  over.fractions = {0.9, 0.1, 0.6, 0.4, 0.3, 0.02, 0.06, 0.06, 0.3, 0.02, 0.06, 0.06};
  ASSERT_TRUE(over.Validate().ok()) << over.Validate().message();
  EXPECT_NEAR(over.NestedBelow(0.9).Fraction(0.895, 0, 0), 0.3 * 0.42 / 0.44, 1e-12);
}

std::vector<int> HeadLengths(const KvCache& cache) {
  std::vector<int> n;
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h) n.push_back(cache.Length(l, h));
  return n;
}

TEST(BudgetProfile, PressKeepsEachHeadsShareInOneAndInChunkedCompression) {
  const Model model = WriteLoadAndRemove(SmallGqaSpec(21), "primekv_budget_profile.gguf");
  const BudgetProfile hand = HandProfile();
  const auto path = std::filesystem::temp_directory_path() / "primekv_budget_profile.json";
  ASSERT_TRUE(hand.Save(path).ok());
  auto press = MakePress(*ParsePressSpec("primekv:profile=" + path.string()));
  ASSERT_TRUE(press.ok()) << press.message();
  EXPECT_EQ(press->budget.kind, BudgetKind::kProfile);
  EXPECT_NE(press->resolved.find("profile=" + path.string()), std::string::npos);
  const Compressor comp(model, std::move(*press));
  ThreadPool pool(2);
  std::vector<float> logits(300);
  ForwardWorkspace ws;

  // One compression after 200 tokens at 0.9: 60, 4, 12, 4 entries.
  std::vector<Token> tokens(200);
  std::iota(tokens.begin(), tokens.end(), 3);
  KvCache cache = model.NewCache({KvDType::kF32});
  ASSERT_TRUE(model.Forward(tokens, cache, {}, {logits.data(), 1, 300}, pool, ws).ok());
  ASSERT_TRUE(comp.Compress(cache, 0.9, nullptr, pool).ok());
  EXPECT_EQ(HeadLengths(cache), (std::vector<int>{60, 4, 12, 4}));

  // Chunked: after two chunks of 100 the target is KeepCount(200, 0.5) = 100, the ratio it
  // stands for 1 - 100.5 / 200; each head keeps its share of the 200 tokens seen.
  KvCache chunked = model.NewCache({KvDType::kF32});
  for (int b = 0; b < 200; b += 100) {
    const std::span<const Token> chunk(tokens.data() + b, 100);
    ASSERT_TRUE(model.Forward(chunk, chunked, {}, {logits.data(), 1, 300}, pool, ws).ok());
    ASSERT_TRUE(comp.CompressTo(chunked, KeepCount(b + 100, 0.5), nullptr, pool).ok());
  }
  const double r = 1 - 100.5 / 200;
  std::vector<int> want;
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h) want.push_back(std::min(hand.Keep(200, r, l, h), 200));
  EXPECT_EQ(HeadLengths(chunked), want);
  EXPECT_GT(want[0], 100);  // a head over the uniform target keeps more than it
  std::filesystem::remove(path);
}

std::vector<std::vector<int32_t>> HeadPositions(const KvCache& cache) {
  std::vector<std::vector<int32_t>> out;
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 2; ++h) {
      cache.ReadPositions(l, h, &out.emplace_back());
      std::sort(out.back().begin(), out.back().end());
    }
  }
  return out;
}

// nest=0.9 keeps, below 0.9, exactly what the uniform default keeps when the needs fit under
// the uniform share (the hand profile at 0.5), and exactly the plain profile's entries at 0.9.
TEST(BudgetProfile, NestedPressKeepsTheDefaultsEntriesBelowAndTheProfilesAtTheNeedRatio) {
  const Model model = WriteLoadAndRemove(SmallGqaSpec(23), "primekv_budget_profile_nest.gguf");
  const auto path = std::filesystem::temp_directory_path() / "primekv_budget_profile_nest.json";
  ASSERT_TRUE(HandProfile().Save(path).ok());
  std::vector<Token> tokens(200);
  std::iota(tokens.begin(), tokens.end(), 3);
  ThreadPool pool(2);
  auto kept = [&](const std::string& spec, double ratio) {
    auto press = MakePress(*ParsePressSpec(spec));
    if (!press.ok()) {
      ADD_FAILURE() << spec << ": " << press.message();
      return std::vector<std::vector<int32_t>>{};
    }
    const Compressor comp(model, std::move(*press));
    std::vector<float> logits(300);
    ForwardWorkspace ws;
    KvCache cache = model.NewCache({KvDType::kF32});
    EXPECT_TRUE(model.Forward(tokens, cache, {}, {logits.data(), 1, 300}, pool, ws).ok());
    EXPECT_TRUE(comp.Compress(cache, ratio, nullptr, pool).ok());
    return HeadPositions(cache);
  };
  const std::string profile = "primekv:profile=" + path.string();
  const std::string nested = profile + ",nest=0.9";
  const auto at05 = kept(nested, 0.5);
  EXPECT_EQ(at05, kept("primekv", 0.5));
  EXPECT_NE(at05, kept(profile, 0.5));  // the plain profile keeps 180, 20, 120, 80
  EXPECT_EQ(kept(nested, 0.9), kept(profile, 0.9));
  // Needs over the uniform share (head (0, 0) needs 0.6 at 0.7): at 0.5 it keeps its 120 of 200,
  // the others (2 - 0.6) / 3 of them, and every head a superset of what it keeps at 0.7.
  const std::string nested07 = profile + ",nest=0.7";
  const auto low = kept(nested07, 0.5);
  const auto need = kept(nested07, 0.7);
  ASSERT_EQ(low.size(), 4u);
  ASSERT_EQ(need.size(), 4u);
  EXPECT_EQ(low[0].size(), 120u);
  EXPECT_EQ(low[1].size(), 93u);
  for (size_t c = 0; c < 4; ++c) {
    EXPECT_TRUE(std::includes(low[c].begin(), low[c].end(), need[c].begin(), need[c].end()))
        << "head " << c;
  }
  const std::pair<std::string, std::string> bad[] = {
      {profile + ",nest=1.5", "nest=1.5 is outside [0.5, 0.9]"},  // the profile's ratios
      {profile + ",nest=x", "nest='x'"},
      {"primekv:nest=0.9", "nest= nests a budget profile: add profile="}};
  for (const auto& [spec, message] : bad) {
    auto p = MakePress(*ParsePressSpec(spec));
    ASSERT_FALSE(p.ok()) << spec;
    EXPECT_NE(p.message().find(message), std::string::npos) << p.message();
  }
  // nest= as read: 0.90 is the press 0.9 is.
  auto p090 = MakePress(*ParsePressSpec(profile + ",nest=0.90"));
  ASSERT_TRUE(p090.ok()) << p090.message();
  EXPECT_NE(p090->resolved.find("nest=0.9,"), std::string::npos) << p090->resolved;
  std::filesystem::remove(path);
}

TEST(BudgetProfile, RefusesAProfileOfAnotherShape) {
  const Model model = WriteLoadAndRemove(SmallGqaSpec(22), "primekv_budget_profile_shape.gguf");
  BudgetProfile other = HandProfile();
  other.n_layers = 1;
  other.fractions.resize(4);
  other.fractions = {0.8, 0.2, 0.15, 0.05};
  const auto path = std::filesystem::temp_directory_path() / "primekv_budget_profile_1l.json";
  ASSERT_TRUE(other.Save(path).ok());
  auto press = MakePress(*ParsePressSpec("keydiff:profile=" + path.string()));
  ASSERT_TRUE(press.ok()) << press.message();
  const Compressor comp(model, std::move(*press));
  ThreadPool pool(1);
  std::vector<Token> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 3);
  std::vector<float> logits(300);
  ForwardWorkspace ws;
  KvCache cache = model.NewCache({KvDType::kF32});
  ASSERT_TRUE(model.Forward(tokens, cache, {}, {logits.data(), 1, 300}, pool, ws).ok());
  const Status s = comp.Compress(cache, 0.5, nullptr, pool);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("1 layers x 2 KV heads, the model has 2 x 2"), std::string::npos)
      << s.message();
  auto both = MakePress(*ParsePressSpec("kvzip:budget=global,profile=" + path.string()));
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.message().find("drop budget="), std::string::npos) << both.message();
  std::filesystem::remove(path);
}

// A FIFO is refused without waiting for a writer; before, the open blocked (the alarm turns a
// hang into a failure instead of a stuck run).
TEST(BudgetProfile, LoadRefusesAFifoAndADirectoryWithoutBlocking) {
  const auto dir = std::filesystem::temp_directory_path() / "primekv_budget_profile_fifo";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto fifo = dir / "profile.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ::alarm(20);
  auto r = BudgetProfile::Load(fifo);
  ::alarm(0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("budget profile '" + fifo.string() + "' is not a regular file"),
            std::string::npos)
      << r.message();
  auto d = BudgetProfile::Load(dir);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.message().find("is a directory"), std::string::npos) << d.message();
  std::filesystem::remove_all(dir);
}

TEST(BudgetProfile, LoadRefusesAFileOverTheSizeLimitUnread) {
  const auto path = std::filesystem::temp_directory_path() / "primekv_budget_profile_big.json";
  {
    std::ofstream out(path);
    out << Text("[[[0.8], [0.2]], [[0.15], [0.05]]]") << std::string(kMaxBudgetProfileBytes, ' ');
  }
  auto r = BudgetProfile::Load(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("is larger than 8388608 bytes"), std::string::npos) << r.message();
  std::filesystem::remove(path);
}

// Save replaces the path itself: a link is refused, its target untouched.
TEST(BudgetProfile, SaveNeverWritesThroughALink) {
  const auto dir = std::filesystem::temp_directory_path() / "primekv_budget_profile_link";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "target") << "keep\n"; }
  std::filesystem::create_symlink("target", dir / "link.json");
  const Status st = HandProfile().Save(dir / "link.json");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("is a symbolic link"), std::string::npos) << st.message();
  std::ifstream in(dir / "target");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "keep");
  std::filesystem::remove_all(dir);
}

// Two models of one shape: a profile that records its model applies to that one only; one
// without the record (an older file) to both; one of another shape to neither. Each is refused
// when the compressor is made, before any prefill.
TEST(BudgetProfile, AppliesOnlyToTheModelItRecords) {
  const Model a = WriteLoadAndRemove(SmallGqaSpec(22), "primekv_budget_profile_id_a.gguf");
  const Model b = WriteLoadAndRemove(SmallGqaSpec(23), "primekv_budget_profile_id_b.gguf");
  ASSERT_EQ(a.Identity().rfind("llama:", 0), 0u) << a.Identity();
  ASSERT_NE(a.Identity(), b.Identity());
  EXPECT_EQ(a.Identity(), WriteLoadAndRemove(SmallGqaSpec(22), "primekv_bp_id_a2.gguf").Identity());
  const auto dir = std::filesystem::temp_directory_path() / "primekv_budget_profile_id";
  std::filesystem::create_directories(dir);
  BudgetProfile measured = HandProfile();
  measured.model = a.Identity();
  ASSERT_TRUE(measured.Save(dir / "a.json").ok());
  ASSERT_TRUE(HandProfile().Save(dir / "old.json").ok());
  BudgetProfile one_layer = HandProfile();
  one_layer.n_layers = 1;
  one_layer.fractions = {0.8, 0.2, 0.15, 0.05};
  ASSERT_TRUE(one_layer.Save(dir / "1l.json").ok());
  auto loaded = BudgetProfile::Load(dir / "a.json");
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  EXPECT_EQ(loaded->model, a.Identity());
  auto check = [&](const Model& m, const std::string& file) {
    const std::vector<std::string> presses{"keydiff:profile=" + (dir / file).string()};
    auto made = MakeCompressors(m, presses);
    return made.ok() ? Status::Ok() : made.status();
  };
  EXPECT_TRUE(check(a, "a.json").ok());
  const Status other = check(b, "a.json");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.message().find("measured on another model (" + a.Identity() +
                                 "), not this one (" + b.Identity() + ")"),
            std::string::npos)
      << other.message();
  EXPECT_TRUE(check(b, "old.json").ok());
  const Status shape = check(a, "1l.json");
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.message().find("1 layers x 2 KV heads, the model has 2 x 2"), std::string::npos)
      << shape.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace primekv
