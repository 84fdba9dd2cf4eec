// Pre-tokenizer splits and the Unicode classes behind them. The expected splits were produced with
// Python's `regex` module running the published patterns, and spot-checked by hand.
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/unicode.h"

namespace primekv {
namespace {

std::vector<std::string> Split(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : PreTokenize(kind, text)) out.emplace_back(p);
  return out;
}

TEST(Unicode, Classes) {
  EXPECT_TRUE(IsUnicodeLetter('a'));
  EXPECT_TRUE(IsUnicodeLetter('Z'));
  EXPECT_FALSE(IsUnicodeLetter('@'));
  EXPECT_FALSE(IsUnicodeLetter('['));
  EXPECT_TRUE(IsUnicodeLetter(0xE9));      // é
  EXPECT_TRUE(IsUnicodeLetter(0x4E2D));    // 中
  EXPECT_TRUE(IsUnicodeLetter(0x3042));    // あ
  EXPECT_TRUE(IsUnicodeLetter(0xD55C));    // 한
  EXPECT_TRUE(IsUnicodeLetter(0x0416));    // Ж
  EXPECT_FALSE(IsUnicodeLetter(0x1F600));  // 😀
  EXPECT_FALSE(IsUnicodeNumber(0x1F600));
  EXPECT_FALSE(IsUnicodeLetter(0x200D));   // zero-width joiner
  EXPECT_FALSE(IsUnicodeLetter(0x1F3FD));  // skin tone modifier
  EXPECT_TRUE(IsUnicodeNumber('7'));
  EXPECT_TRUE(IsUnicodeNumber(0x0663));  // Arabic-Indic three
  EXPECT_TRUE(IsUnicodeNumber(0x0966));  // Devanagari zero
  EXPECT_TRUE(IsUnicodeNumber(0xFF15));  // fullwidth five
  EXPECT_TRUE(IsUnicodeNumber(0x00BD));  // ½ (No)
  EXPECT_TRUE(IsUnicodeNumber(0x2167));  // Roman numeral eight (Nl)
  EXPECT_FALSE(IsUnicodeNumber('a'));
  for (uint32_t cp : {0x09u, 0x0Au, 0x0Du, 0x20u, 0xA0u, 0x3000u, 0x2003u, 0x2028u}) {
    EXPECT_TRUE(IsUnicodeSpace(cp)) << cp;
  }
  EXPECT_FALSE(IsUnicodeSpace(0x200B));  // zero-width space is not White_Space
  EXPECT_FALSE(IsUnicodeSpace('x'));
}

TEST(Unicode, DecodeUtf8) {
  const std::string s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";
  Utf8Char c = DecodeUtf8(s, 0);
  EXPECT_EQ(c.cp, 'a');
  EXPECT_EQ(c.len, 1);
  c = DecodeUtf8(s, 1);
  EXPECT_EQ(c.cp, 0xE9u);
  EXPECT_EQ(c.len, 2);
  c = DecodeUtf8(s, 3);
  EXPECT_EQ(c.cp, 0x4E2Du);
  EXPECT_EQ(c.len, 3);
  c = DecodeUtf8(s, 6);
  EXPECT_EQ(c.cp, 0x1F600u);
  EXPECT_EQ(c.len, 4);
  // Invalid: stray continuation, overlong '/', surrogate, truncated, above U+10FFFF.
  for (std::string bad :
       {"\x80", "\xC0\xAF", "\xED\xA0\x80", "\xE4\xB8", "\xF4\x90\x80\x80", "\xFF"}) {
    c = DecodeUtf8(bad, 0);
    EXPECT_FALSE(c.valid) << bad.size();
    EXPECT_EQ(c.len, 1);
  }
  std::string out;
  for (uint32_t cp : {0x41u, 0xE9u, 0x4E2Du, 0x1F600u}) AppendUtf8(cp, out);
  EXPECT_EQ(out, "A\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
}

struct SplitCase {
  PreTokenizerKind kind;
  std::string text;
  std::vector<std::string> pieces;
};

const std::vector<SplitCase>& SplitCases() {
  static const std::vector<SplitCase> cases = {
      // kLlama3
      {PreTokenizerKind::kLlama3,
       "I've 12345 apples!!\n\n  ok",
       {"I", "'ve", " ", "123", "45", " apples", "!!\n\n", " ", " ok"}},
      {PreTokenizerKind::kLlama3, "Hello, world!", {"Hello", ",", " world", "!"}},
      {PreTokenizerKind::kLlama3, "DON'T stop'S", {"DON", "'T", " stop", "'S"}},
      {PreTokenizerKind::kLlama3,
       "x = 3.14159;\n\treturn x;",
       {"x", " =", " ", "3", ".", "141", "59", ";\n", "\treturn", " x", ";"}},
      {PreTokenizerKind::kLlama3,
       "  leading and trailing  ",
       {" ", " leading", " and", " trailing", "  "}},
      {PreTokenizerKind::kLlama3, "a\r\n\r\nb", {"a", "\r\n\r\n", "b"}},
      {PreTokenizerKind::kLlama3, "tab\t\tsep", {"tab", "\t", "\tsep"}},
      {PreTokenizerKind::kLlama3, "你好世界 and 日本語", {"你好世界", " and", " 日本語"}},
      {PreTokenizerKind::kLlama3, "emoji 😀👍🏽 ok", {"emoji", " 😀👍🏽", " ok"}},
      {PreTokenizerKind::kLlama3, "café naïve Ünïcödé", {"café", " naïve", " Ünïcödé"}},
      {PreTokenizerKind::kLlama3,
       "٣٤٥٦ Arabic digits and ½ fraction",
       {"٣٤٥", "٦", " Arabic", " digits", " and", " ", "½", " fraction"}},
      {PreTokenizerKind::kLlama3, "line1\n   line2", {"line", "1", "\n", "  ", " line", "2"}},
      {PreTokenizerKind::kLlama3,
       "if (a<b) {\n  c++;\n}",
       {"if", " (", "a", "<b", ")", " {\n", " ", " c", "++;\n", "}"}},
      {PreTokenizerKind::kLlama3, "$100 and 7th", {"$", "100", " and", " ", "7", "th"}},
      {PreTokenizerKind::kLlama3, "...hello", {"...", "hello"}},
      {PreTokenizerKind::kLlama3, "end with space ", {"end", " with", " space", " "}},
      {PreTokenizerKind::kLlama3, "'ll 'D 're", {"'ll", " '", "D", " '", "re"}},
      // kQwen2
      {PreTokenizerKind::kQwen2,
       "I've 12345 apples!!\n\n  ok",
       {"I", "'ve", " ", "1", "2", "3", "4", "5", " apples", "!!\n\n", " ", " ok"}},
      {PreTokenizerKind::kQwen2, "Hello, world!", {"Hello", ",", " world", "!"}},
      {PreTokenizerKind::kQwen2, "DON'T stop'S", {"DON", "'T", " stop", "'S"}},
      {PreTokenizerKind::kQwen2,
       "x = 3.14159;\n\treturn x;",
       {"x", " =", " ", "3", ".", "1", "4", "1", "5", "9", ";\n", "\treturn", " x", ";"}},
      {PreTokenizerKind::kQwen2,
       "  leading and trailing  ",
       {" ", " leading", " and", " trailing", "  "}},
      {PreTokenizerKind::kQwen2, "a\r\n\r\nb", {"a", "\r\n\r\n", "b"}},
      {PreTokenizerKind::kQwen2, "tab\t\tsep", {"tab", "\t", "\tsep"}},
      {PreTokenizerKind::kQwen2, "你好世界 and 日本語", {"你好世界", " and", " 日本語"}},
      {PreTokenizerKind::kQwen2, "emoji 😀👍🏽 ok", {"emoji", " 😀👍🏽", " ok"}},
      {PreTokenizerKind::kQwen2, "café naïve Ünïcödé", {"café", " naïve", " Ünïcödé"}},
      {PreTokenizerKind::kQwen2,
       "٣٤٥٦ Arabic digits and ½ fraction",
       {"٣", "٤", "٥", "٦", " Arabic", " digits", " and", " ", "½", " fraction"}},
      {PreTokenizerKind::kQwen2, "line1\n   line2", {"line", "1", "\n", "  ", " line", "2"}},
      {PreTokenizerKind::kQwen2,
       "if (a<b) {\n  c++;\n}",
       {"if", " (", "a", "<b", ")", " {\n", " ", " c", "++;\n", "}"}},
      {PreTokenizerKind::kQwen2, "$100 and 7th", {"$", "1", "0", "0", " and", " ", "7", "th"}},
      {PreTokenizerKind::kQwen2, "...hello", {"...", "hello"}},
      {PreTokenizerKind::kQwen2, "end with space ", {"end", " with", " space", " "}},
      {PreTokenizerKind::kQwen2, "'ll 'D 're", {"'ll", " '", "D", " '", "re"}},
      // kGpt2
      {PreTokenizerKind::kGpt2,
       "I've 12345 apples!!\n\n  ok",
       {"I", "'ve", " 12345", " apples", "!!", "\n\n ", " ok"}},
      {PreTokenizerKind::kGpt2, "Hello, world!", {"Hello", ",", " world", "!"}},
      {PreTokenizerKind::kGpt2, "DON'T stop'S", {"DON", "'", "T", " stop", "'", "S"}},
      {PreTokenizerKind::kGpt2,
       "x = 3.14159;\n\treturn x;",
       {"x", " =", " 3", ".", "14159", ";", "\n", "\t", "return", " x", ";"}},
      {PreTokenizerKind::kGpt2,
       "  leading and trailing  ",
       {" ", " leading", " and", " trailing", "  "}},
      {PreTokenizerKind::kGpt2, "a\r\n\r\nb", {"a", "\r\n\r", "\n", "b"}},
      {PreTokenizerKind::kGpt2, "tab\t\tsep", {"tab", "\t", "\t", "sep"}},
      {PreTokenizerKind::kGpt2, "你好世界 and 日本語", {"你好世界", " and", " 日本語"}},
      {PreTokenizerKind::kGpt2, "emoji 😀👍🏽 ok", {"emoji", " 😀👍🏽", " ok"}},
      {PreTokenizerKind::kGpt2, "café naïve Ünïcödé", {"café", " naïve", " Ünïcödé"}},
      {PreTokenizerKind::kGpt2,
       "٣٤٥٦ Arabic digits and ½ fraction",
       {"٣٤٥٦", " Arabic", " digits", " and", " ½", " fraction"}},
      {PreTokenizerKind::kGpt2, "line1\n   line2", {"line", "1", "\n  ", " line", "2"}},
      {PreTokenizerKind::kGpt2,
       "if (a<b) {\n  c++;\n}",
       {"if", " (", "a", "<", "b", ")", " {", "\n ", " c", "++;", "\n", "}"}},
      {PreTokenizerKind::kGpt2, "$100 and 7th", {"$", "100", " and", " 7", "th"}},
      {PreTokenizerKind::kGpt2, "...hello", {"...", "hello"}},
      {PreTokenizerKind::kGpt2, "end with space ", {"end", " with", " space", " "}},
      {PreTokenizerKind::kGpt2, "'ll 'D 're", {"'ll", " '", "D", " '", "re"}},
  };
  return cases;
}

TEST(PreTokenizer, ExpectedSplits) {
  int counts[3] = {0, 0, 0};
  for (const SplitCase& c : SplitCases()) {
    EXPECT_EQ(Split(c.kind, c.text), c.pieces) << "text: " << c.text;
    ++counts[static_cast<int>(c.kind)];
  }
  EXPECT_GE(counts[static_cast<int>(PreTokenizerKind::kLlama3)], 10);
  EXPECT_GE(counts[static_cast<int>(PreTokenizerKind::kQwen2)], 10);
}

// One or more quirk-bearing strings per family added for llama.cpp's full list of names; the
// pieces are what llama.cpp c392e509's unicode_regex_split returns for the family's expressions.
TEST(PreTokenizer, LlamaCppFamilySplits) {
  const SplitCase cases[] = {
      {PreTokenizerKind::kDefault, "Hello, world!", {"Hello", ",", " world", "!"}},
      {PreTokenizerKind::kDefault,
       "a (b) 12345 c",
       {"a", " ", "(", "b", ")", " ", "123", "45", " c"}},
      {PreTokenizerKind::kDefault, " $x+=1;", {" ", "$", "x", "+=", "1", ";"}},
      {PreTokenizerKind::kDefault, "`tick` ~tilde~", {"`", "tick", "`", " ", "~", "tilde", "~"}},
      {PreTokenizerKind::kDefault, "x  \n y", {"x", "  \n", " y"}},
      {PreTokenizerKind::kFalcon, "`tick` ~tilde~", {"`", "tick", "`", " ", "~", "tilde", "~"}},
      {PreTokenizerKind::kFalcon, "1234567 and 12", {"123", "456", "7", " and", " 12"}},
      {PreTokenizerKind::kFalcon,
       "He said: \"ok\"...",
       {"He", " said", ":", " ", "\"", "ok", "\"..."}},
      {PreTokenizerKind::kStarcoder, "abc123 ٣٤", {"abc", "1", "2", "3", " ", "٣", "٤"}},
      {PreTokenizerKind::kStarcoder, "x = 3.14;", {"x", " =", " ", "3", ".", "1", "4", ";"}},
      {PreTokenizerKind::kStarcoder, " 2025", {" ", "2", "0", "2", "5"}},
      {PreTokenizerKind::kChameleon,
       "<sentinel:12>IMGIMGABZ IMGIMGABCDEZ",
       {"<", "sentinel", ":", "1", "2", ">", "IMGIMGABZ", " IMGIMGABCDEZ"}},
      {PreTokenizerKind::kChameleon, "a     b\tc\n", {"a", "    ", " b", "\t", "c", "\n"}},
      {PreTokenizerKind::kChameleon,
       "x=1, y=\"2\"",
       {"x", "=", "1", ",", " y", "=", "\"", "2", "\""}},
      {PreTokenizerKind::kChameleon, "12 apples", {"1", "2", " apples"}},
      {PreTokenizerKind::kDeepseekV3, "12345 你好カナ", {"123", "45", " ", "你好カナ"}},
      {PreTokenizerKind::kDeepseekV3, "~abc a~b ~~", {"~abc", " a", "~b", " ", "~~"}},
      {PreTokenizerKind::kDeepseekV3, ".hello (x)", {".hello", " (", "x", ")"}},
      {PreTokenizerKind::kDeepseekV3, "naïve é कि", {"naïve", " é", " कि"}},
      {PreTokenizerKind::kDeepseekV3, "a\n\n b", {"a", "\n\n", " b"}},
      {PreTokenizerKind::kDeepseekLlm, "Hello, world!  ", {"Hello", ",", " world", "!", "  "}},
      {PreTokenizerKind::kDeepseekLlm, "你好　世界 12345", {"你好", "　", "世界", " ", "12345"}},
      {PreTokenizerKind::kDeepseekLlm, "Ωmega Привет ∑x", {"Ω", "mega", " Привет", " ", "∑", "x"}},
      {PreTokenizerKind::kDeepseekLlm, "a\r\nb ！？", {"a", "\r", "\n", "b", " ！？"}},
      {PreTokenizerKind::kDeepseekCoder, "a 你好", {"a", " ", "你好"}},
      {PreTokenizerKind::kDeepseekCoder, "x　y 你好", {"x", "　y", " ", "你好"}},
      {PreTokenizerKind::kBloom,
       "Hello, world! (yes|no)",
       {"Hello", ",", " world", "! (", "yes", "|", "no", ")"}},
      {PreTokenizerKind::kBloom, "a  b…c。d，e", {"a", " ", " b", "…", "c", "。", "d", "，", "e"}},
      {PreTokenizerKind::kBloom, " 12 ٣", {" 12", " ٣"}},
      {PreTokenizerKind::kViking, "abc123 x", {"abc", "1", "2", "3", " x"}},
      {PreTokenizerKind::kViking, "Hello, 2025!", {"Hello", ",", " ", "2", "0", "2", "5", "!"}},
      {PreTokenizerKind::kTekken,
       "HelloWorld HTTPServer iPhone",
       {"Hello", "World", " HTTPServer", " i", "Phone"}},
      {PreTokenizerKind::kTekken, "ÄBC äBC ÜberMan", {"Ä", "BC", " ä", "BC", " Über", "Man"}},
      {PreTokenizerKind::kTekken, "a/b/\nc 12", {"a", "/b", "/\n", "c", " ", "1", "2"}},
      {PreTokenizerKind::kTekken, "I'M ok", {"I", "'M", " ok"}},
  };
  for (const SplitCase& c : cases) {
    EXPECT_EQ(Split(c.kind, c.text), c.pieces) << "text: " << c.text;
  }
}

TEST(PreTokenizer, ZwjEmojiStaysTogether) {
  // 👩‍👩‍👧 (three emoji joined by U+200D) after a space: one punctuation-class run.
  const std::string family =
      "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7";
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "hi " + family + "!"),
            (std::vector<std::string>{"hi", " " + family + "!"}));
}

