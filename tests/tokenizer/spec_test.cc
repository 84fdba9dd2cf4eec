// TokenizerSpec validation and TokenizerSpecFromGguf (defaults, "none" ids, type errors).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "primekv/gguf/gguf.h"
#include "primekv/tokenizer/tokenizer.h"
#include "test_vocabs.h"

namespace primekv {
namespace {

using testing_tok::HandGpt2;
using testing_tok::HandLlama;

void ExpectError(const TokenizerSpec& spec, const std::string& fragment) {
  const Status s = ValidateTokenizerSpec(spec);
  ASSERT_FALSE(s.ok()) << "expected an error containing: " << fragment;
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  auto t = Tokenizer::Create(spec);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.message(), s.message());
}

TEST(TokenizerSpec, ValidationErrorsNameTheProblem) {
  EXPECT_TRUE(ValidateTokenizerSpec(HandLlama::Spec()).ok());
  EXPECT_TRUE(ValidateTokenizerSpec(HandGpt2::Spec()).ok());
  TokenizerSpec s = HandLlama::Spec();
  s.model = "bert";
  ExpectError(s, "unsupported tokenizer model \"bert\"");
  s = HandLlama::Spec();
  s.tokens.clear();
  s.scores.clear();
  s.token_types.clear();
  ExpectError(s, "no tokens");
  s = HandLlama::Spec();
  s.scores.pop_back();
  ExpectError(s, "scores has 282 entries but there are 283 tokens");
  s = HandLlama::Spec();
  s.token_types.push_back(1);
  ExpectError(s, "token_type has 284 entries but there are 283 tokens");
  s = HandLlama::Spec();
  s.token_types[7] = 9;
  ExpectError(s, "token_type[7] = 9");
  s = HandLlama::Spec();
  s.scores[5] = std::nanf("");
  ExpectError(s, "scores[5] is NaN");
  s = HandLlama::Spec();
  s.bos = 283;
  ExpectError(s, "bos token id 283 is out of range (vocab size 283)");
  s = HandLlama::Spec();
  s.eot = -7;
  ExpectError(s, "eot token id -7");
  s = HandLlama::Spec();
  s.pad = 1000;
  ExpectError(s, "padding token id 1000");
  s = HandGpt2::Spec("starcoder2");
  ExpectError(
      s, "unsupported tokenizer.ggml.pre \"starcoder2\"; supported: default, gpt-2, gpt2, phi-2");
  s = HandGpt2::Spec();
  s.merges[3] = "ll";
  ExpectError(s, "tokenizer.ggml.merges[3] = \"ll\" is not two space-separated tokens");
  s = HandGpt2::Spec();
  s.merges[0] = "a ";
  ExpectError(s, "merges[0]");
  // llama ignores pre; gpt2 may have no merges at all.
  s = HandLlama::Spec();
  s.pre = "whatever";
  EXPECT_TRUE(ValidateTokenizerSpec(s).ok());
  s = HandGpt2::Spec();
  s.merges.clear();
  EXPECT_TRUE(ValidateTokenizerSpec(s).ok());
}

// Writes a GGUF with the given keys and reads the tokenizer spec back.
Result<TokenizerSpec> FromKeys(const std::vector<GgufKv>& keys) {
  GgufWriter w;
  for (const GgufKv& kv : keys) w.Add(kv.key, kv.value);
  const std::vector<uint8_t> bytes = w.Serialize();
  auto file = GgufFile::FromMemory(bytes, "test.gguf");
  if (!file.ok()) return file.status();
  return TokenizerSpecFromGguf(*file);
}

std::vector<GgufKv> Gpt2Keys() {
  const TokenizerSpec s = HandGpt2::Spec();
  return {{"tokenizer.ggml.model", GgufValue::String("gpt2")},
          {"tokenizer.ggml.pre", GgufValue::String("qwen2")},
          {"tokenizer.ggml.tokens", GgufValue::StringArray(s.tokens)},
          {"tokenizer.ggml.token_type", GgufValue::Int32Array(s.token_types)},
          {"tokenizer.ggml.merges", GgufValue::StringArray(s.merges)},
          {"tokenizer.ggml.bos_token_id", GgufValue::Uint32(HandGpt2::kBos)},
          {"tokenizer.ggml.eos_token_id", GgufValue::Uint32(HandGpt2::kEos)},
          {"tokenizer.ggml.padding_token_id", GgufValue::Uint32(0xFFFFFFFFu)},
          {"tokenizer.chat_template", GgufValue::String("{{ '<|start_header_id|>' }}")}};
}

TEST(TokenizerSpecFromGguf, Gpt2DefaultsAndFallbacks) {
  auto spec = FromKeys(Gpt2Keys());
  ASSERT_TRUE(spec.ok()) << spec.message();
  const TokenizerSpec ref = HandGpt2::Spec();
  EXPECT_EQ(spec->model, "gpt2");
  EXPECT_EQ(spec->pre, "qwen2");
  EXPECT_EQ(spec->tokens, ref.tokens);
  EXPECT_EQ(spec->token_types, ref.token_types);
  EXPECT_EQ(spec->merges, ref.merges);
  EXPECT_TRUE(spec->scores.empty());
  EXPECT_EQ(spec->bos, HandGpt2::kBos);
  EXPECT_EQ(spec->eos, HandGpt2::kEos);
  EXPECT_EQ(spec->eot, HandGpt2::kEot);  // no eot key: found by its text <|eot_id|>
  EXPECT_EQ(spec->pad, -1);
  EXPECT_EQ(spec->unk, -1);
  EXPECT_FALSE(spec->add_bos);  // gpt2 default
  EXPECT_FALSE(spec->add_eos);
  EXPECT_FALSE(spec->add_space_prefix);
  EXPECT_EQ(spec->chat_template, "{{ '<|start_header_id|>' }}");
  auto tok = Tokenizer::Create(*spec);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(DetectChatFormat(*tok), ChatFormat::kLlama3);
}

TEST(TokenizerSpecFromGguf, ExplicitFlagsAndIds) {
  std::vector<GgufKv> keys = Gpt2Keys();
  keys.push_back({"tokenizer.ggml.add_bos_token", GgufValue::Bool(true)});
  keys.push_back({"tokenizer.ggml.add_eos_token", GgufValue::Bool(true)});
  keys.push_back({"tokenizer.ggml.eot_token_id", GgufValue::Int32(HandGpt2::kEos)});
  keys.push_back({"tokenizer.ggml.unknown_token_id", GgufValue::Uint32(5000)});  // out of range
  auto spec = FromKeys(keys);
  ASSERT_TRUE(spec.ok()) << spec.message();
  EXPECT_TRUE(spec->add_bos);
  EXPECT_TRUE(spec->add_eos);
  EXPECT_EQ(spec->eot, HandGpt2::kEos);
  EXPECT_EQ(spec->unk, -1);
}

TEST(TokenizerSpecFromGguf, LlamaDefaults) {
  const TokenizerSpec s = HandLlama::Spec();
  auto spec = FromKeys({{"tokenizer.ggml.model", GgufValue::String("llama")},
                        {"tokenizer.ggml.tokens", GgufValue::StringArray(s.tokens)},
                        {"tokenizer.ggml.scores", GgufValue::Float32Array(s.scores)},
                        {"tokenizer.ggml.token_type", GgufValue::Int32Array(s.token_types)},
                        {"tokenizer.ggml.bos_token_id", GgufValue::Uint32(1)},
                        {"tokenizer.ggml.eos_token_id", GgufValue::Uint32(2)}});
  ASSERT_TRUE(spec.ok()) << spec.message();
  EXPECT_EQ(spec->pre, "default");
  EXPECT_EQ(spec->scores, s.scores);
  EXPECT_TRUE(spec->add_bos);
  EXPECT_TRUE(spec->add_space_prefix);
  EXPECT_EQ(spec->eot, HandLlama::kEnd);  // "<|end|>" is in this vocabulary
}

TEST(TokenizerSpecFromGguf, Errors) {
  auto expect_error = [](std::vector<GgufKv> keys, const std::string& fragment) {
    auto spec = FromKeys(keys);
    ASSERT_FALSE(spec.ok()) << fragment;
    EXPECT_NE(spec.message().find(fragment), std::string::npos) << spec.message();
  };
  expect_error({}, "tokenizer.ggml.model is missing");
  expect_error({{"tokenizer.ggml.model", GgufValue::String("llama")}},
               "tokenizer.ggml.tokens is missing");
  expect_error({{"tokenizer.ggml.model", GgufValue::Uint32(3)}},
               "tokenizer.ggml.model has the wrong type");
  std::vector<GgufKv> keys = Gpt2Keys();
  keys.push_back({"tokenizer.ggml.scores", GgufValue::Float32Array({1.0f, 2.0f})});
  expect_error(keys, "scores has 2 entries");
  keys = Gpt2Keys();
  keys.push_back({"tokenizer.ggml.add_bos_token", GgufValue::String("yes")});
  expect_error(keys, "tokenizer.ggml.add_bos_token has the wrong type");
  keys = Gpt2Keys();
  keys[1] = {"tokenizer.ggml.pre", GgufValue::String("mystery")};
  expect_error(keys, "mystery");
  keys = Gpt2Keys();
  keys[2] = {"tokenizer.ggml.tokens", GgufValue::StringArray({})};
  expect_error(keys, "no tokens");
  keys = Gpt2Keys();
  keys[3] = {"tokenizer.ggml.token_type", GgufValue::Int32Array(std::vector<int32_t>(277, 8))};
  expect_error(keys, "token_type[0] = 8");
}

}  // namespace
}  // namespace primekv
