// Second-round hardening of the tokenizer: special-token matching against a brute-force
// reference, MaxTokenBytes as a bound, vocabularies that lack a byte, and the Hugging Face
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

// The byte-level spec with byte `b`'s token renamed, so no token spells that byte (llama.cpp's
// falcon vocabulary has none for 0x03); ids stay those of the full vocabulary.
TokenizerSpec Gpt2WithoutByte(unsigned char b) {
  TokenizerSpec spec = HandGpt2::Spec();
  spec.tokens[b] = "<|no byte " + std::to_string(b) + "|>";
  spec.unk = -1;
  return spec;
}

std::string Without(std::string text, char c) {
  std::erase(text, c);
  return text;
}

// llama.cpp loads a byte-level vocabulary that lacks a byte and drops that byte when encoding;
// text without it is untouched.
TEST(TokenizerHardening, ByteLevelVocabularyWithoutAByteLoadsAndDropsIt) {
  auto full = Tokenizer::Create(HandGpt2::Spec());
  ASSERT_TRUE(full.ok()) << full.message();
  for (const unsigned char b : std::initializer_list<unsigned char>{0x03, 'h', 0xA9}) {
    auto t = Tokenizer::Create(Gpt2WithoutByte(b));
    ASSERT_TRUE(t.ok()) << "byte " << int{b} << ": " << t.message();
    const char c = static_cast<char>(b);
    for (const std::string& text : testing_tok::RoundTripCorpus()) {
      if (text.find(c) != std::string::npos) continue;
      EXPECT_EQ(t->Encode(text, true, true), full->Encode(text, true, true)) << text;
    }
    // Text holding the byte: every other byte is encoded, the missing one gives no id.
    for (const std::string& text : {std::string("the bell ") + c + " rang",
                                    std::string(1, c) + "caf\xC3\xA9" + c + c, std::string(1, c)}) {
      const std::vector<Token> ids = t->Encode(text, false, false);
      EXPECT_EQ(t->Decode(ids), Without(text, c)) << "byte " << int{b};
    }
  }
  // No merge reads 0x03, so its text gets the full vocabulary's ids less the byte's own.
  auto no03 = Tokenizer::Create(Gpt2WithoutByte(0x03));
  ASSERT_TRUE(no03.ok());
  const std::string text = "the\x03 bell\x03\x03 caf\xC3\xA9";
  std::vector<Token> want = full->Encode(text, false, false);
  std::erase(want, Token{0x03});
  EXPECT_EQ(no03->Encode(text, false, false), want);
  // An unknown token still stands in for the byte.
  TokenizerSpec with_unk = Gpt2WithoutByte('h');
  with_unk.tokens.push_back("<unk>");
  with_unk.token_types.push_back(static_cast<int32_t>(TokenType::kUnknown));
  with_unk.unk = static_cast<Token>(with_unk.tokens.size() - 1);
  auto u = Tokenizer::Create(with_unk);
  ASSERT_TRUE(u.ok()) << u.message();
  EXPECT_EQ(u->Encode("h", false, false), std::vector<Token>{with_unk.unk});

  // A byte's token of another type loads too, and encodes as that token (llama.cpp looks the
  // text up whatever its type).
  TokenizerSpec byte_control = HandGpt2::Spec();
  byte_control.token_types['h'] = static_cast<int32_t>(TokenType::kControl);
  auto ctl = Tokenizer::Create(byte_control);
  ASSERT_TRUE(ctl.ok()) << ctl.message();
  EXPECT_EQ(ctl->Encode("h", false, false), std::vector<Token>{'h'});
}

// SentencePiece has no byte-level alphabet to fall back on: without a byte token or an unknown
// token the vocabulary is still refused.
TEST(TokenizerHardening, SentencePieceVocabularyThatWouldDropAByteIsRefused) {
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
