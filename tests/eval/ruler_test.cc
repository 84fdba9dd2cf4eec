// RULER-style generators: determinism, lengths within 2% of the target in real (synthetic BPE)
// tokens, and the needles, chains and word counts each task promises.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "eval_test_util.h"
#include "primekv/eval/eval.h"

namespace primekv {
namespace {

using eval_test::CountOccurrences;
using eval_test::Generate;
using eval_test::SyntheticLlama;

struct Needle {
  std::string type, key, value;
  size_t pos;
};

// Every character of s is in `chars` and s has `size` of them (size 0: any non-zero length).
bool AllOf(std::string_view s, std::string_view chars, size_t size = 0) {
  if (s.empty() || (size > 0 && s.size() != size)) return false;
  return s.find_first_not_of(chars) == std::string_view::npos;
}

constexpr std::string_view kLower = "abcdefghijklmnopqrstuvwxyz";
constexpr std::string_view kHex = "0123456789abcdef";

bool IsUuid(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i : {8u, 13u, 18u, 23u}) {
    if (s[i] != '-') return false;
  }
  return AllOf(s.substr(0, 8), kHex) && AllOf(s.substr(9, 4), kHex) && s[14] == '4' &&
         AllOf(s.substr(15, 3), kHex) &&
         std::string_view("89ab").find(s[19]) != std::string_view::npos &&
         AllOf(s.substr(20, 3), kHex) && AllOf(s.substr(24, 12), kHex);
}

bool IsWordKey(std::string_view s) {
  const size_t dash = s.find('-');
  return dash != std::string_view::npos && AllOf(s.substr(0, dash), kLower) &&
         AllOf(s.substr(dash + 1), kLower);
}

// Complete needle sentences "One of the special magic <type> for <key> is: <value>." (a needle cut
// short at the end of a haystack does not count).
std::vector<Needle> ParseNeedles(const std::string& context) {
  static constexpr std::string_view kFrame = "One of the special magic ";
  std::vector<Needle> out;
  for (size_t pos = context.find(kFrame); pos != std::string::npos;
       pos = context.find(kFrame, pos + 1)) {
    const std::string_view rest = std::string_view(context).substr(pos + kFrame.size());
    const size_t for_pos = rest.find(" for ");
    const size_t is_pos = rest.find(" is: ");
    if (for_pos == std::string_view::npos || is_pos == std::string_view::npos || is_pos < for_pos) {
      continue;
    }
    const std::string_view type = rest.substr(0, for_pos);
    const std::string_view key = rest.substr(for_pos + 5, is_pos - for_pos - 5);
    const std::string_view after = rest.substr(is_pos + 5);
    const size_t dot = after.find('.');
    if (dot == std::string_view::npos) continue;
    const std::string_view value = after.substr(0, dot);
    const bool type_ok = type == "numbers" || type == "uuids" || type == "words";
    const bool key_ok = IsWordKey(key) || IsUuid(key);
    const bool value_ok = AllOf(value, "0123456789", 7) || IsUuid(value);
    if (type_ok && key_ok && value_ok) {
      out.push_back({std::string(type), std::string(key), std::string(value), pos});
    }
  }
  return out;
}

TEST(Tasks, ListAndDefaults) {
  const std::vector<std::string> ruler = {"niah_single_1",
                                          "niah_single_2",
                                          "niah_single_3",
                                          "niah_multikey_1",
                                          "niah_multikey_2",
                                          "niah_multikey_3",
                                          "niah_multivalue",
                                          "niah_multiquery",
                                          "vt",
                                          "cwe",
                                          "fwe"};
  EXPECT_EQ(RulerTasks(), ruler);
  std::vector<std::string> all = ruler;
  all.push_back("multiturn");
  EXPECT_EQ(ListTasks(), all);
  EXPECT_EQ(DefaultMaxNewTokens("niah_multiquery"), 128);
  EXPECT_EQ(DefaultMaxNewTokens("vt"), 30);
  EXPECT_EQ(DefaultMaxNewTokens("cwe"), 120);
  EXPECT_EQ(DefaultMaxNewTokens("fwe"), 50);
  EXPECT_EQ(DefaultMaxNewTokens("qa_1"), std::nullopt);
  EXPECT_FALSE(GenerateTask("qa_1", TaskOptions{}).ok());
  EXPECT_FALSE(GenerateTask("jsonl:", TaskOptions{}).ok());
}

TEST(Tasks, DeterministicBySeed) {
  for (const std::string& task : ListTasks()) {
    TaskOptions o;
    o.samples = 3;
    o.seed = 7;
    const auto a = Generate(task, o);
    const auto b = Generate(task, o);
    ASSERT_EQ(a.size(), 3u) << task;
    EXPECT_TRUE(eval_test::SameSamples(a, b)) << task;
    o.seed = 8;
    const auto c = Generate(task, o);
    ASSERT_EQ(c.size(), 3u) << task;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NE(a[i].context, c[i].context) << task << " sample " << i;
    }
    // Samples of one run differ from each other too.
    EXPECT_NE(a[0].context, a[1].context) << task;
  }
}

