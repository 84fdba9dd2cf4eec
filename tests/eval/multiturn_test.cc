// The multi-turn query-drift task: independent facts at spread-out depths, one turn each.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "eval_test_util.h"
#include "primekv/eval/eval.h"

namespace primekv {
namespace {

using eval_test::CountOccurrences;
using eval_test::Generate;

TEST(MultiTurn, OneTurnPerIndependentFact) {
  TaskOptions o;
  o.tokenizer = &eval_test::SyntheticLlama();
  o.samples = 4;
  o.target_tokens = 2048;
  for (const EvalSample& s : Generate("multiturn", o)) {
    ASSERT_EQ(s.turns.size(), 4u);
    EXPECT_EQ(s.metric, "string_match_all");
    std::set<std::string> keys, values;
    for (const EvalTurn& t : s.turns) {
      ASSERT_EQ(t.answers.size(), 1u);
      EXPECT_EQ(t.max_new_tokens, 64);
      const std::string& value = t.answers[0];
      EXPECT_EQ(CountOccurrences(s.context, value), 1) << value;
      // The question names the fact's key; the key's needle holds the value.
      const size_t for_pos = t.question.find(" for ");
      const size_t that_pos = t.question.find(" that the text");
      ASSERT_NE(for_pos, std::string::npos);
      ASSERT_NE(that_pos, std::string::npos);
      const std::string key = t.question.substr(for_pos + 5, that_pos - for_pos - 5);
      EXPECT_EQ(CountOccurrences(s.context, key), 1) << key;
      EXPECT_NE(s.context.find(" for " + key + " is: " + value + "."), std::string::npos);
      EXPECT_NE(t.answer_prefix.find(key), std::string::npos);
      keys.insert(key);
      values.insert(value);
    }
    EXPECT_EQ(keys.size(), 4u);
    EXPECT_EQ(values.size(), 4u);
  }
}

TEST(MultiTurn, FactsSpreadOverTheContextInShuffledOrder) {
  TaskOptions o;
  o.tokenizer = &eval_test::SyntheticLlama();
  o.samples = 8;
  o.target_tokens = 4096;
  int out_of_order = 0;
  for (const EvalSample& s : Generate("multiturn", o)) {
    std::vector<double> depths;
    for (const EvalTurn& t : s.turns) {
      depths.push_back(static_cast<double>(s.context.find(t.answers[0])) /
                       static_cast<double>(s.context.size()));
    }
    out_of_order += std::is_sorted(depths.begin(), depths.end()) ? 0 : 1;
    // Each fact sits in its own quarter of the context.
    std::set<int> quarters;
    for (double d : depths) quarters.insert(static_cast<int>(d * 4));
    EXPECT_EQ(quarters.size(), 4u);
  }
  EXPECT_GT(out_of_order, 0) << "turn order should not always follow depth order";
}

TEST(MultiTurn, FactCountAndLength) {
  TaskOptions o;
  o.tokenizer = &eval_test::SyntheticLlama();
  o.samples = 2;
  o.multiturn_facts = 6;
  o.target_tokens = 3000;
  for (const EvalSample& s : Generate("multiturn", o)) {
    EXPECT_EQ(s.turns.size(), 6u);
    const int total = eval_test::ConversationTokens(s, *o.tokenizer);
    EXPECT_LE(total, 3000);
    EXPECT_GE(total, 0.98 * 3000);
  }
  o.multiturn_facts = 0;
  EXPECT_FALSE(GenerateTask("multiturn", o).ok());
}

}  // namespace
}  // namespace primekv
