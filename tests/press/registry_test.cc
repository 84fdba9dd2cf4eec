// The press registry as an input parser: every bad spec is a Status naming the press and the
// parameter, never an exception; lists keep multi-parameter presses whole.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "primekv/press/press.h"

namespace primekv {
namespace {

std::string Error(const std::string& text) {
  auto spec = ParsePressSpec(text);
  if (!spec.ok()) return spec.message();
  auto press = MakePress(*spec);
  return press.ok() ? std::string("OK") : press.message();
}

TEST(PressRegistry, BareAdaKvIsAnErrorNotAnException) {
  EXPECT_NE(Error("adakv").find("needs an inner press"), std::string::npos) << Error("adakv");
  EXPECT_NE(Error("adakv:").find("needs an inner press"), std::string::npos);
  EXPECT_NE(Error("adakv:adakv").find("cannot wrap adakv"), std::string::npos);
  EXPECT_NE(Error("adakv:none").find("cannot wrap 'none'"), std::string::npos);
  PressSpec handmade;  // built by code, without the inner press
  handmade.name = "adakv";
  ASSERT_FALSE(MakePress(handmade).ok());
  EXPECT_EQ(handmade.Text(), "adakv:");
}

TEST(PressRegistry, DeepNestingIsRefusedAtTheSecondLevel) {
  std::string deep;
  for (int i = 0; i < 200000; ++i) deep += "adakv:";
  deep += "snapkv";
  auto spec = ParsePressSpec(deep);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.message().find("cannot wrap adakv"), std::string::npos);
  EXPECT_LT(spec.message().size(), 200u);  // the message does not echo the whole input
}

TEST(PressRegistry, ParametersAreRangedFiniteAndIntegral) {
  struct Case {
    const char* spec;
    const char* want;
  };
  const Case cases[] = {
      {"random:seed=nan", "press random: seed='nan' is not an integer"},
      {"random:seed=-1", "press random: seed=-1 is outside"},
      {"streamingllm:n_sink=2.9", "press streamingllm: n_sink='2.9' is not an integer"},
      {"streamingllm:n_sink=-1", "press streamingllm: n_sink=-1 is outside [0, 16777216]"},
      {"expected_attention:epsilon=nan", "press expected_attention: epsilon='nan' is not a finite"},
      {"expected_attention:epsilon=inf", "is not a finite number"},
      {"expected_attention:future=0", "future=0 is outside [1,"},
      {"expected_attention:vnorm=2", "vnorm=2 is outside [0, 1]"},
      {"lagkv:lag=1e10", "press lagkv: lag='1e10' is not an integer"},
      {"lagkv:lag=10000000000", "press lagkv: lag=10000000000 is outside [2, 16777216]"},
      {"snapkv:kernel=4", "press snapkv: kernel=4 must be odd"},
      {"snapkv:window=0x10", "window='0x10' is not an integer"},
      {"pyramidkv:beta=0.5", "press pyramidkv: beta=0.5 is outside [1, 1e+06]"},
      {"pyramidkv:kernel=4", "press pyramidkv: kernel=4 must be odd"},
      {"pyramidkv:alpha=1", "press pyramidkv: unknown parameter 'alpha'"},
      {"primekv:key=cosine,key=none", "parameter 'key' given twice"},
      {"primekv:key=", "parameter 'key' has no value"},
      {"none:x=1", "press none takes no parameters"},
      {"\x1b[31mred", "bad press name"},
  };
  for (const Case& c : cases) {
    const std::string e = Error(c.spec);
    EXPECT_NE(e.find(c.want), std::string::npos) << c.spec << " -> " << e;
    EXPECT_EQ(e.find('\x1b'), std::string::npos) << "raw control byte echoed: " << e;
  }
}

TEST(PressRegistry, ValidParametersTakeEffect) {
  auto p = MakePress(*ParsePressSpec("pyramidkv:beta=8,window=16,kernel=3"));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->budget.kind, BudgetKind::kPyramid);
  EXPECT_DOUBLE_EQ(p->budget.pyramid_beta, 8);
  EXPECT_EQ(p->budget.pyramid_window, 16);
  EXPECT_EQ(p->scorer->Needs().window_queries, 16);  // the scorer's window follows
  EXPECT_EQ(p->name, "pyramidkv:beta=8,kernel=3,window=16");
  for (const char* ok : {"random:seed=9223372036854775807", "expected_attention:epsilon=0",
                         "lagkv:lag=2", "streamingllm:n_sink=0", "adakv:snapkv:window=8"}) {
    EXPECT_EQ(Error(ok), "OK") << ok;
  }
}

TEST(PressRegistry, ListsKeepMultiParameterPressesWhole) {
  using V = std::vector<std::string>;
  auto semi = SplitPressList("none; primekv:key=cosine,value=norm ;snapkv:window=32,kernel=3");
  ASSERT_TRUE(semi.ok());
  EXPECT_EQ(*semi, (V{"none", "primekv:key=cosine,value=norm", "snapkv:window=32,kernel=3"}));
  auto comma = SplitPressList("none,primekv:key=cosine,value=norm,snapkv:window=32,kernel=3,tova");
  ASSERT_TRUE(comma.ok());
  EXPECT_EQ(*comma,
            (V{"none", "primekv:key=cosine,value=norm", "snapkv:window=32,kernel=3", "tova"}));
  auto old = SplitPressList("none,primekv,snapkv");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(*old, (V{"none", "primekv", "snapkv"}));
  auto ada = SplitPressList("adakv:snapkv:window=8,kernel=3,knorm");
  ASSERT_TRUE(ada.ok());
  EXPECT_EQ(*ada, (V{"adakv:snapkv:window=8,kernel=3", "knorm"}));
  EXPECT_FALSE(SplitPressList("none,value=norm").ok());  // a parameter after a bare name
  EXPECT_FALSE(SplitPressList("none;;snapkv").ok());
  EXPECT_FALSE(SplitPressList("").ok());
  EXPECT_FALSE(SplitPressList("none,").ok());
}

TEST(PressRegistry, TextRoundTrips) {
  for (const char* s : {"primekv:value=norm,key=cosine", "adakv:snapkv:window=32", "none"}) {
    auto a = ParsePressSpec(s);
    ASSERT_TRUE(a.ok()) << s;
    auto b = ParsePressSpec(a->Text());
    ASSERT_TRUE(b.ok()) << a->Text();
    EXPECT_EQ(a->name, b->name);
    EXPECT_EQ(a->params, b->params);
  }
}

// Every input a scorer reads is in its PressNeeds and checked before it scores: kvzip without
// its reconstruction pass (press-scores has none) is an error, not a read through null.
TEST(PressRegistry, MissingInputsAreNamed) {
  ModelConfig c;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  const std::vector<HeadEntries> heads(1);
  LayerInput in(c);
  in.heads = heads;
  const struct {
    const char* press;
    const char* missing;
  } cases[] = {{"kvzip", "reconstruction scores"},
               {"snapkv", "window queries"},
               {"expected_attention", "query statistics"},
               {"primekv", "W_O Gram"}};
  for (const auto& k : cases) {
    auto press = MakePress(*ParsePressSpec(k.press));
    ASSERT_TRUE(press.ok()) << k.press;
    const Status s = CheckLayerInput(press->scorer->Needs(), in, press->name);
    EXPECT_NE(s.message().find(k.missing), std::string::npos) << k.press << ": " << s.message();
  }
  auto knorm = MakePress(*ParsePressSpec("knorm"));
  EXPECT_TRUE(CheckLayerInput(knorm->scorer->Needs(), in, "knorm").ok());
}

}  // namespace
}  // namespace primekv