TEST(Tasks, DeterministicWithTokenizer) {
  TaskOptions o;
  o.tokenizer = &SyntheticLlama();
  o.samples = 2;
  for (const char* task : {"niah_single_2", "niah_multikey_3", "cwe", "multiturn"}) {
    EXPECT_TRUE(eval_test::SameSamples(Generate(task, o), Generate(task, o))) << task;
  }
}

class LengthTest : public testing::TestWithParam<int> {};

TEST_P(LengthTest, WithinTwoPercentOfTargetInTokens) {
  const Tokenizer& tok = SyntheticLlama();
  TaskOptions o;
  o.tokenizer = &tok;
  o.samples = 2;
  o.target_tokens = GetParam();
  for (const std::string& task : ListTasks()) {
    for (const EvalSample& s : Generate(task, o)) {
      const int total = eval_test::ConversationTokens(s, tok);
      EXPECT_EQ(total, CountSampleTokens(s, &tok)) << task;
      EXPECT_LE(total, o.target_tokens) << task;
      EXPECT_GE(total, 0.98 * o.target_tokens) << task;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, LengthTest, testing::Values(1024, 2048, 4096));

TEST(Lengths, ByteLevelTokenizer) {
  const Tokenizer& tok = eval_test::SyntheticGpt2();
  TaskOptions o;
  o.tokenizer = &tok;
  o.samples = 1;
  o.target_tokens = 2048;
  for (const std::string& task : ListTasks()) {
    for (const EvalSample& s : Generate(task, o)) {
      const int total = eval_test::ConversationTokens(s, tok);
      EXPECT_LE(total, 2048) << task;
      EXPECT_GE(total, 0.98 * 2048) << task;
    }
  }
}

TEST(Lengths, WordsWithoutTokenizerAndReservedTokens) {
  TaskOptions o;
  o.samples = 1;
  o.target_tokens = 2048;
  for (const std::string& task : ListTasks()) {
    for (const EvalSample& s : Generate(task, o)) {
      const int total = CountSampleTokens(s, nullptr);
      EXPECT_LE(total, 2048) << task;
      EXPECT_GE(total, 0.98 * 2048) << task;
    }
  }
  o.tokenizer = &SyntheticLlama();
  o.reserved_tokens = 100;
  for (const EvalSample& s : Generate("niah_single_2", o)) {
    EXPECT_LE(CountSampleTokens(s, o.tokenizer), 1948);
    EXPECT_GE(CountSampleTokens(s, o.tokenizer), 0.98 * 1948);
  }
  o.max_new_tokens = 7;
  for (const EvalSample& s : Generate("vt", o)) EXPECT_EQ(s.turns[0].max_new_tokens, 7);
}

TEST(Lengths, TooSmallTargetIsAnError) {
  TaskOptions o;
  o.target_tokens = 40;
  const auto r = GenerateTask("niah_single_1", o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("too small"), std::string::npos) << r.message();
}

TaskOptions NiahOptions() {
  TaskOptions o;
  o.tokenizer = &SyntheticLlama();
  o.samples = 4;
  o.target_tokens = 2048;
  return o;
}

// What every NIAH task promises: each answer once in the context, in a needle whose key is
// queried; every needle of a queried key is an answer.
void CheckNiahCommon(const std::string& task, const EvalSample& s) {
  ASSERT_EQ(s.turns.size(), 1u);
  const EvalTurn& turn = s.turns[0];
  EXPECT_EQ(s.metric, "string_match_all");
  EXPECT_EQ(turn.max_new_tokens, 128);
  const std::vector<Needle> needles = ParseNeedles(s.context);
  std::vector<std::string> queried_values;
  for (const Needle& n : needles) {
    if (turn.question.find(" " + n.key + " ") != std::string::npos ||
        turn.question.find(" " + n.key + ",") != std::string::npos) {
      queried_values.push_back(n.value);
    }
  }
  std::vector<std::string> answers = turn.answers;
  std::sort(answers.begin(), answers.end());
  std::sort(queried_values.begin(), queried_values.end());
  EXPECT_EQ(queried_values, answers) << task;
  for (const std::string& a : turn.answers) {
    EXPECT_EQ(CountOccurrences(s.context, a), 1) << task << " answer " << a;
  }
  std::set<std::string> values;
  for (const Needle& n : needles) values.insert(n.value);
  EXPECT_EQ(values.size(), needles.size()) << task << ": needle values must all differ";
}

TEST(Niah, SingleNeedleTasks) {
  for (const char* task : {"niah_single_1", "niah_single_2", "niah_single_3"}) {
    for (const EvalSample& s : Generate(task, NiahOptions())) {
      CheckNiahCommon(task, s);
      const std::vector<Needle> needles = ParseNeedles(s.context);
      ASSERT_EQ(needles.size(), 1u) << task;
      const Needle& n = needles[0];
      EXPECT_EQ(s.turns[0].answers, std::vector<std::string>{n.value});
      EXPECT_EQ(CountOccurrences(s.context, n.key), 1) << task;
      EXPECT_NE(s.turns[0].question.find("special magic " + n.type.substr(0, n.type.size() - 1) +
                                         " for " + n.key),
                std::string::npos);
      if (std::string(task) == "niah_single_3") {
        EXPECT_TRUE(IsUuid(n.value)) << n.value;
      } else {
        EXPECT_EQ(n.value.size(), 7u);
        EXPECT_GE(n.value[0], '1');
      }
      // The haystacks hold no digits: only the needle does.
      int digits = 0;
      for (char c : s.context) digits += std::isdigit(static_cast<unsigned char>(c)) ? 1 : 0;
      const int value_digits =
          static_cast<int>(std::count_if(n.value.begin(), n.value.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
          }));
      EXPECT_EQ(digits, value_digits) << task;
    }
  }
}

TEST(Niah, NoiseHaystackIsTheFillerParagraph) {
  for (const EvalSample& s : Generate("niah_single_1", NiahOptions())) {
    const std::vector<Needle> needles = ParseNeedles(s.context);
    ASSERT_EQ(needles.size(), 1u);
    std::string rest = s.context;
    rest.erase(needles[0].pos, rest.find('\n', needles[0].pos) - needles[0].pos + 1);
    EXPECT_GT(CountOccurrences(rest, "The meadow is wide. The clouds are white."), 10);
  }
}

TEST(Niah, MultiKeyEssayHasThreeDistractors) {
  for (const EvalSample& s : Generate("niah_multikey_1", NiahOptions())) {
    CheckNiahCommon("niah_multikey_1", s);
    const std::vector<Needle> needles = ParseNeedles(s.context);
    ASSERT_EQ(needles.size(), 4u);
    std::set<std::string> keys;
    int queried = 0;
    for (const Needle& n : needles) {
      keys.insert(n.key);
      const bool asked = s.turns[0].question.find(n.key) != std::string::npos;
      queried += asked ? 1 : 0;
      if (!asked) {
        EXPECT_NE(n.value, s.turns[0].answers[0]);
      }
    }
    EXPECT_EQ(keys.size(), 4u);
    EXPECT_EQ(queried, 1);
    EXPECT_EQ(s.turns[0].answers.size(), 1u);
  }
}

TEST(Niah, NeedleHaystacksAreDistractorNeedles) {
  for (const char* task : {"niah_multikey_2", "niah_multikey_3"}) {
    for (const EvalSample& s : Generate(task, NiahOptions())) {
      CheckNiahCommon(task, s);
      const std::vector<Needle> needles = ParseNeedles(s.context);
      EXPECT_GT(needles.size(), 10u) << task;
      int with_key = 0;
      for (const Needle& n : needles) {
        const bool asked = s.turns[0].question.find(n.key) != std::string::npos;
        with_key += asked ? 1 : 0;
        if (!asked) {
          EXPECT_NE(n.value, s.turns[0].answers[0]) << task;
        }
        if (std::string(task) == "niah_multikey_3") {
          EXPECT_TRUE(IsUuid(n.key) && IsUuid(n.value)) << n.key << " " << n.value;
        }
      }
      EXPECT_EQ(with_key, 1) << task << ": distractor keys differ from the queried key";
    }
  }
}

TEST(Niah, MultiValueHasFourValuesForOneKey) {
  for (const EvalSample& s : Generate("niah_multivalue", NiahOptions())) {
    CheckNiahCommon("niah_multivalue", s);
    const std::vector<Needle> needles = ParseNeedles(s.context);
    ASSERT_EQ(needles.size(), 4u);
    for (const Needle& n : needles) EXPECT_EQ(n.key, needles[0].key);
    EXPECT_EQ(s.turns[0].answers.size(), 4u);
    EXPECT_NE(
        s.turns[0].question.find("What are all the special magic numbers for " + needles[0].key),
        std::string::npos);
  }
}

TEST(Niah, MultiQueryAsksFourKeys) {
  for (const EvalSample& s : Generate("niah_multiquery", NiahOptions())) {
    CheckNiahCommon("niah_multiquery", s);
    const std::vector<Needle> needles = ParseNeedles(s.context);
    ASSERT_EQ(needles.size(), 4u);
    std::set<std::string> keys;
    for (const Needle& n : needles) {
      keys.insert(n.key);
      EXPECT_NE(s.turns[0].question.find(n.key), std::string::npos);
    }
    EXPECT_EQ(keys.size(), 4u);
    EXPECT_EQ(s.turns[0].answers.size(), 4u);
    EXPECT_NE(s.turns[0].question.find(", and "), std::string::npos);
  }
}

TEST(Niah, DepthsSpreadOverTheContext) {
  TaskOptions o;
  o.samples = 30;
  double lo = 1, hi = 0;
  for (const EvalSample& s : Generate("niah_single_2", o)) {
    const std::vector<Needle> needles = ParseNeedles(s.context);
    ASSERT_EQ(needles.size(), 1u);
    const double depth =
        static_cast<double>(needles[0].pos) / static_cast<double>(s.context.size());
    lo = std::min(lo, depth);
    hi = std::max(hi, depth);
  }
  EXPECT_LT(lo, 0.2);
  EXPECT_GT(hi, 0.8);
}

TEST(VariableTracking, ChainInOrder) {
  TaskOptions o = NiahOptions();
  for (const EvalSample& s : Generate("vt", o)) {
    const EvalTurn& turn = s.turns[0];
    ASSERT_EQ(turn.answers.size(), 5u);
    EXPECT_EQ(turn.max_new_tokens, 30);
    std::set<std::string> names(turn.answers.begin(), turn.answers.end());
    EXPECT_EQ(names.size(), 5u);
    for (const std::string& n : turn.answers) {
      EXPECT_TRUE(AllOf(n, "ABCDEFGHIJKLMNOPQRSTUVWXYZ", 5)) << n;
    }
    const size_t at = turn.question.find("value ");
    ASSERT_NE(at, std::string::npos);
    const std::string value = turn.question.substr(at + 6, 5);
    EXPECT_TRUE(AllOf(value, "0123456789", 5)) << value;
    EXPECT_EQ(turn.question.substr(at + 11, 1), "?");
    // The real task follows the solved example; its chain comes in order, one statement a line.
    const size_t start = s.context.rfind("The text below hides a chain");
    ASSERT_NE(start, std::string::npos);
    ASSERT_GT(start, 0u) << "the one-shot example comes first";
    size_t pos = s.context.find("\nVAR " + turn.answers[0] + " = " + value + "\n", start);
    ASSERT_NE(pos, std::string::npos);
    for (size_t i = 1; i < 5; ++i) {
      const size_t next = s.context.find(
          "\nVAR " + turn.answers[i] + " = VAR " + turn.answers[i - 1] + "\n", start);
      ASSERT_NE(next, std::string::npos) << i;
      EXPECT_GT(next, pos);
      pos = next;
    }
    // Each name is assigned once and read by the next statement (the last is only assigned).
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(CountOccurrences(s.context, turn.answers[i]), i < 4 ? 2 : 1) << turn.answers[i];
    }
  }
}

