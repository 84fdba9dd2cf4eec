// Reads the shared stories260K model and checks it against its README and against the original
// llama2.c checkpoint (stories260K.bin), an independent copy of the same weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "primekv/gguf/gguf.h"

namespace primekv {
namespace {

const char* const kGguf = PRIMEKV_SHARED_DIR "/models/stories260K.gguf";
const char* const kBin = PRIMEKV_SHARED_DIR "/models/stories260K.bin";

std::vector<float> ReadFloats(const char* path, uint64_t offset, size_t count) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  in.seekg(static_cast<std::streamoff>(offset));
  std::vector<float> out(count);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(count * sizeof(float)));
  EXPECT_TRUE(in.good()) << path << " at " << offset;
  return out;
}

std::vector<float> AsFloats(std::span<const uint8_t> bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

class Stories : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<GgufFile> r = GgufFile::Open(kGguf);
    ASSERT_TRUE(r.ok()) << r.message();
    file_ = new GgufFile(std::move(r).value());
  }
  static void TearDownTestSuite() {
    delete file_;
    file_ = nullptr;
  }
  static const GgufFile& f() { return *file_; }

 private:
  static GgufFile* file_;
};
GgufFile* Stories::file_ = nullptr;

TEST_F(Stories, Header) {
  EXPECT_EQ(f().version(), 3u);
  EXPECT_EQ(f().metadata().size(), 19u);
  EXPECT_EQ(f().tensors().size(), 48u);
  EXPECT_EQ(f().alignment(), 32u);
  EXPECT_EQ(f().data_offset(), 14176u);
  EXPECT_EQ(f().file_size(), 1185376u);
  EXPECT_EQ(f().Find("general.alignment"), nullptr);
}

