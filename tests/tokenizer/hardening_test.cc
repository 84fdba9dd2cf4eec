// Second-round hardening of the tokenizer: special-token matching against a brute-force
// reference, MaxTokenBytes as a bound, vocabularies that would drop bytes, and the Hugging Face
// reader's handling of wrongly typed fields.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "primekv/tokenizer/tokenizer.h"
#include "tokenizer/test_vocabs.h"

namespace primekv {
namespace {

using testing_tok::HandGpt2;
using testing_tok::HandLlama;

// The byte-level spec plus control tokens over a small alphabet with shared prefixes/suffixes.
Tokenizer WithSpecials(const std::vector<std::string>& specials) {
  TokenizerSpec spec = HandGpt2::Spec();
  spec.token_types.resize(spec.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  for (const std::string& t : specials) {
    spec.tokens.push_back(t);
    spec.token_types.push_back(static_cast<int32_t>(TokenType::kControl));
  }
  auto tok = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(tok.ok()) << tok.message();
  return std::move(tok).value();
}

// Left to right: the longest special token at each position, else one byte of plain text.
std::vector<std::pair<bool, std::string>> ReferenceSplit(const std::string& text,
                                                         const std::vector<std::string>& specials) {
  std::vector<std::pair<bool, std::string>> out;
  std::string plain;
  for (size_t i = 0; i < text.size();) {
    size_t best = 0;
    for (const std::string& s : specials) {
      if (s.size() > best && text.compare(i, s.size(), s) == 0) best = s.size();
    }
    if (best == 0) {
      plain += text[i++];
      continue;
    }
    if (!plain.empty()) out.push_back({false, std::exchange(plain, {})});
    out.push_back({true, text.substr(i, best)});
    i += best;
  }
  if (!plain.empty()) out.push_back({false, plain});
  return out;
}

TEST(TokenizerHardening, SpecialMatchingIsLongestFirstLeftToRight) {
  const std::vector<std::string> specials = {"a", "ab", "abc", "bc", "cab", "aab", "bca", "ccc"};
  const Tokenizer tok = WithSpecials(specials);
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int len = static_cast<int>(rng() % 24);
    for (int k = 0; k < len; ++k) text += "abcx"[rng() % 4];
    std::vector<Token> want;
    for (const auto& [special, piece] : ReferenceSplit(text, specials)) {
      if (special) {  // the control token, not a byte token of the same text
        const auto it = std::find(specials.begin(), specials.end(), piece);
        want.push_back(HandGpt2::kTool + 1 + static_cast<Token>(it - specials.begin()));
      } else {
        const std::vector<Token> ids = tok.Encode(piece, false, false);
        want.insert(want.end(), ids.begin(), ids.end());
      }
    }
    EXPECT_EQ(tok.Encode(text, false, true), want) << text;
  }
}

TEST(TokenizerHardening, ManyNestedSpecialTokensAreFast) {
  std::vector<std::string> specials;
  for (int k = 1; k <= 2000; ++k)
    specials.push_back(std::string(static_cast<size_t>(k), 'a') + "Z");
  specials.push_back("a");  // matches everywhere; a longer one never completes
  const Tokenizer tok = WithSpecials(specials);
  const std::string text(200000, 'a');
  const std::vector<Token> ids = tok.Encode(text, false, true);  // quadratic: minutes
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], HandGpt2::kTool + 1 + 2000);  // the control "a", not byte a
  EXPECT_EQ(tok.Encode(std::string(1500, 'a') + "Z", false, true),
            std::vector<Token>{tok.FindToken(std::string(1500, 'a') + "Z")});
}

