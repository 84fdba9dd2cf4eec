// Hand-built vocabularies and a round-trip corpus shared by the tokenizer tests.
#pragma once

#include <string>
#include <vector>

#include "primekv/tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

namespace primekv::testing_tok {

// Text covering what tokenizers get wrong: code with tabs and braces, digit runs, runs of spaces
// and newlines, emoji (with ZWJ sequences and modifiers), CJK, accented Latin, invalid UTF-8.
inline std::vector<std::string> RoundTripCorpus() {
  return {
      "",
      "Hello, world! This is a simple English sentence.",
      "Once upon a time, there was a little girl named Lily. She loved to play outside.",
      "int main(int argc, char** argv) {\n\tif (argc > 1) {\n\t\treturn argc * 2;\n\t}\n\treturn "
      "0;\n}\n",
      "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n",
      "3.14159 2718281828 1,000,000 0x1F 007 42nd 1e-9",
      "a    b\n\n\n\nc  \n \n  d   ",
      "   ",
      " leading space",
      "trailing space ",
      "\t\ttabs\tand\r\nCRLF\r\n",
      "I \xE2\x9D\xA4\xEF\xB8\x8F \xF0\x9F\x8D\x95! family: "
      "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7\xE2\x80\x8D\xF0\x9F"
      "\x91\xA6"
      " thumbs \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83"
      "\x88"
      "\xE3\x81\xA8\xE4\xB8\xAD\xE6\x96\x87\xEF\xBC\x8C\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4\xE3\x80"
      "\x82",
      "Cr\xC3\xA8me br\xC3\xBBl\xC3\xA9"
      "e \xC3\xA0 la fran\xC3\xA7"
      "aise, \xC3\x85ngstr\xC3\xB6m, "
      "Zo\xC3\xAB, na\xC3\xAFve fa\xC3\xA7"
      "ade",
      "DON'T stop, it's what we're doing; they'll've I'd",
      "<s> </s> <unk> <|eot_id|> [INST] <0x41>",
      "raw bytes \xFF\xFE\x80 and a truncated \xE4\xB8",
      "\n",
      "x",
  };
}

// A SentencePiece-style vocabulary small enough to work merges out by hand.
// Ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the pieces below.
struct HandLlama {
  static constexpr Token kT = 259;         // "▁t"      -1
  static constexpr Token kHe = 260;        // "he"      -2
  static constexpr Token kThe = 261;       // "▁the"    -3
  static constexpr Token kAb = 262;        // "ab"      -10
  static constexpr Token kBc = 263;        // "bc"      -5
  static constexpr Token kAbc = 264;       // "abc"     -20
  static constexpr Token kA = 265;         // "a"       -50
  static constexpr Token kB = 266;         // "b"       -51
  static constexpr Token kC = 267;         // "c"       -52
  static constexpr Token kSpace = 268;     // "▁"       -53
  static constexpr Token kTch = 269;       // "t"       -54
  static constexpr Token kH = 270;         // "h"       -55
  static constexpr Token kE = 271;         // "e"       -56
  static constexpr Token kCd = 272;        // "cd"      -6
  static constexpr Token kD = 273;         // "d"       -57
  static constexpr Token kXy = 274;        // "xy"      -8
  static constexpr Token kYx = 275;        // "yx"      -8
  static constexpr Token kX = 276;         // "x"       -60
  static constexpr Token kY = 277;         // "y"       -61
  static constexpr Token kEacute = 278;    // "é"       -62
  static constexpr Token kSpEacute = 279;  // "▁é"  -9
  static constexpr Token kTool = 280;      // "<tool>" user-defined
  static constexpr Token kEnd = 281;       // "<|end|>" control
  static constexpr Token kEndLong = 282;   // "<|end|>x" control (longer, same prefix)

  static Token Byte(int b) { return 3 + b; }

