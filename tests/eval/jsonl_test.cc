// Bring-your-own jsonl and AIME files: valid lines become samples, malformed ones are reported
// with their line numbers and skipped.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "primekv/eval/eval.h"

namespace primekv {
namespace {

const std::string kDir = std::string(PRIMEKV_SOURCE_DIR) + "/tests/eval/fixtures/";

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::path(testing::TempDir()) / name).string();
  std::ofstream(path) << text;
  return path;
}

// What follows "id" on a valid sample line.
const std::string kSampleTail =
    R"(, "context": "c", "turns": [{"question": "q", "answers": ["a"]}], "metric": "qa_f1"})";

// A jsonl task file, with the warnings of its skipped lines.
auto LoadJsonl(const std::string& path, std::vector<std::string>& warnings) {
  TaskOptions o;
  o.warnings = &warnings;
  return GenerateTask("jsonl:" + path, o);
}

TEST(Jsonl, ValidLinesAndLineNumberedWarnings) {
  const std::string path = kDir + "user_tasks.jsonl";
  std::vector<std::string> warnings;
  auto r = LoadJsonl(path, warnings);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 3u);
  const std::vector<std::string> expected = {
      path + ":2: invalid JSON at byte 39 of the line",  // the line ends inside "turns"
      path + ":3: missing string \"context\"",
      path +
          ":5: unsupported metric \"bleu\" (use string_match_all, string_match_part, qa_f1, "
          "rouge_l or exact_integer)",
      path + ":7: \"turns\" must be a non-empty array",
      path + ":8: turn 1: \"answers\" must hold only strings",
      path + ":9: not a JSON object"};
  EXPECT_EQ(warnings, expected);

  const EvalSample& a = (*r)[0];
  EXPECT_EQ(a.id, "a");
  EXPECT_EQ(a.task, "jsonl");
  EXPECT_EQ(a.metric, "string_match_all");
  ASSERT_EQ(a.turns.size(), 2u);
  EXPECT_EQ(a.turns[0].question, "Where is the key?");
  EXPECT_EQ(a.turns[0].answer_prefix, "");
  EXPECT_EQ(a.turns[0].max_new_tokens, 128);
  EXPECT_EQ(a.turns[1].answer_prefix, "The car is in");
  EXPECT_EQ(a.turns[1].max_new_tokens, 16);
  EXPECT_DOUBLE_EQ(ScoreTurn(a, 0, "It is Under the blue pot."), 1.0);
  EXPECT_DOUBLE_EQ(ScoreTurn(a, 1, "lot 7"), 1.0);
  EXPECT_DOUBLE_EQ(ScoreTurn(a, 1, "lot 8"), 0.0);

  const EvalSample& b = (*r)[1];
  EXPECT_EQ(b.id, "7");
  EXPECT_DOUBLE_EQ(ScoreTurn(b, 0, "Tuesday"), 1.0);
  // [on monday] vs [on tuesday]: P = R = 1/2; vs [tuesday]: 0.
  EXPECT_DOUBLE_EQ(ScoreTurn(b, 0, "on Monday"), 0.5);

  const EvalSample& g = (*r)[2];
  EXPECT_EQ(g.metric, "exact_integer");
  EXPECT_DOUBLE_EQ(ScoreTurn(g, 0, "\\boxed{3}"), 1.0);
  EXPECT_DOUBLE_EQ(ScoreTurn(g, 0, "2, then 4"), 0.0);
}

TEST(Jsonl, OptionsLimitAndOverride) {
  TaskOptions o;
  o.file_samples = 1;
  o.max_new_tokens = 5;
  auto r = GenerateTask("jsonl:" + kDir + "user_tasks.jsonl", o);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 1u);
  for (const EvalTurn& t : (*r)[0].turns) EXPECT_EQ(t.max_new_tokens, 5);
}

// A number past double's range is valid syntax that the JSON parser refuses with another
// exception than a parse error (found by fuzz/jsonl_tasks_fuzz.cc): a skipped line, not a crash.
TEST(Jsonl, NumberOutOfRangeIsASkippedLine) {
  const std::string path =
      WriteTemp("overflow.jsonl", "{\"id\": \"a\", \"x\": 1e999999" + kSampleTail +
                                      "\n{\"id\": \"b\"" + kSampleTail + "\n");
  std::vector<std::string> warnings;
  auto r = LoadJsonl(path, warnings);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 1u);
  ASSERT_EQ(warnings.size(), 1u) << warnings.back();
  EXPECT_NE(warnings[0].find(path + ":1: unreadable JSON: "), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("406"), std::string::npos) << warnings[0];
}

