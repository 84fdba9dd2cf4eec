// Press::resolved: every press names itself with all its parameters, defaults filled in, so an
// evaluation folder can tell whether a press name still means the method its rows were made
// with (src/eval/run_config.cc refuses a resumed run otherwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "press/scorer_util.h"
#include "primekv/press/press.h"

namespace primekv {
namespace {

std::string Resolve(const std::string& text, std::span<const PressEntry> table = PressTable()) {
  auto spec = ParsePressSpec(text);
  if (!spec.ok()) return "parse error: " + spec.message();
  auto press = MakePress(*spec, table);
  return press.ok() ? press->resolved : "error: " + press.message();
}

TEST(PressResolved, DefaultsAreSpelledOut) {
  // Presses whose defaults are the published ones (each value read from its scorer's file).
  EXPECT_EQ(Resolve("none"), "none");
  EXPECT_EQ(Resolve("keydiff"), "keydiff");
  EXPECT_EQ(Resolve("snapkv"), "snapkv:kernel=5,window=64");
  EXPECT_EQ(Resolve("snapkv:window=32"), "snapkv:kernel=5,window=32");
  EXPECT_EQ(Resolve("pyramidkv"), "pyramidkv:beta=20,kernel=5,window=64");
  EXPECT_EQ(Resolve("pyramidkv:window=16,kernel=3"), "pyramidkv:beta=20,kernel=3,window=16");
  EXPECT_EQ(Resolve("streaming_llm"), "streamingllm:n_sink=4");
  EXPECT_EQ(Resolve("random"), "random:seed=42");
  EXPECT_EQ(Resolve("lagkv"), "lagkv:lag=128,n_sink=4");
  EXPECT_EQ(Resolve("expected_attention"),
            "expected_attention:epsilon=0.01,future=512,n_sink=4,vnorm=1");
  EXPECT_EQ(Resolve("adakv:snapkv:window=32"), "adakv:snapkv:kernel=5,window=32");
  EXPECT_EQ(Resolve("adakv:keydiff"), "adakv:keydiff");
}

TEST(PressResolved, PrimeKvNamesItsDefaultKeyAndEqualsTheExplicitSpelling) {
  // The default key changes with the method's development; whatever it is, the bare name and
  // the name with that key spelled out are one method, and any other key is another.
  const std::string bare = Resolve("primekv");
  const std::string head = "primekv:combine=logit,key=", tail = ",rounds=one,value=wo_centered";
  ASSERT_EQ(bare.rfind(head, 0), 0u) << bare;
  ASSERT_GT(bare.size(), head.size() + tail.size()) << bare;
  ASSERT_EQ(bare.substr(bare.size() - tail.size()), tail) << bare;
  const std::string key = bare.substr(head.size(), bare.size() - head.size() - tail.size());
  EXPECT_EQ(Resolve("primekv:key=" + key), bare);
  EXPECT_EQ(Resolve("primekv:value=wo_centered,rounds=one,key=" + key + ",combine=logit"), bare);
  EXPECT_EQ(Resolve("adakv:primekv"), "adakv:" + bare);
  EXPECT_EQ(Resolve("adakv:primekv:key=" + key), "adakv:" + bare);
  for (const char* other : {"leverage", "cosine", "self", "centerednext", "none"}) {
    if (other == key) continue;
    EXPECT_EQ(Resolve(std::string("primekv:key=") + other), head + other + tail);
    EXPECT_NE(Resolve(std::string("primekv:key=") + other), bare);
  }
  EXPECT_EQ(Resolve("primekv:key=cosine,value=none"),
            "primekv:combine=logit,key=cosine,rounds=one,value=none");
  // A parameter no reader records (the budget) stays in the text as given.
  EXPECT_EQ(Resolve("primekv:budget=global"), "primekv:budget=global," + bare.substr(8));
}

TEST(PressResolved, NumbersAreCanonical) {
  EXPECT_EQ(Resolve("snapkv:window=032"), Resolve("snapkv:window=32"));
  EXPECT_EQ(Resolve("expected_attention:epsilon=0.010"), Resolve("expected_attention"));
  EXPECT_EQ(Resolve("expected_attention:epsilon=1e-2"), Resolve("expected_attention"));
  EXPECT_EQ(Resolve("pyramidkv:beta=20.0"), Resolve("pyramidkv"));
  EXPECT_EQ(Resolve("pyramidkv:beta=2.5"), "pyramidkv:beta=2.5,kernel=5,window=64");
  EXPECT_NE(Resolve("expected_attention:epsilon=0.011"), Resolve("expected_attention"));
}

// list-presses' query-free column, against what each method reads by its paper: the query-free
// ones score keys and values alone; SnapKV, PyramidKV, TOVA, ExpectedAttention and the oracle
// read queries, KVzip a second pass over the context. The AdaKV row wraps another press and is
// as query-free as that press (adakv:snapkv reads queries, adakv:primekv does not).
TEST(PressResolved, QueryFreeColumnMatchesTheMethods) {
  const std::vector<std::string> query_free = {"none",   "primekv", "keydiff", "knorm",
                                               "random", "lagkv",   "curdkv",  "streamingllm"};
  for (const PressInfo& info : ListPresses()) {
    if (info.wraps_press) {
      EXPECT_EQ(info.name, "adakv:<press>");
      EXPECT_FALSE(info.query_free);
      continue;
    }
    const bool expected =
        std::find(query_free.begin(), query_free.end(), info.name) != query_free.end();
    EXPECT_EQ(info.query_free, expected) << info.name;
  }
  EXPECT_FALSE(MakePress(*ParsePressSpec("adakv:snapkv"))->query_free);
  EXPECT_TRUE(MakePress(*ParsePressSpec("adakv:primekv"))->query_free);
}

TEST(PressResolved, EveryRegistryPressResolvesToASpecOfItself) {
  // The resolved text is itself a press spec, and resolving it again changes nothing.
  std::vector<std::string> specs = {"adakv:primekv", "adakv:snapkv:window=16",
                                    "primekv:budget=global", "pyramidkv:beta=8"};
  for (const PressInfo& info : ListPresses()) {
    if (info.name.find('<') == std::string::npos) specs.push_back(info.name);
  }
  for (const std::string& s : specs) {
    const std::string r = Resolve(s);
    ASSERT_EQ(r.find("error"), std::string::npos) << s << " -> " << r;
    EXPECT_EQ(Resolve(r), r) << s;
    auto a = MakePress(*ParsePressSpec(s));
    auto b = MakePress(*ParsePressSpec(r));
    ASSERT_TRUE(a.ok() && b.ok()) << s;
    EXPECT_EQ(a->budget.kind, b->budget.kind) << s;
    EXPECT_EQ(a->budget.pyramid_window, b->budget.pyramid_window) << s;
    EXPECT_EQ(a->budget.pyramid_beta, b->budget.pyramid_beta) << s;
    EXPECT_EQ(a->query_free, b->query_free) << s;
  }
}

// A throwaway press whose default is a template argument: the same table row with another
// default is what a changed default in a scorer's file looks like.
template <int kDefaultSinks>
class SinksScorer : public press_internal::HeadScorer {
 public:
  explicit SinksScorer(press_internal::ParamReader& r)
      : sinks_(r.Integer("sinks", kDefaultSinks, 0, 100)),
        mode_(r.Text("mode", "plain")),
        scale_(r.Real("scale", 0.5, 0, 10)) {}
  void ScoreHead(const LayerInput&, int, std::vector<float>& s) const override {
    press_internal::ProtectFirst(s, sinks_);
  }

