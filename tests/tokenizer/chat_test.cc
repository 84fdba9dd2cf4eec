// Chat formats: detection and exact rendered prompts.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "primekv/tokenizer/tokenizer.h"
#include "test_vocabs.h"

namespace primekv {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi!"}, {"assistant", "Hello."}, {"user", "2+2?"}};

TEST(Chat, Llama3) {
  EXPECT_EQ(ApplyChatTemplate(ChatFormat::kLlama3, kConversation, true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ApplyChatTemplate(ChatFormat::kLlama3, std::span(kConversation).first(1), false),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>");
}

TEST(Chat, ChatML) {
  EXPECT_EQ(ApplyChatTemplate(ChatFormat::kChatML, kConversation, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(ApplyChatTemplate(ChatFormat::kChatML, {}, true), "<|im_start|>assistant\n");
}

TEST(Chat, Mistral) {
  // Mistral v0.3: the system text joins the last user turn; there is no generation prompt.
  EXPECT_EQ(ApplyChatTemplate(ChatFormat::kMistral, kConversation, true),
            "[INST] Hi![/INST] Hello.</s>[INST] Be brief.\n\n2+2?[/INST]");
  EXPECT_EQ(ApplyChatTemplate(ChatFormat::kMistral, kConversation, false),
            "[INST] Hi![/INST] Hello.</s>[INST] Be brief.\n\n2+2?[/INST]");
  const std::vector<ChatMessage> only_system = {{"system", "S"}};
  EXPECT_EQ(ApplyChatTemplate(ChatFormat::kMistral, only_system, true), "");
  // Roles that do not alternate are an error of the template, so nothing is rendered.
  const std::vector<ChatMessage> two_users = {{"user", "a"}, {"user", "b"}};
  EXPECT_FALSE(RenderChat(ChatFormat::kMistral, two_users, {}).ok());
  EXPECT_EQ(ApplyChatTemplate(ChatFormat::kMistral, two_users, true), "");
}

TEST(Chat, Llama2) {
  EXPECT_EQ(ApplyChatTemplate(ChatFormat::kLlama2, kConversation, true),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi! [/INST] Hello. </s><s>[INST] 2+2? [/INST]");
}

TEST(Chat, FollowUpTurnsLeaveOutOnceOnlyParts) {
  EXPECT_EQ(ApplyChatTemplateFollowUp(ChatFormat::kLlama31, "q"),
            "<|start_header_id|>user<|end_header_id|>\n\nq<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ApplyChatTemplateFollowUp(ChatFormat::kQwen2, "q"),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ApplyChatTemplateFollowUp(ChatFormat::kQwen3, "q"),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ApplyChatTemplateFollowUp(ChatFormat::kMistral, "q"), "[INST] q[/INST]");
  EXPECT_EQ(ApplyChatTemplateFollowUp(ChatFormat::kLlama2, "q"), "<s>[INST] q [/INST]");
  // A first turn of Llama 3.1 and Qwen2 does carry them.
  const std::vector<ChatMessage> one = {{"user", "q"}};
  EXPECT_NE(ApplyChatTemplate(ChatFormat::kLlama31, one, true).find("Cutting Knowledge Date"),
            std::string::npos);
  EXPECT_NE(ApplyChatTemplate(ChatFormat::kQwen2, one, true).find("You are a helpful assistant."),
            std::string::npos);
}

TEST(Chat, Qwen3ThinkingSwitch) {
  const std::vector<ChatMessage> msgs = {{"user", "Hi"}};
  ChatRenderOptions o;
  EXPECT_EQ(RenderChat(ChatFormat::kQwen3, msgs, o).value(),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  o.enable_thinking = false;
  EXPECT_EQ(RenderChat(ChatFormat::kQwen3, msgs, o).value(),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(Chat, None) {
  EXPECT_EQ(ApplyChatTemplate(ChatFormat::kNone, kConversation, true),
            "Be brief.\nHi!\nHello.\n2+2?");
  EXPECT_EQ(ApplyChatTemplate(ChatFormat::kNone, {}, true), "");
}

TEST(Chat, Names) {
  EXPECT_EQ(ChatFormatName(ChatFormat::kNone), "none");
  EXPECT_EQ(ChatFormatName(ChatFormat::kLlama3), "llama3");
  EXPECT_EQ(ChatFormatName(ChatFormat::kChatML), "chatml");
  EXPECT_EQ(ChatFormatName(ChatFormat::kMistral), "mistral-v0.3");
  EXPECT_EQ(ChatFormatName(ChatFormat::kQwen3), "qwen3");
  EXPECT_EQ(ChatFormatName(ChatFormat::kLlama31), "llama3.1");
}

Tokenizer WithTemplateAndTokens(std::string tmpl, std::vector<std::string> extra) {
  TokenizerSpec spec = testing_tok::HandLlama::Spec();
  spec.chat_template = std::move(tmpl);
  for (std::string& t : extra) {
    spec.tokens.push_back(std::move(t));
    spec.scores.push_back(0);
    spec.token_types.push_back(static_cast<int32_t>(TokenType::kControl));
  }
  return std::move(Tokenizer::Create(std::move(spec))).value();
}

TEST(Chat, Detection) {
  // The template text decides first...
  EXPECT_EQ(DetectChatFormat(WithTemplateAndTokens("{% for m in messages %}<|im_start|>", {})),
            ChatFormat::kChatML);
  EXPECT_EQ(DetectChatFormat(WithTemplateAndTokens("x <|start_header_id|> y", {"<|im_start|>"})),
            ChatFormat::kLlama3);
  EXPECT_EQ(DetectChatFormat(WithTemplateAndTokens(
                "{{ \"[AVAILABLE_TOOLS] [\" }}{%- if loop.last and system_message is defined "
                "%}{{ \"[INST] \" + m + \"[/INST]\" }}",
                {})),
            ChatFormat::kMistral);
  // An unrecognised template falls back to its markers here (ResolveChatFormat refuses it).
  EXPECT_EQ(DetectChatFormat(WithTemplateAndTokens("{{ '[INST] ' + m }}", {})),
            ChatFormat::kMistral);
  EXPECT_FALSE(ResolveChatFormat(WithTemplateAndTokens("{{ '[INST] ' + m }}", {"[INST]"})).ok());
  EXPECT_EQ(ResolveChatFormat(WithTemplateAndTokens("{{ '[INST] ' + m }}", {}), "chatml").value(),
            ChatFormat::kChatML);
  // ...then the vocabulary.
  EXPECT_EQ(DetectChatFormat(WithTemplateAndTokens("", {"<|im_start|>", "<|im_end|>"})),
            ChatFormat::kChatML);
  EXPECT_EQ(DetectChatFormat(WithTemplateAndTokens("unrecognised", {"[INST]", "[/INST]"})),
            ChatFormat::kMistral);
  EXPECT_EQ(DetectChatFormat(WithTemplateAndTokens("", {})), ChatFormat::kNone);
  EXPECT_EQ(DetectChatFormat(WithTemplateAndTokens("", {"<start_of_turn>", "<end_of_turn>"})),
            ChatFormat::kGemma);
  EXPECT_EQ(DetectChatFormat(WithTemplateAndTokens("", {"<|start_of_role|>"})),
            ChatFormat::kGranite);
  EXPECT_EQ(DetectChatFormat(WithTemplateAndTokens("", {"<|user|>", "<|assistant|>"})),
            ChatFormat::kPhi3);
  // A refused template that looks like a new family says which one.
  auto g = ResolveChatFormat(WithTemplateAndTokens("x<start_of_turn>{{ m }}<end_of_turn>", {}));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("resembles gemma"), std::string::npos) << g.message();
}

TEST(Chat, EndOfGenerationTokens) {
  const Tokenizer tok = WithTemplateAndTokens("", {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>"});
  const int n = tok.vocab_size();
  EXPECT_TRUE(tok.IsEndOfGeneration(2));  // </s> (eos)
  EXPECT_TRUE(tok.IsEndOfGeneration(n - 3));
  EXPECT_TRUE(tok.IsEndOfGeneration(n - 2));
  EXPECT_TRUE(tok.IsEndOfGeneration(n - 1));
  EXPECT_FALSE(tok.IsEndOfGeneration(1));
  // Phi-3's turn end counts by its text, as in llama.cpp, though this spec names no eot...
  EXPECT_TRUE(tok.IsEndOfGeneration(testing_tok::HandLlama::kEnd));
  EXPECT_FALSE(tok.IsEndOfGeneration(testing_tok::HandLlama::kEndLong));
  // ...and Gemma's; a role marker does not.
  const Tokenizer more = WithTemplateAndTokens("", {"<end_of_turn>", "<|user|>"});
  const int m = more.vocab_size();
  EXPECT_TRUE(more.IsEndOfGeneration(m - 2));
  EXPECT_FALSE(more.IsEndOfGeneration(m - 1));
}

TEST(Chat, RenderedPromptEncodesSpecials) {
  auto spec = MakeSyntheticTokenizerSpec("gpt2", 1000);
  ASSERT_TRUE(spec.ok());
  const Tokenizer tok = std::move(Tokenizer::Create(*spec)).value();
  ASSERT_EQ(DetectChatFormat(tok), ChatFormat::kLlama3);
  const std::vector<ChatMessage> msgs = {{"user", "Hi"}};
  const std::string prompt = ApplyChatTemplate(ChatFormat::kLlama3, msgs, true);
  const std::vector<Token> ids = tok.Encode(prompt, true, true);
  const Token header = tok.FindToken("<|start_header_id|>");
  const Token header_end = tok.FindToken("<|end_header_id|>");
  const Token eot = tok.FindToken("<|eot_id|>");
  ASSERT_GE(ids.size(), 8u);
  EXPECT_EQ(ids[0], tok.bos());
  EXPECT_EQ(ids[1], header);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), header), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), header_end), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 1);
  EXPECT_TRUE(tok.IsEndOfGeneration(eot));
  // Control tokens decode to nothing; the rest survives.
  EXPECT_EQ(tok.Decode(ids), "user\n\nHiassistant\n\n");
}

// The split context/turn token lists must concatenate to the whole prompt.
std::string DecodeAll(const Tokenizer& tok, const ConversationTokens& c) {
  std::vector<Token> all = c.context;
  for (const auto& t : c.turns) all.insert(all.end(), t.begin(), t.end());
  return tok.Decode(all, false);
}

TEST(Chat, EncodeConversationPlain) {
  auto spec = MakeSyntheticTokenizerSpec("gpt2", 1000);
  ASSERT_TRUE(spec.ok()) << spec.message();
  const Tokenizer tok = std::move(Tokenizer::Create(std::move(spec).value())).value();
  const std::vector<std::string> qs = {"Who?", "Where?"}, prefixes = {"It was", "At"};
  const auto c = EncodeConversation(tok, false, "Some context.", qs, prefixes);
  EXPECT_EQ(c.context, tok.Encode("Some context.", true, false));
  ASSERT_EQ(c.turns.size(), 2u);
  EXPECT_EQ(c.turns[0], tok.Encode("\nWho?\nIt was", false, false));
  EXPECT_EQ(c.turns[1], tok.Encode("\nWhere?\nAt", false, false));
  // No prefixes: the question line alone.
  const auto bare = EncodeConversation(tok, false, "Some context.", qs);
  EXPECT_EQ(bare.turns[1], tok.Encode("\nWhere?\n", false, false));
}

TEST(Chat, EncodeConversationChatSplitsInsideTheFirstUserMessage) {
  auto spec = MakeSyntheticTokenizerSpec("gpt2", 1000);  // has the Llama-3 header tokens
  ASSERT_TRUE(spec.ok()) << spec.message();
  const Tokenizer tok = std::move(Tokenizer::Create(std::move(spec).value())).value();
  ASSERT_EQ(DetectChatFormat(tok), ChatFormat::kLlama3);
  const std::vector<std::string> qs = {"Who?", "Where?"}, prefixes = {"It was", "At"};
  const auto c = EncodeConversation(tok, true, "Some context.", qs, prefixes);
  ASSERT_EQ(c.turns.size(), 2u);
  const std::vector<ChatMessage> first = {{"user", "Some context.\n\nWho?"}};
  const std::vector<ChatMessage> second = {{"user", "Where?"}};
  const std::string want = ApplyChatTemplate(ChatFormat::kLlama3, first, true) + "It was" +
                           ApplyChatTemplate(ChatFormat::kLlama3, second, true) + "At";
  EXPECT_EQ(DecodeAll(tok, c), tok.Decode(tok.Encode(want, true, true), false));
  // The context ends before the question: it is the compressible part alone.
  EXPECT_EQ(tok.Decode(c.context, false).find("Who?"), std::string::npos);
}

// The split once searched the rendered prompt for the bytes \x1f\x1e, so a user who typed them
// moved the cut into the context. User text is now only ever content, whatever its bytes.
TEST(Chat, EncodeConversationSplitIgnoresSeparatorBytesInUserText) {
  auto spec = MakeSyntheticTokenizerSpec("gpt2", 1000);
  ASSERT_TRUE(spec.ok()) << spec.message();
  const Tokenizer tok = std::move(Tokenizer::Create(std::move(spec).value())).value();
  const std::string context = "Before\x1f\x1e after.";
  const std::vector<std::string> qs = {"Who\x1f\x1e?"};
  const auto c = EncodeConversation(tok, true, context, qs);
  const std::string head = "<|start_header_id|>user<|end_header_id|>\n\n";
  const std::string tail = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(c.context, tok.Encode(head + context, true, true));
  ASSERT_EQ(c.turns.size(), 1u);
  EXPECT_EQ(c.turns[0], tok.Encode("\n\nWho\x1f\x1e?" + tail, false, true));
  // Without questions the whole rendered message is the context.
  const auto alone = EncodeConversation(tok, true, context, {});
  EXPECT_EQ(alone.context, tok.Encode(head + context + tail, true, true));
  EXPECT_TRUE(alone.turns.empty());
}

}  // namespace
}  // namespace primekv
