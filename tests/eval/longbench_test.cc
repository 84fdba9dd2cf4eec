// The LongBench loader on a hand-written fixture: prompts, per-dataset settings, skipped lines,
// hand-computed scores, and middle truncation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "eval_test_util.h"
#include "primekv/eval/eval.h"

namespace primekv {
namespace {

const std::string kFixture =
    std::string(PRIMEKV_SOURCE_DIR) + "/tests/eval/fixtures/longbench_sample.jsonl";

std::map<std::string, EvalSample> LoadById(const TaskOptions& options) {
  auto r = GenerateTask("longbench:" + kFixture, options);
  EXPECT_TRUE(r.ok()) << r.message();
  std::map<std::string, EvalSample> out;
  if (r.ok()) {
    for (EvalSample& s : *r) out[s.id] = std::move(s);
  }
  return out;
}

TEST(LongBench, LoadsFixtureWithDatasetSettings) {
  std::vector<std::string> warnings;
  TaskOptions o;
  o.warnings = &warnings;
  const auto samples = LoadById(o);
  ASSERT_EQ(samples.size(), 9u);
  struct Expect {
    const char* id;
    const char* task;
    const char* metric;
    int max_new;
    bool first_line;
  };
  for (const Expect& e : {Expect{"lb-qasper-1", "qasper", "qa_f1", 128, false},
                          Expect{"lb-trec-1", "trec", "classification", 64, true},
                          Expect{"lb-triviaqa-1", "triviaqa", "qa_f1", 32, true},
                          Expect{"lb-count-1", "passage_count", "count", 32, false},
                          Expect{"lb-retrieval-1", "passage_retrieval_en", "retrieval", 32, false},
                          Expect{"lb-lcc-1", "lcc", "code_sim", 64, false},
                          Expect{"lb-samsum-1", "samsum", "rouge_l", 128, true},
                          Expect{"lb-gov-1", "gov_report", "rouge_l", 512, false},
                          Expect{"lb-2wiki-e-1", "2wikimqa", "qa_f1", 32, false}}) {
    ASSERT_EQ(samples.count(e.id), 1u) << e.id;
    const EvalSample& s = samples.at(e.id);
    EXPECT_EQ(s.task, e.task);
    EXPECT_EQ(s.metric, e.metric) << e.id;
    ASSERT_EQ(s.turns.size(), 1u);
    EXPECT_EQ(s.turns[0].max_new_tokens, e.max_new) << e.id;
    EXPECT_EQ(s.first_line_only, e.first_line) << e.id;
  }
  const EvalSample& qasper = samples.at("lb-qasper-1");
  EXPECT_NE(qasper.context.find("The paper describes a new dataset of short posts."),
            std::string::npos);
  EXPECT_NE(qasper.turns[0].question.find("Question: Does the paper use a dataset?"),
            std::string::npos);
  EXPECT_EQ(qasper.turns[0].answers, (std::vector<std::string>{"Yes", "yes, it does"}));
  EXPECT_EQ(qasper.length, 14);
  EXPECT_EQ(samples.at("lb-2wiki-e-1").length, 5000);
  EXPECT_EQ(samples.at("lb-trec-1").all_classes,
            (std::vector<std::string>{"Individual", "City", "Country", "Other location"}));
  // Few-shot: the test item is the question, as written in the data.
  EXPECT_EQ(samples.at("lb-trec-1").turns[0].question,
            "Question: Where is the Eiffel Tower?\nType:");

  const std::vector<std::string> expected_warnings = {
      kFixture + ":4: invalid JSON at byte 37 of the line",
      kFixture +
          ":5: dataset \"dureader\" is scored with Chinese word segmentation, which is not "
          "supported",
      kFixture + ":12: \"answers\" must be a non-empty array of strings",
      kFixture + ":14: classification dataset \"trec\" needs \"all_classes\""};
  EXPECT_EQ(warnings, expected_warnings);
}

TEST(LongBench, HandComputedScores) {
  const auto samples = LoadById(TaskOptions{});
  ASSERT_EQ(samples.size(), 9u);
  const auto score = [&](const char* id, const char* prediction) {
    return ScoreTurn(samples.at(id), 0, prediction);
  };
  // [yes it is] vs [yes]: 0.5; vs [yes it does]: common 2, P = R = 2/3.
  EXPECT_NEAR(score("lb-qasper-1", "yes it is"), 2.0 / 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(score("lb-trec-1", "City\nCountry"), 1.0);  // first line only
  // "City" and "Other location" both match, neither inside the truth's other names: 1/2.
  EXPECT_DOUBLE_EQ(score("lb-trec-1", "Other location or City"), 0.5);
  // First line "The answer is Paris": [answer is paris] vs [paris]: P 1/3, R 1 -> 0.5.
  EXPECT_NEAR(score("lb-triviaqa-1", "\nThe answer is Paris\nLondon"), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(score("lb-count-1", "3 paragraphs, not 4"), 0.5);
  EXPECT_DOUBLE_EQ(score("lb-retrieval-1", "Paragraph 2"), 1.0);
  EXPECT_DOUBLE_EQ(score("lb-retrieval-1", "Paragraph 20"), 0.0);
  // "return a + b" vs "    return a + b": LCS 12 of 12 + 16 characters: 24/28 -> 86.
  EXPECT_DOUBLE_EQ(score("lb-lcc-1", "return a + b"), 0.86);
  // First line "Amy buys milk.": LCS {Amy milk}, P 2/3, R 2/4.
  EXPECT_NEAR(score("lb-samsum-1", "Amy buys milk.\nextra line"), (2.0 / 3.0) / (7.0 / 6.0 + 1e-8),
              1e-12);
  // Sentences [Costs rose][Funding fell] vs [The report finds costs rose][Funding fell]: union
  // {rose Funding fell} (case matters), P 3/4, R 3/7.
  EXPECT_NEAR(score("lb-gov-1", "Costs rose. Funding fell."),
              2 * (9.0 / 28.0) / (3.0 / 4.0 + 3.0 / 7.0 + 1e-8), 1e-12);
  EXPECT_DOUBLE_EQ(score("lb-2wiki-e-1", "Ann"), 1.0);
}

class TempFile {
 public:
  TempFile(const std::string& name, const std::string& text)
      : path_(std::filesystem::path(testing::TempDir()) / name) {
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

std::string NumberedWords(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += (i ? " w" : "w") + std::to_string(i);
  return text;
}

TEST(LongBench, DatasetFromFileNameAndMiddleTruncationInWords) {
  // No "dataset" field: the file name says hotpotqa.
  const TempFile file("hotpotqa.jsonl", "{\"input\": \"Which?\", \"context\": \"" +
                                            NumberedWords(2000) +
                                            "\", \"answers\": [\"w1\"], \"_id\": \"long\"}\n");
  TaskOptions o;
  o.max_context_tokens = 500;
  auto r = GenerateTask("longbench:" + file.path(), o);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 1u);
  const EvalSample& s = (*r)[0];
  EXPECT_EQ(s.task, "hotpotqa");
  const EvalTurn& t = s.turns[0];
  // The limit covers the prompt and hotpotqa's 32-token answer.
  EXPECT_EQ(t.max_new_tokens, 32);
  const int words = CountTextTokens(s.context + t.question + t.answer_prefix, nullptr);
  EXPECT_LE(words, 500 - 32);
  EXPECT_GE(words, 495 - 32);
  EXPECT_NE(s.context.find("\nw0 w1 w2 "), std::string::npos);
  EXPECT_NE(s.context.find(" w1998 w1999\n"), std::string::npos);
  EXPECT_EQ(s.context.find(" w1000 "), std::string::npos);
  // The kept halves are equal (within one word).
  int head = 0, tail = 0;
  std::istringstream in(s.context);
  for (std::string w; in >> w;) {
    if (w.size() > 1 && w[0] == 'w' && std::isdigit(static_cast<unsigned char>(w[1]))) {
      ++(std::stoi(w.substr(1)) < 1000 ? head : tail);
    }
  }
  EXPECT_LE(std::abs(head - tail), 1) << head << " " << tail;
  EXPECT_GT(head, 200);

  // Without a limit nothing is cut.
  o.max_context_tokens = 0;
  r = GenerateTask("longbench:" + file.path(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_NE((*r)[0].context.find(" w1000 "), std::string::npos);
}

TEST(LongBench, MiddleTruncationInTokens) {
  const TempFile file("lb_tokens.jsonl",
                      "{\"dataset\": \"narrativeqa\", \"input\": \"Who?\", \"context\": \"BEGIN " +
                          NumberedWords(3000) + " END\", \"answers\": [\"w1\"]}\n");
  const Tokenizer& tok = eval_test::SyntheticLlama();
  TaskOptions o;
  o.tokenizer = &tok;
  o.max_context_tokens = 1000;
  auto r = GenerateTask("longbench:" + file.path(), o);
  ASSERT_TRUE(r.ok()) << r.message();
  const EvalSample& s = (*r)[0];
  const EvalTurn& t = s.turns[0];
  const int tokens =
      static_cast<int>(tok.Encode(s.context + t.question + t.answer_prefix, true).size());
  EXPECT_EQ(t.max_new_tokens, 128);  // narrativeqa; the limit covers it too
  EXPECT_LE(tokens, 1000 - 128);
  EXPECT_GE(tokens, 980 - 128);
  EXPECT_NE(s.context.find("BEGIN w0 w1"), std::string::npos);
  EXPECT_NE(s.context.find("w2999 END"), std::string::npos);
  EXPECT_EQ(s.context.find(" w1500 "), std::string::npos);
  EXPECT_EQ(s.id, file.path() + ":1");  // no _id: the line says where it came from
}

TEST(LongBench, Errors) {
  EXPECT_FALSE(GenerateTask("longbench:/nonexistent/file.jsonl", TaskOptions{}).ok());
  const TempFile file("bad.jsonl",
                      "{\"dataset\": \"unknown_set\", \"context\": \"c\", \"answers\": [\"a\"]}\n");
  const auto r = GenerateTask("longbench:" + file.path(), TaskOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find(":1: unknown LongBench dataset \"unknown_set\""), std::string::npos)
      << r.message();
}

}  // namespace
}  // namespace primekv