 private:
  int sinks_;
  std::string mode_;
  double scale_;
};

template <int kDefaultSinks>
std::vector<PressEntry> TableWithSinks() {
  std::vector<PressEntry> t(PressTable().begin(), PressTable().end());
  t.push_back({{"sinks", "test press", "here", true},
               [](const PressParams& p, const std::string& press) {
                 return press_internal::MakeScorer<SinksScorer<kDefaultSinks>>(p, press);
               },
               BudgetKind::kUniform,
               {}});
  return t;
}

TEST(PressResolved, AChangedDefaultChangesTheResolvedText) {
  const auto before = TableWithSinks<4>(), after = TableWithSinks<8>();
  EXPECT_EQ(Resolve("sinks", before), "sinks:mode=plain,scale=0.5,sinks=4");
  EXPECT_EQ(Resolve("sinks", after), "sinks:mode=plain,scale=0.5,sinks=8");
  EXPECT_EQ(Resolve("adakv:sinks", before), "adakv:sinks:mode=plain,scale=0.5,sinks=4");
  EXPECT_EQ(Resolve("adakv:sinks", after), "adakv:sinks:mode=plain,scale=0.5,sinks=8");
  // Spelled out, the parameter means the same under either default.
  EXPECT_EQ(Resolve("sinks:sinks=4", before), Resolve("sinks:sinks=4", after));
  EXPECT_EQ(Resolve("sinks:sinks=4,mode=x", after), "sinks:mode=x,scale=0.5,sinks=4");
}

TEST(PressResolved, ParamReaderRecordsEffectiveValues) {
  const PressParams given = {{"n", "007"}, {"x", "2.50"}, {"w", "b"}};
  press_internal::ParamReader r(given, "test");
  EXPECT_EQ(r.Integer("n", 1, 0, 10), 7);
  EXPECT_EQ(r.Integer64("m", 3, 0, 10), 3);
  EXPECT_DOUBLE_EQ(r.Real("x", 1.0, 0, 10), 2.5);
  EXPECT_DOUBLE_EQ(r.Real("y", 1e-3, 0, 10), 1e-3);
  EXPECT_EQ(r.Text("t", "fallback"), "fallback");
  constexpr std::pair<std::string_view, int> kWords[] = {{"a", 1}, {"b", 2}};
  EXPECT_EQ(r.Choice<int>("w", "a", kWords), 2);
  EXPECT_EQ(r.Choice<int>("v", "a", kWords), 1);
  r.Defer("z");
  EXPECT_TRUE(r.Finish().ok());
  const PressParams want = {{"m", "3"}, {"n", "7"},   {"t", "fallback"}, {"v", "a"},
                            {"w", "b"}, {"x", "2.5"}, {"y", "0.001"}};
  EXPECT_EQ(r.Resolved(), want);
}

}  // namespace
}  // namespace primekv