TEST_F(Stories, Hyperparameters) {
  EXPECT_EQ(f().GetString("general.architecture"), "llama");
  EXPECT_EQ(f().GetString("general.name"), "llama");
  EXPECT_EQ(f().GetInt("llama.block_count"), 5);
  EXPECT_EQ(f().GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(f().GetInt("llama.feed_forward_length"), 172);
  EXPECT_EQ(f().GetInt("llama.attention.head_count"), 8);
  EXPECT_EQ(f().GetInt("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(f().GetInt("llama.context_length"), 512);
  EXPECT_EQ(f().GetInt("llama.rope.dimension_count"), 8);
  std::optional<double> eps = f().GetFloat("llama.attention.layer_norm_rms_epsilon");
  ASSERT_TRUE(eps.has_value());
  EXPECT_NEAR(*eps, 1e-5, 1e-12);
  EXPECT_EQ(f().GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f().GetInt("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f().GetInt("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(f().GetInt("tokenizer.ggml.padding_token_id"), 0xFFFFFFFFll);
  EXPECT_EQ(f().GetInt("tokenizer.ggml.seperator_token_id"), 0xFFFFFFFFll);
}

TEST_F(Stories, Vocabulary) {
  std::optional<std::vector<std::string>> tokens = f().GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.has_value());
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[2], "</s>");
  EXPECT_EQ((*tokens)[13], "<0x0A>");
  EXPECT_EQ((*tokens)[259], "\xe2\x96\x81t");  // "▁t"
  EXPECT_EQ((*tokens)[260], "he");
  EXPECT_EQ((*tokens)[261],
            "\xe2\x96\x81"
            "a");

  std::optional<std::vector<float>> scores = f().GetFloatArray("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.has_value());
  ASSERT_EQ(scores->size(), 512u);
  for (int id = 259; id < 512; ++id) EXPECT_EQ((*scores)[id], -static_cast<float>(id - 259)) << id;

  std::optional<std::vector<int64_t>> types = f().GetIntArray("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.has_value());
  ASSERT_EQ(types->size(), 512u);
  // GGUF token types: 1 normal, 2 unknown, 3 control, 6 byte.
  EXPECT_EQ((*types)[0], 2);
  EXPECT_EQ((*types)[1], 3);
  EXPECT_EQ((*types)[2], 3);
  for (int id = 3; id < 259; ++id) EXPECT_EQ((*types)[id], 6) << id;
  for (int id = 259; id < 512; ++id) EXPECT_EQ((*types)[id], 1) << id;
}

TEST_F(Stories, TensorTable) {
  struct Row {
    std::string name;
    std::vector<int64_t> ne;
  };
  std::vector<Row> rows = {
      {"token_embd.weight", {64, 512}}, {"output_norm.weight", {64}}, {"output.weight", {64, 512}}};
  for (int l = 0; l < 5; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    rows.push_back({b + "attn_norm.weight", {64}});
    rows.push_back({b + "attn_q.weight", {64, 64}});
    rows.push_back({b + "attn_k.weight", {64, 32}});
    rows.push_back({b + "attn_v.weight", {64, 32}});
    rows.push_back({b + "attn_output.weight", {64, 64}});
    rows.push_back({b + "ffn_norm.weight", {64}});
    rows.push_back({b + "ffn_gate.weight", {64, 172}});
    rows.push_back({b + "ffn_up.weight", {64, 172}});
    rows.push_back({b + "ffn_down.weight", {172, 64}});
  }
  ASSERT_EQ(rows.size(), 48u);
  uint64_t total_bytes = 0;
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const GgufTensorInfo* t = f().FindTensor(row.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, GgmlType::kF32);
    EXPECT_EQ(t->ne, row.ne);
    uint64_t n = 1;
    for (int64_t d : row.ne) n *= static_cast<uint64_t>(d);
    EXPECT_EQ(t->n_elements, n);
    EXPECT_EQ(t->n_bytes, 4 * n);
    EXPECT_EQ(t->offset % 32, 0u);
    total_bytes += t->n_bytes;
  }
  // 292,800 stored parameters (README), all f32.
  EXPECT_EQ(total_bytes, 292800u * 4);
}

TEST_F(Stories, TensorDataIsTheFileBytes) {
  const GgufTensorInfo* embd = f().FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  const std::vector<float> direct = ReadFloats(kGguf, f().data_offset() + embd->offset, 16);
  const std::vector<float> mapped = AsFloats(f().TensorData(*embd));
  ASSERT_EQ(mapped.size(), 64u * 512u);
  for (size_t i = 0; i < direct.size(); ++i) EXPECT_EQ(mapped[i], direct[i]) << i;
  EXPECT_NE(direct[0], 0.0f);
}

// The llama2.c checkpoint (7 x int32 header, then token embedding [512 x 64], RMS weights
// [5 x 64], wq, wk, wv, ...) holds the same weights in the same row-major order.
TEST_F(Stories, WeightsMatchTheLlama2cCheckpoint) {
  constexpr uint64_t kHeader = 7 * 4;
  const GgufTensorInfo* embd = f().FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(AsFloats(f().TensorData(*embd)), ReadFloats(kBin, kHeader, 512 * 64));

  const GgufTensorInfo* out = f().FindTensor("output.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(AsFloats(f().TensorData(*out)), AsFloats(f().TensorData(*embd)));  // tied, copied

  const uint64_t rms_att = kHeader + 512 * 64 * 4;
  for (int l = 0; l < 5; ++l) {
    const GgufTensorInfo* norm = f().FindTensor("blk." + std::to_string(l) + ".attn_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(AsFloats(f().TensorData(*norm)), ReadFloats(kBin, rms_att + l * 64 * 4, 64)) << l;
  }
  // wv is not permuted by the converter (only wq/wk are, for RoPE).
  const uint64_t wv = rms_att + 5 * 64 * 4 + 5 * 64 * 64 * 4 + 5 * 32 * 64 * 4;
  const GgufTensorInfo* v0 = f().FindTensor("blk.0.attn_v.weight");
  ASSERT_NE(v0, nullptr);
  EXPECT_EQ(AsFloats(f().TensorData(*v0)), ReadFloats(kBin, wv, 32 * 64));
}

}  // namespace
}  // namespace primekv
