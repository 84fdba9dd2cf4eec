// The util layer's guards on untrusted input: JSON depth and typed access, capped file reads,
// checked flushes, terminal-safe text.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "primekv/util/file_io.h"
#include "primekv/util/json_read.h"
#include "primekv/util/text.h"

namespace primekv {
namespace {

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonDepth, RefusesPastTheLimitWithoutRecursing) {
  EXPECT_TRUE(CheckJsonDepth(Nested(kMaxJsonDepth), "x").ok());
  const Status deep = CheckJsonDepth(Nested(kMaxJsonDepth + 1), "f.json");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.message(), "f.json: JSON nested deeper than 128 levels (at byte 128)");
  // 300,000 levels: the parser would overflow the stack; the check does not parse.
  EXPECT_FALSE(ParseJson(Nested(300000), "f.json").ok());
}

TEST(JsonDepth, BracketsInsideStringsDoNotCount) {
  const std::string text = "{\"a\": \"" + std::string(1000, '[') + "\\\"" + "\", \"b\": [1]}";
  auto j = ParseJson(text, "x");
  ASSERT_TRUE(j.ok()) << j.message();
  EXPECT_EQ((*j)["b"][0], 1);
}

TEST(JsonDepth, ParseErrorsAreMessages) {
  auto j = ParseJson("{\"a\": ", "cfg.json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.message().rfind("cfg.json: not valid JSON", 0), 0u) << j.message();
}

TEST(JsonNode, WrongTypesNameTheirPath) {
  auto j = ParseJson(
      R"({"added_tokens": [{"id": "x"}], "n": 1.5, "big": 18446744073709551615, "zero": 0})", "t");
  ASSERT_TRUE(j.ok());
  const JsonNode root(*j, "tokenizer.json:");
  auto tokens = root.Field("added_tokens");
  ASSERT_TRUE(tokens.ok());
  auto list = tokens->Elements();
  ASSERT_TRUE(list.ok());
  auto id = (*list)[0].Field("id");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->Integer(0, 100).message(),
            "tokenizer.json:added_tokens[0].id: expected an integer, got a string");
  EXPECT_EQ(root.Field("n")->Integer(0, 9).message(),
            "tokenizer.json:n: expected an integer, got a number");
  EXPECT_EQ(root.Field("big")->Integer(0, 1 << 20).message(),
            "tokenizer.json:big: 18446744073709551615 is outside [0, 1048576]");
  // 0 parses as an unsigned literal: the lower bound still holds.
  EXPECT_EQ(root.Field("zero")->Integer(1, 9).message(),
            "tokenizer.json:zero: 0 is outside [1, 9]");
  EXPECT_EQ(*root.Field("zero")->Integer(0, 9), 0);
  EXPECT_EQ(root.Field("nope").message(), "tokenizer.json:nope: missing");
  EXPECT_EQ(tokens->Field("x").message(),
            "tokenizer.json:added_tokens: expected an object, got an array");
  EXPECT_EQ(*root.IntegerOr("absent", 7, 0, 9), 7);
  EXPECT_FALSE(root.BoolOr("n", false).ok());
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/primekv_limits.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

using ReadFileCappedTest = TempDir;

TEST_F(ReadFileCappedTest, CapsRegularFilesAndStreams) {
  const std::string path = dir_ + "/a.txt";
  std::ofstream(path) << std::string(100, 'x');
  EXPECT_EQ(ReadFileCapped(path, "--text-file", FileSource::kRegular, 100)->size(), 100u);
  EXPECT_EQ(ReadFileCapped(path, "--text-file", FileSource::kRegular, 99).message(),
            "--text-file '" + path + "' is larger than 99 bytes");
  // An endless device stops at the cap instead of growing until memory runs out.
  EXPECT_EQ(ReadFileCapped("/dev/zero", "--context-file", FileSource::kStream, 1 << 20).message(),
            "--context-file '/dev/zero' is larger than 1048576 bytes");
}

TEST_F(ReadFileCappedTest, RefusesFifosDirectoriesAndSaysWhyItCannotOpen) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ReadFileCapped(fifo, "tokenizer.json").message(),
            "tokenizer.json '" + fifo + "' is not a regular file");
  EXPECT_EQ(ReadFileCapped(dir_, "tokenizer.json").message(),
            "tokenizer.json '" + dir_ + "' is a directory");
  const std::string a = dir_ + "/loop_a", b = dir_ + "/loop_b";
  ASSERT_EQ(::symlink(a.c_str(), b.c_str()), 0);
  ASSERT_EQ(::symlink(b.c_str(), a.c_str()), 0);
  EXPECT_EQ(ReadFileCapped(a, "x").message(),
            "x: cannot read '" + a + "': Too many levels of symbolic links");
}

TEST(FlushChecked, ReportsAFullDevice) {
  std::FILE* f = std::fopen("/dev/full", "w");
  ASSERT_NE(f, nullptr);
  std::fputs("hello", f);
  EXPECT_EQ(FlushChecked(f, "standard output").message(),
            "standard output: write failed: No space left on device");
  std::fclose(f);
  std::ofstream out("/dev/full");
  out << "hello";
  EXPECT_FALSE(FlushChecked(out, "logits").ok());
  std::ofstream ok("/dev/null");
  ok << "hello";
  EXPECT_TRUE(FlushChecked(ok, "x").ok());
}

TEST(TerminalSafe, EscapesControlsAndInvalidUtf8KeepsText) {
  EXPECT_EQ(TerminalSafe("caf\xc3\xa9 \xe4\xb8\xad"), "caf\xc3\xa9 \xe4\xb8\xad");
  EXPECT_EQ(TerminalSafe(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(TerminalSafe("\x1b[2J\n"), "\\x1b[2J\\n");
  EXPECT_EQ(TerminalSafe("\xc2\x9b"
                         "31m"),
            "\\xc2\\x9b31m");                                  // C1 CSI
  EXPECT_EQ(TerminalSafe("\xff\xc3"), "\\xff\\xc3");           // invalid and truncated
  EXPECT_EQ(TerminalSafe("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(TerminalSafe("\x7f"), "\\x7f");
}

}  // namespace
}  // namespace primekv
