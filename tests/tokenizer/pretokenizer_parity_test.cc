// Every tokenizer.ggml.pre name llama.cpp c392e509 knows, against llama.cpp's own ids:
// - llama.cpp's vocabulary test vectors for the vocabularies that come with them
//   (../shared/fixtures/tokenizers: gpt-2, mpt, starcoder, refact, deepseek-coder);
// - for every family, the 2,000 strings of pretok/corpus.json on GPT-2's vocabulary with
//   tokenizer.ggml.pre replaced, against pretok/expected.txt (hashes of llama.cpp's ids, written
//   by pretok/make_reference.py, which also records in pretok/names.txt which family's ids each
//   name gives in llama.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "primekv/gguf/gguf.h"
#include "primekv/tokenizer/tokenizer.h"
#include "tokenizer/llamacpp_vectors.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace primekv {
namespace {

namespace fs = std::filesystem;

const fs::path kPretok = fs::path(PRIMEKV_SOURCE_DIR) / "tests/tokenizer/pretok";
const fs::path kFixtures = fs::path(PRIMEKV_SHARED_DIR) / "fixtures/tokenizers";

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<TokenizerSpec> ReadSpec(const fs::path& gguf) {
  auto file = GgufFile::Open(gguf);
  if (!file.ok()) return std::nullopt;
  auto spec = TokenizerSpecFromGguf(*file);
  if (!spec.ok()) return std::nullopt;
  return std::move(spec).value();
}

// GPT-2's vocabulary, read once.
const std::optional<TokenizerSpec>& Gpt2Spec() {
  static const std::optional<TokenizerSpec> spec = ReadSpec(kFixtures / "ggml-vocab-gpt-2.gguf");
  return spec;
}

// FNV-1a over the ids as little-endian int32 (make_reference.py's hash).
uint32_t HashIds(const std::vector<Token>& ids) {
  uint32_t h = 0x811C9DC5u;
  for (Token t : ids) {
    const auto u = static_cast<uint32_t>(t);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xFFu;
      h *= 0x01000193u;
    }
  }
  return h;
}

struct Reference {
  std::vector<std::string> corpus;
  std::vector<std::string> columns;              // expected.txt's header
  std::vector<std::vector<uint32_t>> hashes;     // [column][string]
  std::map<std::string, std::string> loads;      // names.txt: name -> "loads"/"refused"
  std::map<std::string, std::string> family_of;  // names.txt: name -> column ("-": none)
  std::map<std::string, std::string> add_bos;    // names.txt: name -> "1"/"0" ("-": refused)
};