// Word counts of the last numbered list in the context ("1. w 2. w ..."), checking the numbering.
std::map<std::string, int> ListCounts(const std::string& context) {
  const size_t begin = context.rfind("\n1. ");
  EXPECT_NE(begin, std::string::npos);
  const std::string line = context.substr(begin + 1, context.find('\n', begin + 1) - begin - 1);
  std::map<std::string, int> counts;
  std::istringstream in(line);
  int expected = 1;
  for (std::string number, word; in >> number >> word; ++expected) {
    EXPECT_EQ(number, std::to_string(expected) + ".");
    EXPECT_TRUE(AllOf(word, kLower)) << word;
    ++counts[word];
  }
  EXPECT_GT(expected, 1);
  return counts;
}

void CheckCwe(const EvalSample& s, int common_repeats, int uncommon_repeats) {
  const EvalTurn& turn = s.turns[0];
  ASSERT_EQ(turn.answers.size(), 10u);
  EXPECT_EQ(turn.max_new_tokens, 120);
  const std::map<std::string, int> counts = ListCounts(s.context);
  EXPECT_GT(counts.size(), 10u);
  const std::set<std::string> common(turn.answers.begin(), turn.answers.end());
  EXPECT_EQ(common.size(), 10u);
  for (const auto& [word, count] : counts) {
    EXPECT_EQ(count, common.count(word) > 0 ? common_repeats : uncommon_repeats) << word;
  }
  for (const std::string& w : common) EXPECT_EQ(counts.count(w), 1u) << w;
}

