// Issue 30: untrusted config.json and results.jsonl text, exact ratio keys, resume by distinct
// (unit, turn), task lists with commas, empty references.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "eval/results.h"
#include "eval/run_config.h"
#include "primekv/eval/eval.h"

namespace primekv {
namespace {

using eval_internal::ParseResultLine;
using eval_internal::ParseRunConfig;

TEST(RunConfigText, WrongTypesNameTheFileAndField) {
  const std::string model = R"({"path": "m", "size": 1, "hash": "h", "scheme": "s"})";
  EXPECT_TRUE(ParseRunConfig(R"({"model": )" + model + R"(, "settings": {}})", "c.json").ok());
  const auto message = [](const std::string& text) {
    auto r = ParseRunConfig(text, "c.json");
    return r.ok() ? std::string("ok") : r.message();
  };
  EXPECT_EQ(message(R"({"model": 5, "settings": {}})"),
            "c.json:model: expected an object, got an integer");
  EXPECT_EQ(message(R"({"model": {"path": 1, "hash": "h", "scheme": "s"}, "settings": {}})"),
            "c.json:model.path: expected a string, got an integer");
  EXPECT_EQ(message(R"({"model": )" + model + R"(, "settings": []})"),
            "c.json:settings: expected an object, got an array");
  EXPECT_EQ(message(R"({"model": )" + model + R"(, "settings": {}, "presses": {"a": 1}})"),
            "c.json:presses.a: expected a string, got an integer");
  EXPECT_EQ(message("[1]"), "c.json: expected an object, got an array");
  EXPECT_NE(message(std::string(1000, '[')).find("nested deeper than"), std::string::npos);
  EXPECT_NE(message("{").find("c.json: not valid JSON"), std::string::npos);
}

TEST(ResultLine, WrongTypesAreMessages) {
  EXPECT_TRUE(ParseResultLine(R"({"task":"t","id":"a","press":"none","ratio":0,"turn":0,)"
                              R"("turns":1,"score":1})")
                  .ok());
  auto r = ParseResultLine(R"({"task":5,"id":"a","press":"none","ratio":0,"turn":0,"turns":1})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("\"task\" must be a string"), std::string::npos) << r.message();
  EXPECT_FALSE(ParseResultLine(std::string(5000, '[')).ok());
  EXPECT_FALSE(ParseResultLine("{\"task\":").ok());
}

TEST(ResultKeys, RatiosAreExact) {
  EXPECT_EQ(eval_internal::RatioText(0.5), "0.5");
  EXPECT_EQ(eval_internal::RatioText(0.1), "0.1");
  EXPECT_EQ(eval_internal::RatioText(0.50001), "0.50001");
  EXPECT_NE(eval_internal::UnitKey("t", "a", "p", 0.12341, "m", 1, 2, 1),
            eval_internal::UnitKey("t", "a", "p", 0.12344, "m", 1, 2, 1));
  // A '|' inside a field cannot make two keys equal.
  EXPECT_NE(eval_internal::UnitKey("t|a", "b", "p", 0, "m", 1, 2, 1),
            eval_internal::UnitKey("t", "a|b", "p", 0, "m", 1, 2, 1));
}

TEST(ResultsRepair, DropsUnfinishedUnitsAndRepeatedTurns) {
  const auto dir = std::filesystem::temp_directory_path() / "primekv_hardening_repair";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto file = dir / "results.jsonl";
  const auto row = [](const char* id, int turn, int turns) {
    return std::string(R"({"task":"t","id":")") + id + R"(","press":"none","ratio":0,"turn":)" +
           std::to_string(turn) + R"(,"turns":)" + std::to_string(turns) + R"(,"score":1})" + "\n";
  };
  // Unit a: 2 of 3 turns. Unit b: complete, turn 0 repeated.
  std::ofstream(file) << row("a", 0, 3) << row("a", 1, 3) << row("b", 0, 2) << row("b", 1, 2)
                      << row("b", 0, 2) << "{cut";
  std::vector<std::string> warnings;
  ASSERT_TRUE(eval_internal::RepairResultsFile(file, &warnings).ok());
  EXPECT_EQ(warnings.size(), 4u);
  auto rows = eval_internal::ReadResultRows(file, nullptr);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].id, "b");
  EXPECT_EQ((*rows)[1].turn, 1);
  EXPECT_FALSE(std::filesystem::exists(dir / "results.jsonl.tmp"));
  std::filesystem::remove_all(dir);
}

TEST(ResultsWrite, FailureLeavesNoTemporary) {
  const auto missing = std::filesystem::temp_directory_path() / "primekv_no_such_dir" / "c.json";
  EXPECT_FALSE(eval_internal::WriteFileAtomically(missing, "x").ok());
  EXPECT_FALSE(std::filesystem::exists(missing.string() + ".tmp"));
}

TEST(TaskList, FilePathsMayHoldCommas) {
  using V = std::vector<std::string>;
  EXPECT_EQ(SplitTaskList("niah_single_1,multiturn"), (V{"niah_single_1", "multiturn"}));
  EXPECT_EQ(SplitTaskList("jsonl:a,b.jsonl"), (V{"jsonl:a,b.jsonl"}));
  EXPECT_EQ(SplitTaskList("jsonl:a,b.jsonl,niah_single_1,aime:c,d"),
            (V{"jsonl:a,b.jsonl", "niah_single_1", "aime:c,d"}));
  EXPECT_EQ(SplitTaskList("nosuch,jsonl:x"), (V{"nosuch", "jsonl:x"}));
  EXPECT_EQ(TaskFilePath("longbench:/p/q.jsonl"), "/p/q.jsonl");
  EXPECT_FALSE(TaskFilePath("niah_single_1").has_value());
}

TEST(EmptyReference, MatchesNothing) {
  EXPECT_DOUBLE_EQ(StringMatchAll("anything at all", {""}), 0.0);
  EXPECT_DOUBLE_EQ(StringMatchAll("the ball", {" ", "ball"}), 0.5);
  EXPECT_DOUBLE_EQ(StringMatchPart("anything", {"", "\t"}), 0.0);
}

}  // namespace
}  // namespace primekv