  static TokenizerSpec Spec() {
    TokenizerSpec s;
    s.model = "llama";
    auto add = [&](std::string text, float score, TokenType type) {
      s.tokens.push_back(std::move(text));
      s.scores.push_back(score);
      s.token_types.push_back(static_cast<int32_t>(type));
    };
    add("<unk>", 0, TokenType::kUnknown);
    add("<s>", 0, TokenType::kControl);
    add("</s>", 0, TokenType::kControl);
    for (int b = 0; b < 256; ++b) {
      add(tokenizer_internal::ByteTokenText(static_cast<uint8_t>(b)), 0, TokenType::kByte);
    }
    const std::string sp = "\xE2\x96\x81";
    const std::pair<std::string, float> pieces[] = {
        {sp + "t", -1},       {"he", -2}, {sp + "the", -3}, {"ab", -10}, {"bc", -5},
        {"abc", -20},         {"a", -50}, {"b", -51},       {"c", -52},  {sp, -53},
        {"t", -54},           {"h", -55}, {"e", -56},       {"cd", -6},  {"d", -57},
        {"xy", -8},           {"yx", -8}, {"x", -60},       {"y", -61},  {"\xC3\xA9", -62},
        {sp + "\xC3\xA9", -9}};
    for (const auto& [text, score] : pieces) add(text, score, TokenType::kNormal);
    add("<tool>", 0, TokenType::kUserDefined);
    add("<|end|>", 0, TokenType::kControl);
    add("<|end|>x", 0, TokenType::kControl);
    s.unk = 0;
    s.bos = 1;
    s.eos = 2;
    return s;
  }
};

// A byte-level BPE vocabulary: ids 0..255 are the byte characters in byte order, then one token
// per merge below (rank = position), then special tokens.
struct HandGpt2 {
  static constexpr Token kGt = 256;      // Ġ t
  static constexpr Token kHe = 257;      // h e
  static constexpr Token kGthe = 258;    // Ġt he
  static constexpr Token kLl = 259;      // l l
  static constexpr Token kEll = 260;     // e ll
  static constexpr Token kBell = 261;    // b ell
  static constexpr Token kGb = 262;      // Ġ b
  static constexpr Token kGbell = 263;   // Ġb ell
  static constexpr Token k12 = 264;      // 1 2
  static constexpr Token k123 = 265;     // 12 3
  static constexpr Token kOo = 266;      // o o
  static constexpr Token kGG = 267;      // Ġ Ġ
  static constexpr Token kNlNl = 268;    // Ċ Ċ
  static constexpr Token kEacute = 269;  // Ã ©   (é = C3 A9)
  static constexpr Token kAf = 270;      // a f
  static constexpr Token kCaf = 271;     // c af
  static constexpr Token kCafe = 272;    // caf Ã©
  static constexpr Token kBos = 273;     // <|begin_of_text|> control
  static constexpr Token kEot = 274;     // <|eot_id|> control
  static constexpr Token kEos = 275;     // <|end_of_text|> control
  static constexpr Token kTool = 276;    // <tool> user-defined

  static TokenizerSpec Spec(std::string pre = "llama3") {
    TokenizerSpec s;
    s.model = "gpt2";
    s.pre = std::move(pre);
    s.add_bos = true;
    s.add_space_prefix = false;
    for (int b = 0; b < 256; ++b) {
      s.tokens.push_back(tokenizer_internal::ByteLevelChar(static_cast<uint8_t>(b)));
    }
    const std::vector<std::string> merges = {"\xC4\xA0 t",
                                             "h e",
                                             "\xC4\xA0t he",
                                             "l l",
                                             "e ll",
                                             "b ell",
                                             "\xC4\xA0 b",
                                             "\xC4\xA0"
                                             "b ell",
                                             "1 2",
                                             "12 3",
                                             "o o",
                                             "\xC4\xA0 \xC4\xA0",
                                             "\xC4\x8A \xC4\x8A",
                                             "\xC3\x83 \xC2\xA9",
                                             "a f",
                                             "c af",
                                             "caf \xC3\x83\xC2\xA9"};
    for (const std::string& m : merges) {
      s.merges.push_back(m);
      std::string joined = m;
      joined.erase(joined.find(' ', 1), 1);
      s.tokens.push_back(joined);
    }
    s.token_types.assign(s.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
    for (const char* t : {"<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>"}) {
      s.tokens.push_back(t);
      s.token_types.push_back(static_cast<int32_t>(TokenType::kControl));
    }
    s.tokens.push_back("<tool>");
    s.token_types.push_back(static_cast<int32_t>(TokenType::kUserDefined));
    s.bos = kBos;
    s.eos = kEos;
    s.eot = kEot;
    return s;
  }
};

}  // namespace primekv::testing_tok
