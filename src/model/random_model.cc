// Random-weight GGUF models of real shapes, so tests and benchmarks need no downloads.
#include "primekv/model/random_model.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <string>

#include "primekv/gguf/gguf.h"
#include "primekv/quant/quant.h"

namespace primekv {

namespace {

// splitmix64 + Box-Muller: the same weights on every platform for a given seed.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  double Normal() {
    const double u1 = Uniform(), u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
};

Status AddMatrix(GgufWriter& w, Rng& rng, const std::string& name, int64_t rows, int64_t cols,
                 GgmlType type, double stddev) {
  const size_t row_bytes = quant::RowBytes(type, cols);
  std::vector<uint8_t> data(row_bytes * static_cast<size_t>(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& x : row) x = static_cast<float>(rng.Normal() * stddev);
    quant::QuantizeRow(type, row.data(), data.data() + row_bytes * static_cast<size_t>(r), cols);
  }
  return w.AddTensor(name, type, {cols, rows}, std::move(data));
}

Status AddVector(GgufWriter& w, const std::string& name, const std::vector<float>& v) {
  std::vector<uint8_t> data(v.size() * sizeof(float));
  std::memcpy(data.data(), v.data(), data.size());
  return w.AddTensor(name, GgmlType::kF32, {static_cast<int64_t>(v.size())}, std::move(data));
}

std::vector<float> NormWeights(Rng& rng, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(0.8 + 0.4 * rng.Uniform());
  return v;
}

std::vector<float> Biases(Rng& rng, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(0.1 * rng.Normal());
  return v;
}

// Llama 3.1's frequency scaling (factor 8, low 1, high 4, original context 8192), stored as
// the per-pair divisors llama.cpp reads from rope_freqs.weight.
std::vector<float> Llama3FreqFactors(int rope_dim, double base) {
  const double factor = 8, low = 1, high = 4, orig = 8192;
  std::vector<float> out(static_cast<size_t>(rope_dim / 2));
  for (int i = 0; i < rope_dim / 2; ++i) {
    const double freq = std::pow(base, -2.0 * i / rope_dim);
    const double wavelen = 2 * std::numbers::pi / freq;
    double f = 1;
    if (wavelen > orig / low) {
      f = factor;
    } else if (wavelen >= orig / high) {
      const double smooth = (orig / wavelen - low) / (high - low);
      f = 1.0 / ((1 - smooth) / factor + smooth);
    }
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

bool IsMoe(const RandomModelSpec& s) { return s.arch == Arch::kQwen3Moe; }

// Phi-3.5-like LongRoPE factors for head_dim / 2 pairs: short ones near 1, long ones growing
// from 1 to about 40 over the low frequencies, as the published 128K models have them.
std::vector<float> LongRopeFactors(int head_dim, bool long_factors) {
  const int n = head_dim / 2;
  std::vector<float> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double t = n > 1 ? static_cast<double>(i) / (n - 1) : 0.0;
    out[static_cast<size_t>(i)] =
        static_cast<float>(long_factors ? 1.0 + 39.0 * t * t : 1.0 + 0.1 * t);
  }
  return out;
}

// Keys of a Qwen3-MoE file beside the shared ones (no shared expert).
void AddExpertKeys(GgufWriter& w, const RandomModelSpec& s) {
  const std::string a(ArchName(s.arch));
  w.Add(a + ".expert_count", GgufValue::Uint32(static_cast<uint32_t>(s.n_experts)));
  w.Add(a + ".expert_used_count", GgufValue::Uint32(static_cast<uint32_t>(s.n_experts_used)));
  w.Add(a + ".expert_feed_forward_length", GgufValue::Uint32(static_cast<uint32_t>(s.d_ff_expert)));
}

// One expert per matrix, stacked into a 3-D tensor ne = [cols, rows, n_experts] as llama.cpp
// stores them.
Status AddExperts(GgufWriter& w, Rng& rng, const std::string& name, int n_experts, int64_t rows,
                  int64_t cols, GgmlType type, double stddev) {
  const size_t row_bytes = quant::RowBytes(type, cols);
  const int64_t all_rows = rows * n_experts;
  std::vector<uint8_t> data(row_bytes * static_cast<size_t>(all_rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < all_rows; ++r) {
    for (auto& x : row) x = static_cast<float>(rng.Normal() * stddev);
    quant::QuantizeRow(type, row.data(), data.data() + row_bytes * static_cast<size_t>(r), cols);
  }
  return w.AddTensor(name, type, {cols, rows, n_experts}, std::move(data));
}

// Router and experts of one MoE layer, in place of ffn_gate/ffn_up/ffn_down. The router stays
// F32 whatever the type, as llama.cpp's quantiser leaves it: routing is a discrete choice that
// rounded weights or activations could flip.
Status AddExpertLayer(GgufWriter& w, Rng& rng, const RandomModelSpec& s, const std::string& p) {
  const double in_std = 1.0 / std::sqrt(static_cast<double>(s.d_model));
  const int E = s.n_experts, F = s.d_ff_expert, D = s.d_model;
  for (Status x : {AddMatrix(w, rng, p + "ffn_gate_inp.weight", E, D, GgmlType::kF32, in_std),
                   AddExperts(w, rng, p + "ffn_gate_exps.weight", E, F, D, s.type, in_std),
                   AddExperts(w, rng, p + "ffn_up_exps.weight", E, F, D, s.type, in_std),
                   AddExperts(w, rng, p + "ffn_down_exps.weight", E, D, F, s.type,
                              1.0 / std::sqrt(static_cast<double>(F)))}) {
    PRIMEKV_RETURN_IF_ERROR(x);
  }
  return Status::Ok();
}

Status CheckSpec(const RandomModelSpec& s) {
  if (IsMoe(s) && (s.n_experts <= 0 || s.n_experts_used <= 0 || s.d_ff_expert <= 0 ||
                   s.n_experts_used > s.n_experts)) {
    return Status::Error(
        "make-model: qwen3moe needs 1 <= --experts-used <= --experts and --expert-ffn > 0");
  }
  if (s.n_layers <= 0 || s.d_model <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0 ||
      s.d_ff <= 0 || s.vocab_size <= 0 || s.max_context <= 0) {
    return Status::Error("make-model: every dimension must be positive");
  }
  if (s.n_heads % s.n_kv_heads != 0) {
    return Status::Error("make-model: --heads must be a multiple of --kv-heads");
  }
  if (s.head_dim % 2 != 0) return Status::Error("make-model: --head-dim must be even");
  if (s.arch == Arch::kPhi3 && s.n_heads * s.head_dim != s.d_model) {
    return Status::Error("make-model: phi3 needs --heads x --head-dim = --d-model");
  }
  if (s.long_rope && (s.arch != Arch::kPhi3 || s.rope_original_context < 2 ||
                      s.rope_original_context >= s.max_context)) {
    return Status::Error(
        "make-model: LongRoPE is phi3's and needs an original context of 2 or more, below "
        "--context");
  }
  if (s.sliding_window < 0 || s.sliding_window > kMaxSlidingWindow) {
    return Status::Error("make-model: --sliding-window must be in [0, " +
                         std::to_string(kMaxSlidingWindow) + "]");
  }
  auto info = TypeInfo(s.type);
  if (!info || !info->computable) return Status::Error("make-model: unsupported --type");
  for (int cols : {s.d_model, s.n_heads * s.head_dim, IsMoe(s) ? s.d_ff_expert : s.d_ff}) {
    if (cols % info->block_size != 0) {
      return Status::Error("make-model: type " + std::string(info->name) +
                           " needs row lengths that are multiples of " +
                           std::to_string(info->block_size) + " (got " + std::to_string(cols) +
                           ")");
    }
  }
  return Status::Ok();
}

// llama.cpp's Q4_K_M mix over Q4_K: Q6_K for the output matrix (the embedding when it is also
// the output) and for attn_v / ffn_down in the layers its use_more_bits picks (the first and
// last eighth, every third between), Q5_K for a fused attn_qkv.
GgmlType TensorType(const RandomModelSpec& s, std::string_view name, int layer) {
  if (!s.q4_k_m) return s.type;
  const bool tied = s.tied_embeddings || s.arch == Arch::kGemma || s.arch == Arch::kGemma2;
  if (name == "output.weight" || (tied && name == "token_embd.weight")) return GgmlType::kQ6_K;
  const int n = s.n_layers;
  const bool more_bits = layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
  if ((name == "attn_v.weight" || name == "ffn_down.weight") && more_bits) return GgmlType::kQ6_K;
  if (name == "attn_qkv.weight") return GgmlType::kQ5_K;
  return s.type;
}

// The keys of granite, phi3 and gemma2 beyond the llama ones, with the published models' values.
void AddArchKeys(GgufWriter& w, const RandomModelSpec& s) {
  const std::string a(ArchName(s.arch));
  auto f32 = [](double v) { return GgufValue::Float32(static_cast<float>(v)); };
  if (s.arch == Arch::kGranite) {
    // Granite 3.x: embedding_multiplier 12, residual_multiplier 0.22, logits_scaling 8; the
    // attention multiplier is 1/head_dim where the default would be 1/sqrt(head_dim).
    w.Add(a + ".embedding_scale", f32(12.0));
    w.Add(a + ".residual_scale", f32(0.22));
    w.Add(a + ".attention.scale", f32(1.0 / s.head_dim));
    w.Add(a + ".logit_scale", f32(8.0));
  }
  if (s.arch == Arch::kGemma2) {
    w.Add(a + ".attn_logit_softcapping", f32(50.0));
    w.Add(a + ".final_logit_softcapping", f32(30.0));
  }
  // Gemma 2's files always carry a window (the loader's default is 4096); Phi-3's may say 0.
  if ((s.arch == Arch::kGemma2 && s.sliding_window > 0) || s.arch == Arch::kPhi3) {
    w.Add(a + ".attention.sliding_window",
          GgufValue::Uint32(static_cast<uint32_t>(s.sliding_window)));
  }
  if (s.arch == Arch::kPhi3 && s.long_rope) {
    w.Add(a + ".rope.scaling.original_context_length",
          GgufValue::Uint32(static_cast<uint32_t>(s.rope_original_context)));
    // Phi-3.5's attention factor sqrt(1 + ln(scale) / ln(original context)).
    const double scale = static_cast<double>(s.max_context) / s.rope_original_context;
    w.Add(a + ".rope.scaling.attn_factor",
          f32(std::sqrt(1.0 +
                        std::log(scale) / std::log(static_cast<double>(s.rope_original_context)))));
  }
}

// The "<arch>.*" keys of the shape; vocab_size is the tokenizer's, which may differ from the
// spec's when a real tokenizer is imported.
void AddShapeKeys(GgufWriter& w, const RandomModelSpec& s, int vocab_size) {
  const std::string a(ArchName(s.arch));
  auto u32 = [](int v) { return GgufValue::Uint32(static_cast<uint32_t>(v)); };
  w.Add("general.architecture", GgufValue::String(a));
  // llama.cpp gives special tokens of a model named like "phi3" Phi-3's strip rules, which
  // need Phi-3's own vocabulary: a random model's name leaves the architecture out.
  w.Add("general.name",
        GgufValue::String(s.arch == Arch::kPhi3 ? "primekv-random" : "primekv-random-" + a));
  w.Add(a + ".block_count", u32(s.n_layers));
  w.Add(a + ".context_length", u32(s.max_context));
  w.Add(a + ".embedding_length", u32(s.d_model));
  w.Add(a + ".feed_forward_length", u32(s.d_ff));
  w.Add(a + ".attention.head_count", u32(s.n_heads));
  w.Add(a + ".attention.head_count_kv", u32(s.n_kv_heads));
  w.Add(a + ".attention.key_length", u32(s.head_dim));
  w.Add(a + ".attention.value_length", u32(s.head_dim));
  w.Add(a + ".rope.dimension_count", u32(s.head_dim));
  w.Add(a + ".rope.freq_base", GgufValue::Float32(s.rope_base));
  w.Add(a + ".attention.layer_norm_rms_epsilon",
        GgufValue::Float32(s.arch == Arch::kLlama || s.arch == Arch::kGranite ? 1e-5f : 1e-6f));
  w.Add(a + ".vocab_size", u32(vocab_size));
  if (IsMoe(s)) AddExpertKeys(w, s);
  AddArchKeys(w, s);
}

// The tensors of layer l, drawn from rng in a fixed order (the order fixes the weights).
Status AddLayer(GgufWriter& w, Rng& rng, const RandomModelSpec& s, int l) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const int qw = s.q_width(), kw = s.kv_width();
  const double in_std = 1.0 / std::sqrt(static_cast<double>(s.d_model));
  if (s.arch == Arch::kPhi3) {
    // Fused q/k/v and gate/up, as Phi-3's GGUFs store them.
    for (Status x : {AddVector(w, p + "attn_norm.weight", NormWeights(rng, s.d_model)),
                     AddMatrix(w, rng, p + "attn_qkv.weight", qw + 2 * kw, s.d_model,
                               TensorType(s, "attn_qkv.weight", l), in_std),
                     AddMatrix(w, rng, p + "attn_output.weight", s.d_model, qw,
                               TensorType(s, "attn_output.weight", l),
                               1.0 / std::sqrt(static_cast<double>(qw))),
                     AddVector(w, p + "ffn_norm.weight", NormWeights(rng, s.d_model)),
                     AddMatrix(w, rng, p + "ffn_up.weight", 2 * int64_t{s.d_ff}, s.d_model,
                               TensorType(s, "ffn_up.weight", l), in_std),
                     AddMatrix(w, rng, p + "ffn_down.weight", s.d_model, s.d_ff,
                               TensorType(s, "ffn_down.weight", l),
                               1.0 / std::sqrt(static_cast<double>(s.d_ff)))}) {
      PRIMEKV_RETURN_IF_ERROR(x);
    }
    return Status::Ok();
  }
  for (Status x :
       {AddVector(w, p + "attn_norm.weight", NormWeights(rng, s.d_model)),
        AddMatrix(w, rng, p + "attn_q.weight", qw, s.d_model, TensorType(s, "attn_q.weight", l),
                  in_std),
        AddMatrix(w, rng, p + "attn_k.weight", kw, s.d_model, TensorType(s, "attn_k.weight", l),
                  in_std),
        AddMatrix(w, rng, p + "attn_v.weight", kw, s.d_model, TensorType(s, "attn_v.weight", l),
                  in_std),
        AddMatrix(w, rng, p + "attn_output.weight", s.d_model, qw,
                  TensorType(s, "attn_output.weight", l), 1.0 / std::sqrt(static_cast<double>(qw))),
        AddVector(w, p + "ffn_norm.weight", NormWeights(rng, s.d_model))}) {
    PRIMEKV_RETURN_IF_ERROR(x);
  }
  if (s.arch == Arch::kGemma2) {
    // The post-norms set each block's share of the residual stream. At unit scale a deep random
    // model (llama.cpp runs Gemma 2 only at 26+ layers) turns every rounding difference into
    // another argmax; 1/sqrt(2 n_layers), GPT-2's residual scaling, keeps it a smooth function.
    const float scale = static_cast<float>(1.0 / std::sqrt(2.0 * s.n_layers));
    auto post_norm = [&] {
      std::vector<float> v = NormWeights(rng, s.d_model);
      for (float& x : v) x *= scale;
      return v;
    };
    for (Status x : {AddVector(w, p + "post_attention_norm.weight", post_norm()),
                     AddVector(w, p + "post_ffw_norm.weight", post_norm())}) {
      PRIMEKV_RETURN_IF_ERROR(x);
    }
  }
  if (IsMoe(s)) {
    PRIMEKV_RETURN_IF_ERROR(AddExpertLayer(w, rng, s, p));
  } else {
    for (Status x : {AddMatrix(w, rng, p + "ffn_gate.weight", s.d_ff, s.d_model,
                               TensorType(s, "ffn_gate.weight", l), in_std),
                     AddMatrix(w, rng, p + "ffn_up.weight", s.d_ff, s.d_model,
                               TensorType(s, "ffn_up.weight", l), in_std),
                     AddMatrix(w, rng, p + "ffn_down.weight", s.d_model, s.d_ff,
                               TensorType(s, "ffn_down.weight", l),
                               1.0 / std::sqrt(static_cast<double>(s.d_ff)))}) {
      PRIMEKV_RETURN_IF_ERROR(x);
    }
  }
  if (s.arch == Arch::kQwen2) {
    for (Status x : {AddVector(w, p + "attn_q.bias", Biases(rng, qw)),
                     AddVector(w, p + "attn_k.bias", Biases(rng, kw)),
                     AddVector(w, p + "attn_v.bias", Biases(rng, kw))}) {
      PRIMEKV_RETURN_IF_ERROR(x);
    }
  }
  if (s.arch == Arch::kQwen3 || IsMoe(s)) {
    for (Status x : {AddVector(w, p + "attn_q_norm.weight", NormWeights(rng, s.head_dim)),
                     AddVector(w, p + "attn_k_norm.weight", NormWeights(rng, s.head_dim))}) {
      PRIMEKV_RETURN_IF_ERROR(x);
    }
  }
  return Status::Ok();
}

}  // namespace

RandomModelSpec::RandomModelSpec() {
  arch = Arch::kLlama;
  n_layers = 2;
  d_model = 256;
  n_heads = 4;
  n_kv_heads = 2;
  head_dim = 64;
  d_ff = 688;
  vocab_size = 1024;
  max_context = 2048;
}

Status WriteRandomModel(const RandomModelSpec& s, const std::filesystem::path& out) {
  PRIMEKV_RETURN_IF_ERROR(CheckSpec(s));
  // A real Hugging Face tokenizer, or a synthetic one of the requested size.
  auto tok = s.hf_tokenizer.empty() ? MakeSyntheticTokenizerSpec(s.tokenizer, s.vocab_size)
                                    : TokenizerSpecFromHfDir(s.hf_tokenizer, s.vocab_size);
  if (!tok.ok()) return Status::Error("make-model: " + tok.message());
  const int vocab_size = static_cast<int>(tok->tokens.size());

  GgufWriter w;
  AddShapeKeys(w, s, vocab_size);
  AddTokenizerMetadata(w, *tok);
  Rng rng(s.seed);
  const double in_std = 1.0 / std::sqrt(static_cast<double>(s.d_model));
  // Gemma multiplies the embeddings by sqrt(d_model) (and reads its output through them):
  // unit-variance entries after that scale, as in the published models.
  const bool gemma = s.arch == Arch::kGemma || s.arch == Arch::kGemma2;
  PRIMEKV_RETURN_IF_ERROR(AddMatrix(w, rng, "token_embd.weight", vocab_size, s.d_model,
                                    TensorType(s, "token_embd.weight", -1), gemma ? in_std : 1.0));
  // Gemma's files never carry output.weight: the embedding is the output matrix.
  if (!s.tied_embeddings && s.arch != Arch::kGemma && s.arch != Arch::kGemma2) {
    PRIMEKV_RETURN_IF_ERROR(AddMatrix(w, rng, "output.weight", vocab_size, s.d_model,
                                      TensorType(s, "output.weight", -1), in_std));
  }
  PRIMEKV_RETURN_IF_ERROR(AddVector(w, "output_norm.weight", NormWeights(rng, s.d_model)));
  if (s.llama3_rope_scaling) {
    PRIMEKV_RETURN_IF_ERROR(
        AddVector(w, "rope_freqs.weight", Llama3FreqFactors(s.head_dim, s.rope_base)));
  }
  if (s.long_rope) {
    for (Status x :
         {AddVector(w, "rope_factors_long.weight", LongRopeFactors(s.head_dim, true)),
          AddVector(w, "rope_factors_short.weight", LongRopeFactors(s.head_dim, false))}) {
      PRIMEKV_RETURN_IF_ERROR(x);
    }
  }
  for (int l = 0; l < s.n_layers; ++l) PRIMEKV_RETURN_IF_ERROR(AddLayer(w, rng, s, l));
  return w.WriteFile(out);
}

}  // namespace primekv
