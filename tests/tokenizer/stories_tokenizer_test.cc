// The real 512-piece SentencePiece vocabulary of stories260K.gguf. Expected ids come from a
// separate, deliberately naive reference (rescan all pairs after every merge) run over the
// vocabulary dumped from the file; "Once upon a time" is also documented in the model's README.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "primekv/gguf/gguf.h"
#include "primekv/tokenizer/tokenizer.h"
#include "test_vocabs.h"

namespace primekv {
namespace {

using V = std::vector<Token>;

class Stories : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = GgufFile::Open(std::string(PRIMEKV_SHARED_DIR) + "/models/stories260K.gguf");
    ASSERT_TRUE(file.ok()) << file.message();
    auto spec = TokenizerSpecFromGguf(*file);
    ASSERT_TRUE(spec.ok()) << spec.message();
    spec_ = std::make_unique<TokenizerSpec>(*spec);
    auto tok = Tokenizer::Create(*spec);
    ASSERT_TRUE(tok.ok()) << tok.message();
    tok_ = std::make_unique<Tokenizer>(std::move(tok).value());
  }
  std::unique_ptr<TokenizerSpec> spec_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(Stories, SpecFromGguf) {
  const TokenizerSpec& s = *spec_;
  EXPECT_EQ(s.model, "llama");
  EXPECT_EQ(s.pre, "default");
  ASSERT_EQ(s.tokens.size(), 512u);
  EXPECT_EQ(s.scores.size(), 512u);
  EXPECT_EQ(s.token_types.size(), 512u);
  EXPECT_EQ(s.tokens[0], "<unk>");
  EXPECT_EQ(s.tokens[1], "<s>");
  EXPECT_EQ(s.tokens[13], "<0x0A>");
  EXPECT_EQ(s.tokens[259], "\xE2\x96\x81t");
  EXPECT_EQ(s.scores[261], -2.0f);
  EXPECT_EQ(s.token_types[0], static_cast<int32_t>(TokenType::kUnknown));
  EXPECT_EQ(s.token_types[1], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(s.token_types[3], static_cast<int32_t>(TokenType::kByte));
  EXPECT_EQ(s.token_types[300], static_cast<int32_t>(TokenType::kNormal));
  EXPECT_EQ(s.unk, 0);
  EXPECT_EQ(s.bos, 1);
  EXPECT_EQ(s.eos, 2);
  EXPECT_EQ(s.eot, -1);
  EXPECT_EQ(s.pad, -1);  // stored as 0xFFFFFFFF
  EXPECT_TRUE(s.add_bos);
  EXPECT_FALSE(s.add_eos);
  EXPECT_TRUE(s.add_space_prefix);
  EXPECT_TRUE(s.merges.empty());
  EXPECT_TRUE(s.chat_template.empty());
  EXPECT_EQ(DetectChatFormat(*tok_), ChatFormat::kNone);
}

TEST_F(Stories, ReferenceEncodings) {
  struct Case {
    const char* text;
    V ids;
  };
  const Case cases[] = {
      {"Once upon a time", {1, 403, 407, 261, 378}},
      {"Lily and Tim played with a big red ball.",
       {1, 317, 269, 326, 337, 266, 335, 261, 370, 352, 266, 268, 388, 426}},
      {"The cat sat.", {1, 291, 280, 294, 262, 294, 426}},
      {"Timmy was happy!", {1, 405, 286, 393, 443}},
      {"  two spaces", {1, 410, 410, 259, 424, 414, 262, 427, 412, 331, 419}},
      {"hello\nworld", {1, 281, 306, 414, 13, 424, 304, 341}},
      {"Zo\xC3\xAB"
       " ate 3 cr\xC3\xAA"
       "pes",
       {1, 410, 469, 414, 198, 174, 261, 413, 411, 410, 472, 280, 420, 198, 173, 427, 406}},
      {"\xE6\x97\xA5"
       "\xE6\x9C\xAC"
       "",
       {1, 410, 233, 154, 168, 233, 159, 175}},
      {"She said, \"Hi!\"", {1, 338, 336, 432, 313, 440, 417, 443, 436}},
      {"x", {1, 410, 444}},
      {"a", {1, 261}},
      {"named", {1, 395}},
      {"there they were", {1, 383, 366, 382, 276}},
      {"in the park", {1, 322, 265, 282, 295, 433}},
      {"friends forever", {1, 374, 419, 272, 414, 276, 330}},
      {"1234", {1, 410, 475, 479, 472, 484}},
      {"tab\there", {1, 259, 412, 430, 12, 260, 276}},
      {"\xF0\x9F\x98\x80"
       "",
       {1, 410, 243, 162, 155, 131}},
      {"Once upon a time, there was a little girl named Lily.",
       {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426}},
      {"One day, Lily's mom said: \"Let's go!\"",
       {1, 385, 328, 432, 317, 439, 419, 357, 336, 467, 313, 438, 316, 439, 419, 298, 414, 443,
        436}},
      {"They were very happy\n\nThe end.",
       {1, 342, 382, 276, 399, 393, 13, 13, 434, 260, 344, 264, 426}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(tok_->Encode(c.text, /*add_bos=*/true), c.ids) << "text: " << c.text;
    EXPECT_EQ(tok_->Decode(c.ids), c.text);
  }
}

TEST_F(Stories, DecodeAndEnd) {
  EXPECT_EQ(tok_->TokenToPiece(403), " Once");
  EXPECT_EQ(tok_->TokenToPiece(13), "\n");
  EXPECT_EQ(tok_->Decode(V{1, 403, 407, 261, 378, 2}), "Once upon a time");
  EXPECT_TRUE(tok_->IsEndOfGeneration(2));
  EXPECT_FALSE(tok_->IsEndOfGeneration(1));
  EXPECT_EQ(tok_->Encode("</s>", false, true), (V{2}));
}

TEST_F(Stories, RoundTripCorpus) {
  for (const std::string& text : testing_tok::RoundTripCorpus()) {
    EXPECT_EQ(tok_->Decode(tok_->Encode(text, true)), text) << "text: " << text;
  }
}

}  // namespace
}  // namespace primekv
