// Synthetic tokenizer specs, and the decode(encode(s)) == s round trip for every tokenizer kind.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "primekv/tokenizer/tokenizer.h"
#include "test_vocabs.h"
#include "tokenizer/tokenizer_internal.h"

namespace primekv {
namespace {

using testing_tok::RoundTripCorpus;

Tokenizer MakeTokenizer(TokenizerSpec spec) {
  auto t = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.message();
  return std::move(t).value();
}

void ExpectRoundTrip(const Tokenizer& tok, const std::string& label) {
  for (const std::string& text : RoundTripCorpus()) {
    for (bool bos : {false, true}) {
      const std::vector<Token> ids = tok.Encode(text, bos);
      for (Token t : ids) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, tok.vocab_size());
      }
      EXPECT_EQ(tok.Decode(ids), text) << label << " text: " << text;
    }
  }
}

TEST(RoundTrip, HandBuiltVocabularies) {
  ExpectRoundTrip(MakeTokenizer(testing_tok::HandLlama::Spec()), "hand llama");
  for (const char* pre : {"llama3", "qwen2", "gpt2"}) {
    ExpectRoundTrip(MakeTokenizer(testing_tok::HandGpt2::Spec(pre)),
                    std::string("hand gpt2 ") + pre);
  }
}

TEST(Synthetic, LlamaLayout) {
  auto spec = MakeSyntheticTokenizerSpec("llama", 1000);
  ASSERT_TRUE(spec.ok()) << spec.message();
  const TokenizerSpec& s = *spec;
  ASSERT_EQ(s.tokens.size(), 1000u);
  EXPECT_EQ(s.tokens[0], "<unk>");
  EXPECT_EQ(s.tokens[1], "<s>");
  EXPECT_EQ(s.tokens[2], "</s>");
  EXPECT_EQ(s.token_types[0], static_cast<int32_t>(TokenType::kUnknown));
  EXPECT_EQ(s.token_types[1], static_cast<int32_t>(TokenType::kControl));
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(s.tokens[static_cast<size_t>(3 + b)],
              tokenizer_internal::ByteTokenText(static_cast<uint8_t>(b)));
    EXPECT_EQ(s.token_types[static_cast<size_t>(3 + b)], static_cast<int32_t>(TokenType::kByte));
  }
  EXPECT_EQ(s.tokens[3 + 0x0A], "<0x0A>");
  EXPECT_EQ(s.unk, 0);
  EXPECT_EQ(s.bos, 1);
  EXPECT_EQ(s.eos, 2);
  EXPECT_TRUE(s.add_bos);
  EXPECT_TRUE(s.add_space_prefix);
  for (size_t i = 260; i < s.tokens.size(); ++i) {
    EXPECT_LT(s.scores[i], s.scores[i - 1]) << i;  // pieces in descending score order
  }
  const std::set<std::string> unique(s.tokens.begin(), s.tokens.end());
  EXPECT_EQ(unique.size(), s.tokens.size());
  // Merges were learned: common words are single pieces.
  const Tokenizer tok = MakeTokenizer(s);
  EXPECT_EQ(tok.Encode("the", false).size(), 1u);
  EXPECT_EQ(tok.Encode("the", false)[0], tok.FindToken("\xE2\x96\x81the"));
  const std::string sentence = "The children followed the river down to the sea.";
  EXPECT_LT(tok.Encode(sentence, false).size(), sentence.size() / 2);
}