TEST(Jsonl, FileWithoutValidLineIsAnError) {
  const std::string bad = WriteTemp("all_bad.jsonl", "\n{oops\n{\"id\": \"x\"}\n");
  auto r = GenerateTask("jsonl:" + bad, TaskOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("no valid sample (2 bad lines; first: " + bad +
                             ":2: invalid JSON at byte 2 of the line)"),
            std::string::npos)
      << r.message();
  const std::string empty = WriteTemp("empty.jsonl", "");
  r = GenerateTask("jsonl:" + empty, TaskOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("empty file"), std::string::npos) << r.message();
  r = GenerateTask("jsonl:/nonexistent/x.jsonl", TaskOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("cannot read '/nonexistent/x.jsonl'"), std::string::npos)
      << r.message();
  std::filesystem::remove(bad);
  std::filesystem::remove(empty);
}

TEST(Jsonl, DuplicateIdsAreAnErrorNamingBothLines) {
  // 7 and "7" are the same id: results rows store ids as strings.
  const std::string path =
      WriteTemp("dup.jsonl", "{\"id\": 7" + kSampleTail + "\n\n{\"id\": \"x\"" + kSampleTail +
                                 "\n{\"id\": \"7\"" + kSampleTail + "\n");
  auto r = GenerateTask("jsonl:" + path, TaskOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), path + ":4: duplicate id \"7\" (first on line 1)");
  // AIME files too.
  const std::string aime = WriteTemp("dup_aime.jsonl",
                                     "{\"id\": \"p\", \"problem\": \"1+1\", \"answer\": 2}\n"
                                     "{\"id\": \"p\", \"problem\": \"2+2\", \"answer\": 4}\n");
  r = GenerateTask("aime:" + aime, TaskOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), aime + ":2: duplicate id \"p\" (first on line 1)");
  std::filesystem::remove(path);
  std::filesystem::remove(aime);
}

TEST(Jsonl, WrongTypesAndBadBytesSayWhatAndWhere) {
  const std::string& rest = kSampleTail;
  const std::string path =
      WriteTemp("types.jsonl",
                "{\"id\": 1.5" + rest + "\n{\"id\": null" + rest + "\n{\"id\": [1]" + rest +
                    "\n{\"id\": \"ok\"" + rest + "\n{\"id\": \"caf\xc3\" " + rest +
                    "\n{\"id\": \"z\", \"context\": \"\xed\xa0\x80\"}\n{\"context\": \"c\"}\n");
  std::vector<std::string> warnings;
  auto r = LoadJsonl(path, warnings);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].id, "ok");
  const std::vector<std::string> expected = {
      path + ":1: \"id\" must be a string or an integer, not a fractional number",
      path + ":2: \"id\" must be a string or an integer, not null",
      path + ":3: \"id\" must be a string or an integer, not array",
      // "caf" then a lead byte of a 2-byte sequence followed by '"': byte 12 of the line.
      path + ":5: invalid UTF-8 at byte 12 of the line",
      // An encoded UTF-16 surrogate (ED A0 80) is not UTF-8.
      path + ":6: invalid UTF-8 at byte 25 of the line", path + ":7: missing \"id\""};
  EXPECT_EQ(warnings, expected);
  std::filesystem::remove(path);
}

TEST(Jsonl, DirectoryIsAnError) {
  auto r = GenerateTask("jsonl:" + testing::TempDir(), TaskOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("is a directory"), std::string::npos) << r.message();
}

TEST(Aime, ProblemsWithBoxedIntegerAnswers) {
  const std::string path = kDir + "aime_sample.jsonl";
  std::vector<std::string> warnings;
  TaskOptions o;
  o.warnings = &warnings;
  auto r = GenerateTask("aime:" + path, o);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ(warnings, (std::vector<std::string>{path + ":3: \"answer\" must be an integer",
                                                path + ":4: missing string \"problem\""}));
  const EvalSample& first = (*r)[0];
  EXPECT_EQ(first.id, "2025-I-1");
  EXPECT_EQ(first.task, "aime");
  EXPECT_EQ(first.metric, "exact_integer");
  EXPECT_NE(first.context.find("17 in base b divides 97 in base b"), std::string::npos);
  ASSERT_EQ(first.turns.size(), 1u);
  EXPECT_NE(first.turns[0].question.find("\\boxed{}"), std::string::npos);
  EXPECT_EQ(first.turns[0].max_new_tokens, 2048);
  EXPECT_EQ(first.turns[0].answers, std::vector<std::string>{"70"});
  EXPECT_DOUBLE_EQ(ScoreTurn(first, 0, "Bases 21 and 49 work, so the sum is \\boxed{70}."), 1.0);
  EXPECT_DOUBLE_EQ(ScoreTurn(first, 0, "\\boxed{49}"), 0.0);
  const EvalSample& second = (*r)[1];
  EXPECT_EQ(second.id, "2");
  EXPECT_EQ(second.turns[0].answers, std::vector<std::string>{"33"});
  EXPECT_DOUBLE_EQ(ScoreTurn(second, 0, "11 * 3 = 33"), 1.0);
}

}  // namespace
}  // namespace primekv