TEST(TokenizerHardening, MaxTokenBytesBoundsEveryToken) {
  for (const TokenizerSpec& spec : {HandLlama::Spec(), HandGpt2::Spec(), HandGpt2::Spec("qwen2")}) {
    auto tok = Tokenizer::Create(spec);
    ASSERT_TRUE(tok.ok()) << tok.message();
    ASSERT_GE(tok->MaxTokenBytes(), 1u);
    for (const std::string& text :
         {std::string("the bell rang     twice\n\n"), std::string("caf\xC3\xA9 123456 \xFF\xFE"),
          std::string("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8 e\xCC\x81"), std::string(" ")}) {
      const size_t n = tok->Encode(text, false, true).size();
      EXPECT_GE(n * tok->MaxTokenBytes(), text.size()) << spec.model << " " << text;
    }
  }
}

TEST(TokenizerHardening, VocabularyThatWouldDropABytesIsRefused) {
  TokenizerSpec gpt2 = HandGpt2::Spec();
  gpt2.tokens['h'] = "<|h|>";  // byte 'h' loses its token
  gpt2.unk = -1;
  auto t = Tokenizer::Create(gpt2);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("no token for byte 0x68 ('h')"), std::string::npos) << t.message();
  gpt2.tokens.push_back("<unk>");
  if (!gpt2.token_types.empty())
    gpt2.token_types.push_back(static_cast<int32_t>(TokenType::kUnknown));
  gpt2.unk = static_cast<Token>(gpt2.tokens.size() - 1);
  EXPECT_TRUE(Tokenizer::Create(gpt2).ok());  // an unknown token stands in for it

  TokenizerSpec byte_control = HandGpt2::Spec();
  byte_control.token_types.assign(byte_control.tokens.size(),
                                  static_cast<int32_t>(TokenType::kNormal));
  byte_control.token_types['h'] = static_cast<int32_t>(TokenType::kControl);
  EXPECT_FALSE(Tokenizer::Create(byte_control).ok());

  TokenizerSpec llama = HandLlama::Spec();
  llama.unk = -1;
  llama.token_types[3 + 'q'] = static_cast<int32_t>(TokenType::kNormal);  // <0x71> not a byte
  auto l = Tokenizer::Create(llama);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.message().find("byte 0x71 ('q')"), std::string::npos) << l.message();
}

TEST(TokenizerHardening, HfJsonFieldsAreTypeChecked) {
  const std::string model = R"({"model": {"type": "BPE", "vocab": {"a": 0}}, )";
  const std::string vocab = model + R"("pre_tokenizer": {"type": "ByteLevel"}, )";
  const std::pair<std::string, std::string> cases[] = {
      {"{}", "tokenizer.json: model: missing"},
      {"[]", "tokenizer.json: expected an object, got an array"},
      {vocab + R"("added_tokens": [5]})", "added_tokens[0]: expected an object"},
      {vocab + R"("added_tokens": [{"id": "x", "content": "<|x|>"}]})",
       "added_tokens[0].id: expected an integer, got a string"},
      {vocab + R"("added_tokens": [{"id": 16777215, "content": "<|x|>"}]})",
       "added_tokens[0].id: 16777215 is outside [0, 1025]"},
      {R"({"model": {"type": 5}})", "model.type: expected a string"},
      {vocab + R"("normalizer": "NFC"})", "normalizer: expected an object, got a string"},
      {model + R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split",
       "pattern": "x"}]}})",
       "pre_tokenizer.pretokenizers[0].pattern: expected an object"},
      {std::string(100000, '[') + std::string(100000, ']'), "nested deeper than 128"},
  };
  for (const auto& [tj, want] : cases) {
    auto spec = TokenizerSpecFromHfJson(tj, "{}");
    ASSERT_FALSE(spec.ok()) << tj.substr(0, 100);
    EXPECT_NE(spec.message().find(want), std::string::npos) << spec.message();
  }
  auto cfg = TokenizerSpecFromHfJson(vocab + R"("x": 0})", R"({"add_eos_token": "yes"})");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.message().find("tokenizer_config.json: add_eos_token: expected true or false"),
            std::string::npos)
      << cfg.message();
}

}  // namespace
}  // namespace primekv