TEST(PreTokenizer, NamesMapToRules) {
  for (const char* name : {"llama3", "llama-bpe", "llama-v3", "smaug-bpe"}) {
    auto k = PreTokenizerFromName(name);
    ASSERT_TRUE(k.ok()) << name;
    EXPECT_EQ(*k, PreTokenizerKind::kLlama3);
  }
  for (const char* name : {"qwen2", "deepseek-r1-qwen"}) {
    auto k = PreTokenizerFromName(name);
    ASSERT_TRUE(k.ok()) << name;
    EXPECT_EQ(*k, PreTokenizerKind::kQwen2);
  }
  for (const char* name : {"gpt-2", "gpt2", "mpt", "jina-v2-code"}) {
    auto k = PreTokenizerFromName(name);
    ASSERT_TRUE(k.ok()) << name;
    EXPECT_EQ(*k, PreTokenizerKind::kGpt2);
  }
  // llama.cpp's "default" is its own list of expressions, not GPT-2's.
  ASSERT_TRUE(PreTokenizerFromName("default").ok());
  EXPECT_EQ(*PreTokenizerFromName("default"), PreTokenizerKind::kDefault);
  auto bad = PreTokenizerFromName("falcon4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("falcon4"), std::string::npos);
  EXPECT_NE(bad.message().find("llama-bpe"), std::string::npos);
  EXPECT_NE(bad.message().find("qwen2"), std::string::npos);
}

TEST(PreTokenizer, PiecesCoverArbitraryBytes) {
  std::mt19937 rng(7);
  const std::vector<std::string> atoms = {"a",
                                          "Z",
                                          " ",
                                          "  ",
                                          "\n",
                                          "\r",
                                          "\t",
                                          "'",
                                          "'s",
                                          "7",
                                          "\xC3\xA9",
                                          "\xE4\xB8\xAD",
                                          "\xF0\x9F\x98\x80",
                                          "!",
                                          "\x80",
                                          "\xFF",
                                          "\xE4",
                                          ".",
                                          "\xE2\x80\x8D"};
  for (int rep = 0; rep < 300; ++rep) {
    std::string text;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
    for (auto kind :
         {PreTokenizerKind::kGpt2, PreTokenizerKind::kLlama3, PreTokenizerKind::kQwen2}) {
      std::string joined;
      for (std::string_view p : PreTokenize(kind, text)) {
        EXPECT_FALSE(p.empty());
        joined += p;
      }
      EXPECT_EQ(joined, text);
    }
  }
}

}  // namespace
}  // namespace primekv

