// SentencePiece-style ("llama") tokenizer on a hand-built scored vocabulary. Every expected id
// list below was worked out by hand from the scores in test_vocabs.h: repeatedly join the adjacent
// pair whose concatenation has the highest score (leftmost on ties).
#include <gtest/gtest.h>

#include <vector>

#include "primekv/tokenizer/tokenizer.h"
#include "test_vocabs.h"

namespace primekv {
namespace {

using testing_tok::HandLlama;
using V = std::vector<Token>;

Tokenizer HandLlamaTokenizer(TokenizerSpec spec = HandLlama::Spec()) {
  auto t = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.message();
  return std::move(t).value();
}

TEST(LlamaTokenizer, HandComputedMerges) {
  const Tokenizer tok = HandLlamaTokenizer();
  using H = HandLlama;
  struct Case {
    const char* text;
    V ids;
  };
  const Case cases[] = {
      // ▁t (-1), then he (-2), then ▁t+he = ▁the (-3).
      {"the", {H::kThe}},
      {"the the", {H::kThe, H::kThe}},
      // bc (-5) beats ab (-10); then a+bc = abc; ▁abc is no piece.
      {"abc", {H::kSpace, H::kAbc}},
      // bc (-5) beats cd (-6) and ab (-10); then abc; abcd is no piece.
      {"abcd", {H::kSpace, H::kAbc, H::kD}},
      {"acd", {H::kSpace, H::kA, H::kCd}},
      {"cdx", {H::kSpace, H::kCd, H::kX}},
      {"abcabc", {H::kSpace, H::kAbc, H::kAbc}},
      // xy and yx tie at -8: the leftmost pair wins.
      {"xyx", {H::kSpace, H::kXy, H::kX}},
      {"yxy", {H::kSpace, H::kYx, H::kY}},
      // xy, yx, xy all tie: leftmost xy first, which kills yx; then the second xy.
      {"xyxy", {H::kSpace, H::kXy, H::kXy}},
      // ▁é is a piece: the multi-byte character merges with the space prefix.
      {"\xC3\xA9", {H::kSpEacute}},
      {"th\xC3\xA9x", {H::kT, H::kH, H::kEacute, H::kX}},
      // No piece for these characters: byte fallback, one token per UTF-8 byte.
      {"q", {H::kSpace, H::Byte('q')}},
      {"\xC3\xBC", {H::kSpace, H::Byte(0xC3), H::Byte(0xBC)}},
      {"\xF0\x9F\x98\x80", {H::kSpace, H::Byte(0xF0), H::Byte(0x9F), H::Byte(0x98), H::Byte(0x80)}},
      // Each space is its own ▁.
      {"a  b", {H::kSpace, H::kA, H::kSpace, H::kSpace, H::kB}},
      {" the", {H::kSpace, H::kThe}},
      {"\n", {H::kSpace, H::Byte('\n')}},
      // Control texts are plain text unless parse_special; user-defined ones are matched in any
      // text, as llama.cpp and Hugging Face do (the space prefix goes before the text they start).
      {"<|end|>",
       {H::kSpace, H::Byte('<'), H::Byte('|'), H::kE, H::Byte('n'), H::kD, H::Byte('|'),
        H::Byte('>')}},
      {"<tool>", {H::kTool}},
      {"", {}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(tok.Encode(c.text, /*add_bos=*/false), c.ids) << "text: " << c.text;
  }
}

TEST(LlamaTokenizer, BosAndEos) {
  TokenizerSpec spec = HandLlama::Spec();
  const Tokenizer tok = HandLlamaTokenizer(spec);
  EXPECT_EQ(tok.Encode("abc", true), (V{1, HandLlama::kSpace, HandLlama::kAbc}));
  EXPECT_EQ(tok.Encode("", true), (V{1}));
  spec.add_bos = false;
  spec.add_eos = true;
  const Tokenizer eos = HandLlamaTokenizer(spec);
  EXPECT_EQ(eos.Encode("the", true), (V{HandLlama::kThe, 2}));
  EXPECT_EQ(eos.Encode("the", false), (V{HandLlama::kThe}));
}

TEST(LlamaTokenizer, NoSpacePrefix) {
  TokenizerSpec spec = HandLlama::Spec();
  spec.add_space_prefix = false;
  const Tokenizer tok = HandLlamaTokenizer(spec);
  // t h e -> t he; "the" (without ▁) is no piece.
  EXPECT_EQ(tok.Encode("the", false), (V{HandLlama::kTch, HandLlama::kHe}));
  EXPECT_EQ(tok.Encode("abc", false), (V{HandLlama::kAbc}));
  EXPECT_EQ(tok.Decode(V{HandLlama::kThe}), " the");  // nothing to strip without the prefix
}

TEST(LlamaTokenizer, SpecialTokens) {
  const Tokenizer tok = HandLlamaTokenizer();
  using H = HandLlama;
  // Longest match: "<|end|>x" wins over "<|end|>". Text after a special gets no space prefix.
  EXPECT_EQ(tok.Encode("<tool>abc<|end|>x", false, true), (V{H::kTool, H::kAbc, H::kEndLong}));
  EXPECT_EQ(tok.Encode("<|end|>", false, true), (V{H::kEnd}));
  EXPECT_EQ(tok.Encode("ab<|end|>", false, true), (V{H::kSpace, H::kAb, H::kEnd}));
  EXPECT_EQ(tok.Encode("<s>the</s>", true, true), (V{1, 1, H::kTch, H::kHe, 2}));
  // <unk> and byte tokens are never parsed as specials.
  EXPECT_EQ(tok.Encode("<0x41>", false, true)[0], H::kSpace);
  EXPECT_EQ(tok.Decode(tok.Encode("<unk>", false, true)), "<unk>");
}

TEST(LlamaTokenizer, UnknownWithoutByteTokens) {
  TokenizerSpec spec = HandLlama::Spec();
  for (int b = 0; b < 256; ++b)
    spec.tokens[static_cast<size_t>(3 + b)] = "<byte" + std::to_string(b) + ">";
  const Tokenizer tok = HandLlamaTokenizer(spec);
  EXPECT_EQ(tok.Encode("qa", false), (V{HandLlama::kSpace, 0, HandLlama::kA}));
  EXPECT_EQ(tok.Decode(V{0}), "\xEF\xBF\xBD");
}

TEST(LlamaTokenizer, ByteFallbackOfEscapedSpaceIsSpace) {
  // Without a "▁" piece, an escaped space falls back to the byte of the space it stands for.
  TokenizerSpec spec = HandLlama::Spec();
  spec.tokens[static_cast<size_t>(HandLlama::kSpace)] = "<not-a-space>";
  const Tokenizer tok = HandLlamaTokenizer(spec);
  using H = HandLlama;
  const V ids = tok.Encode("q q", false);
  EXPECT_EQ(ids, (V{H::Byte(' '), H::Byte('q'), H::Byte(' '), H::Byte('q')}));
  EXPECT_EQ(tok.Decode(ids), "q q");
  EXPECT_EQ(tok.Decode(ids, false), " q q");
}

TEST(LlamaTokenizer, Decode) {
  const Tokenizer tok = HandLlamaTokenizer();
  using H = HandLlama;
  EXPECT_EQ(tok.Decode(V{1, H::kThe, H::kThe}), "the the");
  EXPECT_EQ(tok.Decode(V{H::kThe}, /*strip_leading_space=*/false), " the");
  EXPECT_EQ(tok.Decode(V{1, H::kThe}, /*strip_leading_space=*/false), "the");
  EXPECT_EQ(tok.Decode(V{H::kSpace, H::Byte(0xC3), H::Byte(0xBC)}), "\xC3\xBC");
  EXPECT_EQ(tok.Decode(V{H::Byte(0xF0), H::Byte(0x9F), H::Byte(0x98), H::Byte(0x80)}),
            "\xF0\x9F\x98\x80");
  EXPECT_EQ(tok.Decode(V{H::kEnd, 2, 1}), "");
  EXPECT_EQ(tok.Decode(V{H::kTool}), "<tool>");
  EXPECT_EQ(tok.Decode(V{-5, 100000}), "");  // out-of-range ids decode to nothing
  EXPECT_EQ(tok.TokenToPiece(H::kT), " t");
  EXPECT_EQ(tok.TokenToPiece(H::Byte('A')), "A");
  EXPECT_EQ(tok.TokenToPiece(1), "");
  EXPECT_EQ(tok.token_type(H::Byte(0)), TokenType::kByte);
  EXPECT_EQ(tok.token_type(1), TokenType::kControl);
  EXPECT_EQ(tok.FindToken("\xE2\x96\x81the"), H::kThe);
  EXPECT_EQ(tok.FindToken("nope"), -1);
  // Streaming: pieces concatenate to the unstripped decode.
  const V ids = tok.Encode("the abc \xC3\xBC", false);
  std::string streamed;
  for (Token t : ids) streamed += tok.TokenToPiece(t);
  EXPECT_EQ(streamed, tok.Decode(ids, false));
}

TEST(LlamaTokenizer, ByteTokensInferredWithoutTypes) {
  TokenizerSpec spec = HandLlama::Spec();
  spec.token_types.clear();
  const Tokenizer tok = HandLlamaTokenizer(spec);
  EXPECT_EQ(tok.Encode("q", false), (V{HandLlama::kSpace, HandLlama::Byte('q')}));
  EXPECT_EQ(tok.Decode(V{HandLlama::Byte('q')}), "q");
}

TEST(LlamaTokenizer, LongInputIsFast) {
  const Tokenizer tok = HandLlamaTokenizer();
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "the abcd xyx \xC3\xA9 ";
  const V ids = tok.Encode(text, false);
  EXPECT_EQ(tok.Decode(ids), text);
  // A single huge run with no spaces exercises the merge queue on one long sequence.
  const std::string run(200000, 'c');
  EXPECT_EQ(tok.Decode(tok.Encode(run, false)), run);
}

// Words are encoded one at a time only when no piece joins a word to the spaces after it. A
// vocabulary with such a piece ("b▁", better scored than "▁a") is encoded whole: the piece spans
// the word boundary, as SentencePiece's whole-text merges give it.
TEST(LlamaTokenizer, PieceAcrossWordsIsMerged) {
  TokenizerSpec spec = HandLlama::Spec();
  const Token b_space = static_cast<Token>(spec.tokens.size());
  spec.tokens.push_back("b\xE2\x96\x81");
  spec.scores.push_back(-1.5f);
  spec.token_types.push_back(static_cast<int32_t>(TokenType::kNormal));
  const Tokenizer whole = HandLlamaTokenizer(spec);
  using H = HandLlama;
  EXPECT_EQ(whole.Encode("b a", false), (V{H::kSpace, b_space, H::kA}));
  // Without that piece the same text splits at the word, with the same ids as before.
  EXPECT_EQ(HandLlamaTokenizer().Encode("b a", false), (V{H::kSpace, H::kB, H::kSpace, H::kA}));
}

// Word-at-a-time merging gives the ids of whole-text merging: the same text, with and without
// a piece that forces the whole-text path but never matches it ("q▁q"; q has no piece).
TEST(LlamaTokenizer, WordsApartEqualWhole) {
  TokenizerSpec spec = HandLlama::Spec();
  spec.tokens.push_back("q\xE2\x96\x81q");
  spec.scores.push_back(-0.5f);
  spec.token_types.push_back(static_cast<int32_t>(TokenType::kNormal));
  const Tokenizer whole = HandLlamaTokenizer(spec);
  const Tokenizer apart = HandLlamaTokenizer();
  std::string text;
  for (int i = 0; i < 500; ++i)
    text +=
        "the  abcd xyxy\tcdx   \xC3\xA9"
        "abc ";
  EXPECT_EQ(apart.Encode(text, true), whole.Encode(text, true));
}

}  // namespace
}  // namespace primekv
