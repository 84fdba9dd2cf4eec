// Every metric against values worked out by hand on small fixtures (the comments show the
// arithmetic), including the reference scorers' edge cases and quirks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "primekv/eval/eval.h"

namespace primekv {
namespace {

using Strings = std::vector<std::string>;

TEST(StringMatchAll, FractionOfReferencesFound) {
  EXPECT_DOUBLE_EQ(StringMatchAll("The numbers are 1234567 and 7654321.", {"1234567", "7654321"}),
                   1.0);
  EXPECT_DOUBLE_EQ(StringMatchAll("The numbers are 1234567.", {"1234567", "7654321"}), 0.5);
  EXPECT_DOUBLE_EQ(StringMatchAll("", {"1234567"}), 0.0);
  EXPECT_DOUBLE_EQ(StringMatchAll("anything", {}), 0.0);
}

TEST(StringMatchAll, CaseInsensitiveAndControlCharactersDeleted) {
  EXPECT_DOUBLE_EQ(StringMatchAll("Keys: QUIET-River", {"quiet-river"}), 1.0);
  // "12\n34" loses its newline before matching, as kvpress does.
  EXPECT_DOUBLE_EQ(StringMatchAll("  12\n34\t ", {"1234"}), 1.0);
  EXPECT_DOUBLE_EQ(StringMatchAll("ABCDE FGHIJ", {"abcde", "fghij", "klmno"}), 2.0 / 3.0);
}

TEST(StringMatchPart, AnyReference) {
  EXPECT_DOUBLE_EQ(StringMatchPart("The answer is Paris.", {"london", "paris"}), 1.0);
  EXPECT_DOUBLE_EQ(StringMatchPart("Rome", {"london", "paris"}), 0.0);
  EXPECT_DOUBLE_EQ(StringMatchPart("", {"paris"}), 0.0);
  EXPECT_DOUBLE_EQ(StringMatchPart("paris", {}), 0.0);
}

TEST(QaF1, TokenOverlapAfterNormalization) {
  // pred -> [cat sat on mat], gt -> [cat on mat]: common 3, P 3/4, R 1, F1 = 1.5/1.75.
  EXPECT_NEAR(QaF1("The cat sat on the mat", {"a cat on a mat"}), 1.5 / 1.75, 1e-12);
  // Punctuation goes: "U.S.A." -> "usa".
  EXPECT_DOUBLE_EQ(QaF1("U.S.A.", {"USA"}), 1.0);
  // Repeated tokens count once per match: [dog dog dog] vs [dog]: P 1/3, R 1, F1 0.5.
  EXPECT_DOUBLE_EQ(QaF1("the the dog dog dog", {"dog"}), 0.5);
  // Articles go only as whole words: "theory" stays.
  EXPECT_DOUBLE_EQ(QaF1("theory an", {"Theory"}), 1.0);
  EXPECT_DOUBLE_EQ(QaF1("", {"dog"}), 0.0);
  EXPECT_DOUBLE_EQ(QaF1("the", {"a"}), 0.0);  // both normalize to nothing: no overlap
}

TEST(QaF1, BestReference) {
  // vs "Obama": [barack obama] vs [obama]: P 1/2, R 1, F1 2/3; vs "George Bush": 0.
  EXPECT_NEAR(QaF1("Barack Obama", {"George Bush", "Obama"}), 2.0 / 3.0, 1e-12);
}

TEST(RougeL, SingleSentence) {
  // ref unique {the cat is on mat} = 5, hyp unique {the cat sat on mat} = 5, LCS words
  // {the cat on mat} = 4: P = R = 0.8, F = 2 * 0.64 / (1.6 + 1e-8).
  EXPECT_NEAR(RougeL("the cat sat on the mat", {"the cat is on the mat"}), 1.28 / (1.6 + 1e-8),
              1e-12);
}

TEST(RougeL, SummaryLevelUnionLcs) {
  // The ROUGE note's example: LCS(r, c1) = w1 w2, LCS(r, c2) = w1 w3 w5, union 4 words;
  // m = 5, n = 8 unique hypothesis words: R 0.8, P 0.5, F = 0.8 / (1.3 + 1e-8).
  EXPECT_NEAR(RougeL("w1 w2 w6 w7 w8. w1 w3 w8 w9 w5", {"w1 w2 w3 w4 w5"}), 0.8 / (1.3 + 1e-8),
              1e-12);
  // The table walk prefers moving along the hypothesis on ties: LCS("a b", "b a") = {b}, and
  // with the second sentence "a" the union is {a b}: P = R = 1.
  EXPECT_NEAR(RougeL("b a. a", {"a b"}), 2.0 / (2.0 + 1e-8), 1e-12);
}

TEST(RougeL, EmptyAndBestReference) {
  EXPECT_DOUBLE_EQ(RougeL("", {"a b"}), 0.0);
  EXPECT_DOUBLE_EQ(RougeL("...", {"a b"}), 0.0);  // only empty pieces: no sentence
  EXPECT_DOUBLE_EQ(RougeL("a b", {""}), 0.0);
  // vs "x y": 0; vs "a c": union {a}, m = n = 2: F = 2 * 0.25 / (1 + 1e-8).
  EXPECT_NEAR(RougeL("a b", {"x y", "a c"}), 0.5 / (1.0 + 1e-8), 1e-12);
}

TEST(Classification, MatchesAndSubstringRule) {
  const Strings classes = {"Human being", "Human", "Location"};
  // "Human" is inside the truth "Human being" and so dropped: 1 / 1.
  EXPECT_DOUBLE_EQ(Classification("Human being", "Human being", classes), 1.0);
  // "Human being", "Human" and "Location" all match, none inside the truth: 1 / 3.
  EXPECT_DOUBLE_EQ(Classification("Location or Human being", "Location", classes), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(Classification("Location or Human", "Location", classes), 0.5);
  EXPECT_DOUBLE_EQ(Classification("Location", "Human being", classes), 0.0);
  EXPECT_DOUBLE_EQ(Classification("", "Location", classes), 0.0);
}

TEST(Classification, KeepsLongBenchRemovalWhileIterating) {
  // Matches [ab a b abc]; removing "ab" makes the loop skip "a", then "b" goes: [a abc] -> 1/2.
  EXPECT_DOUBLE_EQ(Classification("abc", "abc", {"ab", "a", "b", "abc"}), 0.5);
}

TEST(Retrieval, ShareOfDigitRuns) {
  EXPECT_DOUBLE_EQ(Retrieval("Paragraph 12", "Paragraph 12"), 1.0);
  EXPECT_DOUBLE_EQ(Retrieval("Paragraph 3 or Paragraph 12", "Paragraph 12"), 0.5);
  EXPECT_DOUBLE_EQ(Retrieval("", "Paragraph 1"), 0.0);
  EXPECT_DOUBLE_EQ(Retrieval("It is 012", "Paragraph 12"), 0.0);  // compared as strings
  EXPECT_DOUBLE_EQ(Retrieval("Paragraph 3", "no paragraph id"), 0.0);
  EXPECT_DOUBLE_EQ(RetrievalZh("\xE6\xAE\xB5\xE8\x90\xBD"
                               "5",
                               "\xE6\xAE\xB5\xE8\x90\xBD"
                               "5"),
                   1.0);
  EXPECT_DOUBLE_EQ(RetrievalZh("5 or 6",
                               "\xE6\xAE\xB5\xE8\x90\xBD"
                               "5"),
                   0.5);
}

TEST(Count, ShareOfDigitRuns) {
  EXPECT_DOUBLE_EQ(Count("There are 7 unique paragraphs", "7"), 1.0);
  EXPECT_DOUBLE_EQ(Count("7 or 8", "7"), 0.5);
  EXPECT_DOUBLE_EQ(Count("seven", "7"), 0.0);
  EXPECT_DOUBLE_EQ(Count("17", "7"), 0.0);
}

TEST(CodeSim, FuzzRatioOfFirstCodeLine) {
  EXPECT_DOUBLE_EQ(CodeSim("return x + 1;", "return x + 1;"), 1.0);
  // The fence line is skipped; "return x" vs "return x + 1": LCS 8, 16 / 20 -> 80.
  EXPECT_DOUBLE_EQ(CodeSim("```python\nreturn x\n```", "return x + 1"), 0.8);
  // Leading newlines stripped, "# comment" skipped; "foo()" vs "bar()": LCS "()", 4 / 10.
  EXPECT_DOUBLE_EQ(CodeSim("\n\n# comment\nfoo()", "bar()"), 0.4);
  // No qualifying line: "" vs gt -> 0; equal empty strings -> 100.
  EXPECT_DOUBLE_EQ(CodeSim("// only a comment", "x = 1"), 0.0);
  EXPECT_DOUBLE_EQ(CodeSim("", ""), 1.0);
}

TEST(CodeSim, RoundsHalfToEvenOverCodePoints) {
  // 2 / 16 = 0.125 -> 12.5 -> 12; 6 / 16 = 0.375 -> 37.5 -> 38.
  EXPECT_DOUBLE_EQ(CodeSim("axxxxxxx", "ayyyyyyy"), 0.12);
  EXPECT_DOUBLE_EQ(CodeSim("abcxxxxx", "abcyyyyy"), 0.38);
  // "café" vs "cafe" counts characters, not bytes: 6 / 8 -> 75.
  EXPECT_DOUBLE_EQ(CodeSim("caf\xC3\xA9", "cafe"), 0.75);
}

TEST(ExtractFinalInteger, BoxedThenLastInteger) {
  EXPECT_EQ(ExtractFinalInteger("so the answer is \\boxed{42}."), 42);
  EXPECT_EQ(ExtractFinalInteger("\\boxed{3} then corrected: \\boxed{17}"), 17);
  EXPECT_EQ(ExtractFinalInteger("\\boxed{1,234}"), 1234);
  EXPECT_EQ(ExtractFinalInteger("\\boxed{ 033 }"), 33);
  EXPECT_EQ(ExtractFinalInteger("\\boxed{\\text{17}}"), 17);
  EXPECT_EQ(ExtractFinalInteger("\\boxed{-5}"), -5);
  EXPECT_EQ(ExtractFinalInteger("\\boxed{45^\\circ}"), 45);
  EXPECT_EQ(ExtractFinalInteger("cut off: \\boxed{12"), 12);
  EXPECT_EQ(ExtractFinalInteger("no box, 12 apples and 7 pears"), 7);
  EXPECT_EQ(ExtractFinalInteger("The answer is -5."), -5);
  EXPECT_EQ(ExtractFinalInteger("about 12.0 units"), 12);
}

TEST(ExtractFinalInteger, NoInteger) {
  EXPECT_EQ(ExtractFinalInteger(""), std::nullopt);
  EXPECT_EQ(ExtractFinalInteger("\\boxed{\\frac{1}{2}}"), std::nullopt);  // not one integer
  EXPECT_EQ(ExtractFinalInteger("x = 2.5"), std::nullopt);
  EXPECT_EQ(ExtractFinalInteger("99999999999999999999999"), std::nullopt);  // overflows
}

TEST(ExactInteger, ComparesExtractedInteger) {
  EXPECT_DOUBLE_EQ(ExactInteger("\\boxed{42}", "42"), 1.0);
  EXPECT_DOUBLE_EQ(ExactInteger("\\boxed{41}", "42"), 0.0);
  EXPECT_DOUBLE_EQ(ExactInteger("", "42"), 0.0);
  EXPECT_DOUBLE_EQ(ExactInteger("42", "not a number"), 0.0);
  EXPECT_DOUBLE_EQ(ExactInteger("I get 70, so \\boxed{070}", "70"), 1.0);
}

TEST(ScoreTurn, DispatchesByMetricAndFirstLineRule) {
  EvalSample s;
  s.metric = "qa_f1";
  s.turns.push_back({"q", "", {"Paris"}, 8});
  // Whole prediction: [answer is paris london] vs [paris]: P 1/4, R 1 -> 0.4.
  EXPECT_NEAR(ScoreTurn(s, 0, "\nThe answer is Paris\nLondon"), 0.4, 1e-12);
  s.first_line_only = true;  // "The answer is Paris": P 1/3, R 1 -> 0.5
  EXPECT_NEAR(ScoreTurn(s, 0, "\nThe answer is Paris\nLondon"), 0.5, 1e-12);

  EvalSample c;
  c.metric = "classification";
  c.all_classes = {"Location", "Human"};
  c.turns.push_back({"q", "", {"Human", "Location"}, 8});
  EXPECT_DOUBLE_EQ(ScoreTurn(c, 0, "Location"), 1.0);  // best reference

  EvalSample e;
  e.metric = "exact_integer";
  e.turns.push_back({"q", "", {"70"}, 8});
  e.turns.push_back({"q2", "", {"5"}, 8});
  EXPECT_DOUBLE_EQ(ScoreTurn(e, 0, "\\boxed{70}"), 1.0);
  EXPECT_DOUBLE_EQ(ScoreTurn(e, 1, "\\boxed{70}"), 0.0);
  EXPECT_TRUE(IsKnownMetric("code_sim"));
  EXPECT_FALSE(IsKnownMetric("bleu"));
}

}  // namespace
}  // namespace primekv