const Reference& Ref() {
  static const Reference ref = [] {
    Reference r;
    const auto corpus = nlohmann::json::parse(ReadFile(kPretok / "corpus.json"), nullptr, false);
    if (corpus.is_array()) r.corpus = corpus.get<std::vector<std::string>>();
    std::istringstream expected(ReadFile(kPretok / "expected.txt"));
    std::string line;
    if (std::getline(expected, line)) {
      std::istringstream header(line);
      for (std::string name; header >> name;) r.columns.push_back(name);
    }
    r.hashes.resize(r.columns.size());
    while (std::getline(expected, line)) {
      std::istringstream cells(line);
      std::string cell;
      for (size_t k = 0; k < r.columns.size() && cells >> cell; ++k) {
        r.hashes[k].push_back(cell == "=" ? r.hashes[k - 1].back()
                                          : static_cast<uint32_t>(std::stoul(cell, nullptr, 16)));
      }
    }
    std::istringstream names(ReadFile(kPretok / "names.txt"));
    while (std::getline(names, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream cells(line);
      std::string name, status, family, add_bos;
      cells >> name >> status >> family >> add_bos;
      r.loads[name] = status;
      r.family_of[name] = family;
      r.add_bos[name] = add_bos;
    }
    return r;
  }();
  return ref;
}

// Compares our ids for every corpus string with column `column` of expected.txt, GPT-2's
// vocabulary carrying tokenizer.ggml.pre `name`. Strings that NFC changes are left out for the
// names this engine normalizes (llama.cpp does not); returns how many were left out.
size_t CheckCorpus(const std::string& name, const std::string& column) {
  const auto& spec = Gpt2Spec();
  if (!spec) {
    ADD_FAILURE() << "missing fixture ggml-vocab-gpt-2.gguf";
    return 0;
  }
  const Reference& ref = Ref();
  size_t k = 0;
  while (k < ref.columns.size() && ref.columns[k] != column) ++k;
  if (k == ref.columns.size()) {
    ADD_FAILURE() << "no column " << column << " in expected.txt";
    return 0;
  }
  EXPECT_EQ(ref.corpus.size(), 2000u);
  EXPECT_EQ(ref.hashes[k].size(), ref.corpus.size());
  TokenizerSpec s = *spec;
  s.pre = name;
  auto tok = Tokenizer::Create(std::move(s));
  if (!tok.ok()) {
    ADD_FAILURE() << name << ": " << tok.message();
    return 0;
  }
  const bool nfc = PreTokenizerNormalizesNfc(name);
  size_t matched = 0, skipped = 0, skipped_differ = 0, mismatched = 0;
  for (size_t i = 0; i < ref.corpus.size() && i < ref.hashes[k].size(); ++i) {
    const std::string& text = ref.corpus[i];
    const std::vector<Token> ids = tok->Encode(text, /*add_bos=*/false, /*parse_special=*/false);
    if (nfc && NormalizeNfc(text) != text) {
      ++skipped;
      skipped_differ += HashIds(ids) != ref.hashes[k][i];
      continue;
    }
    if (HashIds(ids) == ref.hashes[k][i]) {
      ++matched;
    } else if (++mismatched <= 5) {
      ADD_FAILURE() << name << " string " << i << " \"" << text << "\": ids "
                    << testing::PrintToString(ids) << " differ from llama.cpp's";
    }
  }
  EXPECT_EQ(mismatched, 0u) << name << ": " << matched << " of " << ref.corpus.size() - skipped
                            << " strings match";
  std::cout << name << " (" << column << "): " << matched << "/" << ref.corpus.size() - skipped
            << " strings match llama.cpp" << (skipped ? " (" : "")
            << (skipped ? std::to_string(skipped) + " non-NFC strings left out, " +
                              std::to_string(skipped_differ) + " of them with other ids)"
                        : "")
            << "\n";
  return skipped;
}

// One test per family: its representative name (the column's own name).
class FamilyCorpus : public testing::TestWithParam<const char*> {};

TEST_P(FamilyCorpus, MatchesLlamaCpp) { CheckCorpus(GetParam(), GetParam()); }

INSTANTIATE_TEST_SUITE_P(Families, FamilyCorpus,
                         testing::Values("gpt-2", "starcoder", "falcon", "default", "chameleon",
                                         "llama-bpe", "dbrx", "stablelm2", "tekken", "deepseek-v3",
                                         "deepseek-coder", "deepseek-llm", "bloom", "viking"),
                         [](const testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

TEST(Names, ColumnsAreTheFamilies) {
  EXPECT_EQ(Ref().columns,
            (std::vector<std::string>{"gpt-2", "starcoder", "falcon", "default", "chameleon",
                                      "llama-bpe", "dbrx", "stablelm2", "tekken", "deepseek-v3",
                                      "deepseek-coder", "deepseek-llm", "bloom", "viking"}));
}

// Every name llama.cpp loads: ours loads it too and gives, on the whole corpus, the ids of the
// family llama.cpp's ids for that name matched (names.txt).
TEST(Names, EveryLlamaCppNameGivesItsFamilysIds) {
  const Reference& ref = Ref();
  ASSERT_GE(ref.loads.size(), 40u);
  size_t checked = 0;
  for (const auto& [name, status] : ref.loads) {
    if (status != "loads") continue;
    const std::string& family = ref.family_of.at(name);
    ASSERT_NE(family, "-") << name;
    SCOPED_TRACE(name);
    CheckCorpus(name, family);
    ++checked;
  }
  EXPECT_EQ(checked, 39u);
}

// Without tokenizer.ggml.add_bos_token, llama.cpp adds BOS for some names (llama3's, tekken,
// chameleon); TokenizerSpecFromGguf defaults add_bos the same way for every name.
TEST(Names, AddBosDefaultsAsLlamaCpp) {
  const auto& spec = Gpt2Spec();
  ASSERT_TRUE(spec.has_value());
  size_t checked = 0;
  for (const auto& [name, add_bos] : Ref().add_bos) {
    if (add_bos == "-") continue;
    GgufWriter w;
    w.Add("tokenizer.ggml.model", GgufValue::String("gpt2"));
    w.Add("tokenizer.ggml.pre", GgufValue::String(name));
    w.Add("tokenizer.ggml.tokens", GgufValue::StringArray(spec->tokens));
    w.Add("tokenizer.ggml.merges", GgufValue::StringArray(spec->merges));
    const std::vector<uint8_t> bytes = w.Serialize();
    auto file = GgufFile::FromMemory(bytes, name + ".gguf");
    ASSERT_TRUE(file.ok()) << file.message();
    auto read = TokenizerSpecFromGguf(*file);
    ASSERT_TRUE(read.ok()) << read.message();
    EXPECT_EQ(read->add_bos, add_bos == "1") << name;
    ++checked;
  }
  EXPECT_EQ(checked, 39u);
}

// Names llama.cpp refuses on this vocabulary: jina-v2-* need a "<mask>" token (llama.cpp sets
// its lstrip attribute), "gpt2" is this project's older spelling of "gpt-2"; both load here.
// An unknown name is refused by both, and ours lists the known names.
TEST(Names, RefusedNames) {
  const Reference& ref = Ref();
  for (const char* name : {"jina-v2-es", "jina-v2-de", "jina-v2-code", "gpt2", "no-such-pre"}) {
    EXPECT_EQ(ref.loads.count(name) ? ref.loads.at(name) : "", "refused") << name;
  }
  for (const char* name : {"jina-v2-es", "jina-v2-de", "jina-v2-code", "gpt2"}) {
    auto kind = PreTokenizerFromName(name);
    ASSERT_TRUE(kind.ok()) << name;
    EXPECT_EQ(*kind, PreTokenizerKind::kGpt2);
  }
  auto bad = PreTokenizerFromName("no-such-pre");
  ASSERT_FALSE(bad.ok());
  for (const char* known :
       {"no-such-pre", "default", "gpt-2", "llama-bpe", "falcon3", "qwen2", "megrez", "deepseek-v3",
        "tekken", "chameleon", "minerva-7b", "gpt3-finnish", "viking", "chatglm-bpe"}) {
    EXPECT_NE(bad.message().find(known), std::string::npos) << known;
  }
  if (const auto& spec = Gpt2Spec()) {
    TokenizerSpec s = *spec;
    s.pre = "no-such-pre";
    EXPECT_FALSE(Tokenizer::Create(std::move(s)).ok());
  }
}

// jina-v2-*: llama.cpp gives "<mask>" the lstrip attribute, so the whitespace before it is
// dropped (special tokens parsed). pretok/mask.txt holds llama.cpp's ids for these strings (the
// list make_reference.py spells as MASK_STRINGS) on GPT-2's vocabulary with <|endoftext|>
// renamed <mask>; gpt-2 is the contrast without the attribute.
TEST(Names, JinaV2StripsWhitespaceBeforeMask) {
  const std::vector<std::string> strings = {"a <mask> b",
                                            "a  \t\n<mask>",
                                            "<mask>",
                                            " <mask>",
                                            "x\u00a0<mask>y",
                                            "a<mask>",
                                            "<mask> <mask>  <mask>",
                                            "hello world  <mask>.",
                                            "\n\n<mask>\n"};
  const auto& spec = Gpt2Spec();
  ASSERT_TRUE(spec.has_value());
  std::istringstream in(ReadFile(kPretok / "mask.txt"));
  std::string line;
  size_t names = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::string name = line;
    TokenizerSpec s = *spec;
    ASSERT_EQ(s.tokens.at(50256), "<|endoftext|>");
    s.tokens[50256] = "<mask>";
    s.pre = name;
    auto tok = Tokenizer::Create(std::move(s));
    ASSERT_TRUE(tok.ok()) << tok.message();
    for (const std::string& text : strings) {
      ASSERT_TRUE(std::getline(in, line));
      std::istringstream ls(line);
      std::vector<Token> want;
      for (Token t; ls >> t;) want.push_back(t);
      EXPECT_EQ(tok->Encode(text, /*add_bos=*/false, /*parse_special=*/true), want)
          << name << " \"" << text << "\"";
    }
    ++names;
  }
  EXPECT_EQ(names, 4u);
}

// qwen2 and deepseek-r1-qwen: llama.cpp's ids on every string NFC leaves alone.
TEST(Names, Qwen2NormalizesLikeHuggingFace) {
  const size_t skipped = CheckCorpus("qwen2", "stablelm2");
  EXPECT_GT(skipped, 0u);
  EXPECT_LT(skipped, 100u);
}

// llama.cpp's test vectors: strings separated by "\n__ggml_vocab_test__\n", one line of ids each.
void CheckVectors(const std::string& vocab, const std::string& pre) {
  const fs::path gguf = kFixtures / ("ggml-vocab-" + vocab + ".gguf");
  auto spec = ReadSpec(gguf);
  ASSERT_TRUE(spec.has_value()) << gguf;
  EXPECT_EQ(spec->pre, pre);
  auto tok = Tokenizer::Create(std::move(*spec));
  ASSERT_TRUE(tok.ok()) << tok.message();
  const LlamaCppVectors vectors = ReadLlamaCppVectors(gguf);
  const std::vector<std::string>& cases = vectors.texts;
  const std::vector<std::vector<Token>>& expected = vectors.ids;
  ASSERT_EQ(cases.size(), expected.size());
  ASSERT_GE(cases.size(), 40u);
  size_t matched = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto ids = tok->Encode(cases[i], /*add_bos=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, expected[i]) << vocab << " case " << i << ": \"" << cases[i] << "\"";
    matched += ids == expected[i];
  }
  std::cout << vocab << ": " << matched << "/" << cases.size() << " llama.cpp vectors match\n";
}

TEST(Vectors, Gpt2) { CheckVectors("gpt-2", "gpt-2"); }
TEST(Vectors, Mpt) { CheckVectors("mpt", "mpt"); }
TEST(Vectors, Starcoder) { CheckVectors("starcoder", "starcoder"); }
TEST(Vectors, Refact) { CheckVectors("refact", "refact"); }
TEST(Vectors, DeepseekCoder) { CheckVectors("deepseek-coder", "deepseek-coder"); }

// GPT-NeoX's vocabulary has no tokenizer.ggml.pre: llama.cpp then uses its default list, as
// this engine does ("default").
TEST(Vectors, MissingPreIsDefault) {
  auto spec = ReadSpec(kFixtures / "ggml-vocab-gpt-neox.gguf");
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->pre, "default");
  EXPECT_TRUE(Tokenizer::Create(std::move(*spec)).ok());
}

}  // namespace
}  // namespace primekv