TEST(Synthetic, Gpt2Layout) {
  auto spec = MakeSyntheticTokenizerSpec("gpt2", 1000);
  ASSERT_TRUE(spec.ok()) << spec.message();
  const TokenizerSpec& s = *spec;
  ASSERT_EQ(s.tokens.size(), 1000u);
  EXPECT_EQ(s.pre, "llama3");
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(s.tokens[static_cast<size_t>(b)],
              tokenizer_internal::ByteLevelChar(static_cast<uint8_t>(b)));
  }
  EXPECT_EQ(s.tokens[static_cast<size_t>(s.bos)], "<|begin_of_text|>");
  EXPECT_EQ(s.tokens[static_cast<size_t>(s.eos)], "<|end_of_text|>");
  EXPECT_EQ(s.tokens[static_cast<size_t>(s.eot)], "<|eot_id|>");
  EXPECT_EQ(s.tokens[static_cast<size_t>(s.bos) + 8], "[/INST]");
  EXPECT_EQ(s.token_types[static_cast<size_t>(s.bos)], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(s.tokens.back(), "<|reserved_" + std::to_string(999 - s.bos - 9) + "|>");
  EXPECT_GE(s.merges.size(), static_cast<size_t>(s.bos) - 256);  // >= one merge per new token
  EXPECT_TRUE(s.add_bos);
  const std::set<std::string> unique(s.tokens.begin(), s.tokens.end());
  EXPECT_EQ(unique.size(), s.tokens.size());
  const Tokenizer tok = MakeTokenizer(s);
  EXPECT_EQ(tok.Encode(" the", false).size(), 1u);
  EXPECT_EQ(tok.Encode("<|eot_id|>", false, true), (std::vector<Token>{s.eot}));
  EXPECT_EQ(tok.Encode("[INST]", false, true), (std::vector<Token>{s.bos + 7}));
  EXPECT_TRUE(tok.IsEndOfGeneration(s.eot));
  EXPECT_TRUE(tok.IsEndOfGeneration(tok.FindToken("<|im_end|>")));
  EXPECT_EQ(DetectChatFormat(tok), ChatFormat::kLlama3);
}

TEST(Synthetic, SizesRoundTripAndDeterminism) {
  for (const char* model : {"llama", "gpt2"}) {
    for (int size : {300, 512, 2000, 8192, 32000, 160000}) {
      const auto start = std::chrono::steady_clock::now();
      auto a = MakeSyntheticTokenizerSpec(model, size);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ASSERT_TRUE(a.ok()) << model << " " << size << ": " << a.message();
      EXPECT_LT(seconds, 20.0) << model << " " << size;
      EXPECT_EQ(a->tokens.size(), static_cast<size_t>(size));
      const Tokenizer tok = MakeTokenizer(*a);
      ExpectRoundTrip(tok, std::string(model) + " " + std::to_string(size));
      if (size == 512 || size == 32000) {
        auto b = MakeSyntheticTokenizerSpec(model, size);
        ASSERT_TRUE(b.ok());
        EXPECT_EQ(a->tokens, b->tokens);
        EXPECT_EQ(a->scores, b->scores);
        EXPECT_EQ(a->token_types, b->token_types);
        EXPECT_EQ(a->merges, b->merges);
        EXPECT_EQ(a->bos, b->bos);
      }
    }
  }
}

TEST(Synthetic, ManyReservedSpecialsParseQuickly) {
  auto spec = MakeSyntheticTokenizerSpec("gpt2", 160000);
  ASSERT_TRUE(spec.ok());
  const Tokenizer tok = MakeTokenizer(*spec);
  const Token reserved = tok.FindToken("<|reserved_100|>");
  ASSERT_GE(reserved, 0);
  EXPECT_EQ(tok.Encode("<|reserved_100|>", false, true), (std::vector<Token>{reserved}));
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "<|reserved_";
  text += "<|eot_id|>";
  const std::vector<Token> ids = tok.Encode(text, false, true);
  EXPECT_EQ(ids.back(), spec->eot);
  EXPECT_EQ(tok.Decode(ids), text.substr(0, text.size() - 10));
}

TEST(Synthetic, LargerVocabulariesCompressBetter) {
  const std::string text = "The baker counted the coins twice, and the children read about stars.";
  size_t previous = text.size() + 1;
  for (int size : {300, 600, 1200}) {
    const Tokenizer tok = MakeTokenizer(MakeSyntheticTokenizerSpec("gpt2", size).value());
    const size_t n = tok.Encode(text, false).size();
    EXPECT_LT(n, previous) << size;
    previous = n;
  }
}

TEST(Synthetic, Errors) {
  auto small = MakeSyntheticTokenizerSpec("llama", 259);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.message().find("vocab_size >= 260"), std::string::npos) << small.message();
  EXPECT_TRUE(MakeSyntheticTokenizerSpec("llama", 260).ok());
  auto small2 = MakeSyntheticTokenizerSpec("gpt2", 264);
  ASSERT_FALSE(small2.ok());
  EXPECT_NE(small2.message().find("vocab_size >= 265"), std::string::npos) << small2.message();
  EXPECT_TRUE(MakeSyntheticTokenizerSpec("gpt2", 265).ok());
  auto bad = MakeSyntheticTokenizerSpec("wordpiece", 1000);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("wordpiece"), std::string::npos);
  EXPECT_FALSE(MakeSyntheticTokenizerSpec("gpt2", -1).ok());
}

}  // namespace
}  // namespace primekv