namespace primekv {
namespace {

// NFC by hand from the Unicode data: composition, canonical reordering, exclusions,
// singletons, Hangul, and pass-through of invalid bytes.
TEST(Unicode, NormalizeNfc) {
  EXPECT_EQ(NormalizeNfc("plain ascii"), "plain ascii");
  EXPECT_EQ(NormalizeNfc("e\xCC\x81"), "\xC3\xA9");  // e + U+0301 -> é
  // a + U+0302 + U+0323: reordered to the dot below (220) before the circumflex (230), then
  // composed to U+1EAD ậ.
  EXPECT_EQ(NormalizeNfc("a\xCC\x82\xCC\xA3"), "\xE1\xBA\xAD");
  EXPECT_EQ(NormalizeNfc("\xE2\x84\xAB"), "\xC3\x85");  // U+212B ANGSTROM SIGN -> U+00C5
  // U+0958 is excluded from composition: NFC keeps U+0915 U+093C.
  EXPECT_EQ(NormalizeNfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");
  // Hangul jamo L V T -> syllable U+D55C 한.
  EXPECT_EQ(NormalizeNfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");
  // A mark after another starter does not reach back: "ab" + U+0301 -> a, b́ (no b́ composite).
  EXPECT_EQ(NormalizeNfc("ab\xCC\x81"), "ab\xCC\x81");
  // Invalid bytes pass through and block composition.
  EXPECT_EQ(NormalizeNfc("e\xFF\xCC\x81"), "e\xFF\xCC\x81");
  EXPECT_EQ(NormalizeNfc("\xC3\xA9\xCC\x81"), "\xC3\xA9\xCC\x81");  // é + U+0301: no composite
}

}  // namespace
}  // namespace primekv