TEST(CommonWords, RepeatsPerContextLength) {
  TaskOptions o;
  o.samples = 2;
  o.tokenizer = &SyntheticLlama();
  o.target_tokens = 1024;  // below 2K: no example, 6 and 1 repeats
  for (const EvalSample& s : Generate("cwe", o)) {
    EXPECT_EQ(CountOccurrences(s.context, "Question:"), 0);
    CheckCwe(s, 6, 1);
  }
  o.target_tokens = 3000;  // RULER's short setting, with a one-shot example
  for (const EvalSample& s : Generate("cwe", o)) {
    EXPECT_EQ(CountOccurrences(s.context, "Question:"), 1);
    CheckCwe(s, 6, 1);
  }
  o.tokenizer = nullptr;
  o.target_tokens = 8192;  // RULER's long setting
  for (const EvalSample& s : Generate("cwe", o)) CheckCwe(s, 30, 3);
}

TEST(FrequentWords, AnswersAreTheThreeMostFrequentWords) {
  TaskOptions o = NiahOptions();
  for (const EvalSample& s : Generate("fwe", o)) {
    const EvalTurn& turn = s.turns[0];
    ASSERT_EQ(turn.answers.size(), 3u);
    EXPECT_EQ(turn.max_new_tokens, 50);
    const size_t begin = s.context.find('\n') + 1;
    const std::string text = s.context.substr(begin, s.context.find('\n', begin) - begin);
    std::map<std::string, int> counts;
    std::istringstream in(text);
    for (std::string w; in >> w;) ++counts[w];
    std::vector<std::pair<int, std::string>> ranked;
    for (const auto& [w, c] : counts) {
      EXPECT_TRUE(w == "..." || AllOf(w, kLower, 6)) << w;
      ranked.emplace_back(c, w);
    }
    std::sort(ranked.rbegin(), ranked.rend());
    ASSERT_GE(ranked.size(), 5u);
    EXPECT_EQ(ranked[0].second, "...");
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(ranked[i + 1].second, turn.answers[i]);
      EXPECT_GT(ranked[i + 1].first, ranked[i + 2].first);
    }
  }
}

}  // namespace
}  // namespace primekv
