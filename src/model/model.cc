// Loading: GGUF metadata -> ModelConfig, tensors -> checked views into the mapping.
#include "primekv/model.h"

#include <cmath>
#include <string>

#include "primekv/dense.h"
#include "primekv/matmul.h"
#include "primekv/quant.h"

namespace primekv {

namespace {

std::string Key(const ModelConfig& c, const std::string& suffix) {
  return c.arch_name + "." + suffix;
}

Result<int> RequiredInt(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi) {
  auto v = f.GetInt(key);
  if (!v)
    return Status::Error(f.display_name() + ": missing or non-integer metadata key '" + key + "'");
  if (*v < lo || *v > hi) {
    return Status::Error(f.display_name() + ": metadata '" + key + "' = " + std::to_string(*v) +
                         " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int>(*v);
}

int OptionalInt(const GgufFile& f, const std::string& key, int fallback) {
  auto v = f.GetInt(key);
  return v ? static_cast<int>(*v) : fallback;
}

class TensorLoader {
 public:
  explicit TensorLoader(const GgufFile& f) : f_(f) {}

  // A 2-D weight with GGUF ne = [cols, rows].
  Result<WeightView> Matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (!t) return Status::Error(f_.display_name() + ": missing tensor '" + name + "'");
    if (t->ne.size() != 2 || t->ne[0] != cols || t->ne[1] != rows) {
      return Status::Error(f_.display_name() + ": tensor '" + name + "' has shape " + Shape(*t) +
                           ", expected [" + std::to_string(cols) + ", " + std::to_string(rows) +
                           "]");
    }
    auto info = TypeInfo(t->type);
    if (!info || !info->computable) {
      return Status::Error(
          f_.display_name() + ": tensor '" + name + "' has type " +
          std::string(info ? info->name : "unknown") +
          ", which this engine cannot compute (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
          "Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)");
    }
    WeightView w;
    w.type = t->type;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = quant::RowBytes(t->type, cols);
    w.data = f_.TensorData(*t).data();
    return w;
  }

  // A 1-D tensor of n elements, converted to float.
  Result<std::vector<float>> Vector(const std::string& name, int64_t n) const {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (!t) return Status::Error(f_.display_name() + ": missing tensor '" + name + "'");
    if (t->ne.size() != 1 || t->ne[0] != n) {
      return Status::Error(f_.display_name() + ": tensor '" + name + "' has shape " + Shape(*t) +
                           ", expected [" + std::to_string(n) + "]");
    }
    auto info = TypeInfo(t->type);
    if (!info || !info->computable || n % info->block_size != 0) {
      return Status::Error(f_.display_name() + ": tensor '" + name + "' has an unsupported type");
    }
    std::vector<float> out(static_cast<size_t>(n));
    quant::DequantizeRow(t->type, f_.TensorData(*t).data(), out.data(), n);
    return out;
  }

  bool Has(const std::string& name) const { return f_.FindTensor(name) != nullptr; }

 private:
  static std::string Shape(const GgufTensorInfo& t) {
    std::string s = "[";
    for (size_t i = 0; i < t.ne.size(); ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
    return s + "]";
  }
  const GgufFile& f_;
};

Result<ModelConfig> ReadConfig(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.GetString("general.architecture");
  if (!arch) return Status::Error(f.display_name() + ": missing 'general.architecture'");
  c.arch_name = *arch;
  if (c.arch_name == "llama") {
    c.arch = Arch::kLlama;
    c.rope_style = RopeStyle::kAdjacent;
  } else if (c.arch_name == "qwen2") {
    c.arch = Arch::kQwen2;
    c.rope_style = RopeStyle::kHalf;
    c.qkv_bias = true;
  } else if (c.arch_name == "qwen3") {
    c.arch = Arch::kQwen3;
    c.rope_style = RopeStyle::kHalf;
    c.qk_norm = true;
  } else {
    return Status::Error(f.display_name() + ": architecture '" + c.arch_name +
                         "' is not supported (supported: llama, qwen2, qwen3)");
  }
  c.name = f.GetString("general.name").value_or(c.arch_name);
  constexpr int64_t kBig = int64_t{1} << 24;
  auto layers = RequiredInt(f, Key(c, "block_count"), 1, 4096);
  if (!layers.ok()) return layers.status();
  auto d_model = RequiredInt(f, Key(c, "embedding_length"), 1, kBig);
  if (!d_model.ok()) return d_model.status();
  auto d_ff = RequiredInt(f, Key(c, "feed_forward_length"), 1, kBig);
  if (!d_ff.ok()) return d_ff.status();
  auto heads = RequiredInt(f, Key(c, "attention.head_count"), 1, 65536);
  if (!heads.ok()) return heads.status();
  c.n_layers = *layers;
  c.d_model = *d_model;
  c.d_ff = *d_ff;
  c.n_heads = *heads;
  c.n_kv_heads = OptionalInt(f, Key(c, "attention.head_count_kv"), c.n_heads);
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0) {
    return Status::Error(f.display_name() + ": head_count " + std::to_string(c.n_heads) +
                         " is not a multiple of head_count_kv " + std::to_string(c.n_kv_heads));
  }
  c.head_dim = OptionalInt(f, Key(c, "attention.key_length"), c.d_model / c.n_heads);
  const int value_length = OptionalInt(f, Key(c, "attention.value_length"), c.head_dim);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || value_length != c.head_dim) {
    return Status::Error(f.display_name() + ": unsupported head dimension (key " +
                         std::to_string(c.head_dim) + ", value " + std::to_string(value_length) +
                         ")");
  }
  c.max_context = OptionalInt(f, Key(c, "context_length"), 2048);
  c.rope_dim = OptionalInt(f, Key(c, "rope.dimension_count"), c.head_dim);
  if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    return Status::Error(f.display_name() + ": rope.dimension_count " + std::to_string(c.rope_dim) +
                         " must be even and at most the head dimension " +
                         std::to_string(c.head_dim));
  }
  c.rope_base = static_cast<float>(f.GetFloat(Key(c, "rope.freq_base")).value_or(10000.0));
  c.rms_eps = static_cast<float>(f.GetFloat(Key(c, "attention.layer_norm_rms_epsilon"))
                                     .value_or(c.arch == Arch::kLlama ? 1e-5 : 1e-6));
  if (!(c.rope_base > 0) || !(c.rms_eps > 0)) {
    return Status::Error(f.display_name() + ": rope.freq_base and rms epsilon must be positive");
  }
  if (auto scaling = f.GetString(Key(c, "rope.scaling.type"));
      scaling && *scaling != "none" && *scaling != "llama3") {
    // llama3 scaling arrives as the rope_freqs tensor; linear/yarn are not implemented.
    return Status::Error(f.display_name() + ": rope scaling '" + *scaling + "' is not supported");
  }
  return c;
}

}  // namespace

Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Result<Model> Model::Load(const std::filesystem::path& path) {
  auto file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  Model m;
  m.file_ = std::make_unique<GgufFile>(std::move(file).value());
  const GgufFile& f = *m.file_;
  auto cfg = ReadConfig(f);
  if (!cfg.ok()) return cfg.status();
  m.config_ = std::move(cfg).value();
  ModelConfig& c = m.config_;

  auto spec = TokenizerSpecFromGguf(f);
  if (!spec.ok()) return Status::Error(f.display_name() + ": tokenizer: " + spec.message());
  auto tok = Tokenizer::Create(std::move(spec).value());
  if (!tok.ok()) return Status::Error(f.display_name() + ": tokenizer: " + tok.message());
  m.tokenizer_ = std::make_unique<Tokenizer>(std::move(tok).value());

  TensorLoader t(f);
  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  if (!embd || embd->ne.size() != 2) {
    return Status::Error(f.display_name() + ": missing 2-D tensor 'token_embd.weight'");
  }
  c.vocab_size = static_cast<int>(embd->ne[1]);
  if (auto v = f.GetInt(Key(c, "vocab_size")); v && *v != c.vocab_size) {
    return Status::Error(f.display_name() + ": vocab_size " + std::to_string(*v) +
                         " differs from token_embd rows " + std::to_string(c.vocab_size));
  }
  if (m.tokenizer_->vocab_size() > c.vocab_size) {
    return Status::Error(f.display_name() + ": tokenizer has " +
                         std::to_string(m.tokenizer_->vocab_size()) +
                         " tokens but the model only " + std::to_string(c.vocab_size));
  }
  auto emb = t.Matrix("token_embd.weight", c.vocab_size, c.d_model);
  if (!emb.ok()) return emb.status();
  m.token_embd_ = *emb;
  c.tied_embeddings = !t.Has("output.weight");
  if (c.tied_embeddings) {
    m.output_ = m.token_embd_;
  } else {
    auto out = t.Matrix("output.weight", c.vocab_size, c.d_model);
    if (!out.ok()) return out.status();
    m.output_ = *out;
  }
  auto onorm = t.Vector("output_norm.weight", c.d_model);
  if (!onorm.ok()) return onorm.status();
  m.output_norm_ = std::move(onorm).value();

  const int qw = c.q_width(), kw = c.kv_width();
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights L;
    auto vec = [&](const std::string& name, int64_t n, std::vector<float>& out) -> Status {
      auto r = t.Vector(p + name, n);
      if (!r.ok()) return r.status();
      out = std::move(r).value();
      return Status::Ok();
    };
    auto mat = [&](const std::string& name, int64_t rows, int64_t cols, WeightView& out) -> Status {
      auto r = t.Matrix(p + name, rows, cols);
      if (!r.ok()) return r.status();
      out = *r;
      return Status::Ok();
    };
    for (Status s :
         {vec("attn_norm.weight", c.d_model, L.attn_norm),
          mat("attn_q.weight", qw, c.d_model, L.wq), mat("attn_k.weight", kw, c.d_model, L.wk),
          mat("attn_v.weight", kw, c.d_model, L.wv), mat("attn_output.weight", c.d_model, qw, L.wo),
          vec("ffn_norm.weight", c.d_model, L.ffn_norm),
          mat("ffn_gate.weight", c.d_ff, c.d_model, L.w_gate),
          mat("ffn_up.weight", c.d_ff, c.d_model, L.w_up),
          mat("ffn_down.weight", c.d_model, c.d_ff, L.w_down)}) {
      if (!s.ok()) return s;
    }
    if (c.qkv_bias) {
      for (Status s : {vec("attn_q.bias", qw, L.bq), vec("attn_k.bias", kw, L.bk),
                       vec("attn_v.bias", kw, L.bv)}) {
        if (!s.ok()) return s;
      }
    }
    if (c.qk_norm) {
      for (Status s : {vec("attn_q_norm.weight", c.head_dim, L.q_norm),
                       vec("attn_k_norm.weight", c.head_dim, L.k_norm)}) {
        if (!s.ok()) return s;
      }
    }
    m.layers_.push_back(std::move(L));
  }

  if (t.Has("rope_freqs.weight")) {
    auto ff = t.Vector("rope_freqs.weight", c.rope_dim / 2);
    if (!ff.ok()) return ff.status();
    c.rope_freq_factors = std::move(ff).value();
  }
  m.rope_inv_freq_.resize(static_cast<size_t>(c.rope_dim / 2));
  for (int i = 0; i < c.rope_dim / 2; ++i) {
    double inv = std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.rope_dim);
    if (!c.rope_freq_factors.empty()) inv /= c.rope_freq_factors[static_cast<size_t>(i)];
    m.rope_inv_freq_[static_cast<size_t>(i)] = static_cast<float>(inv);
  }
  return m;
}

KvCache Model::NewCache(KvCacheOptions options) const {
  return KvCache(config_.n_layers, config_.n_kv_heads, config_.head_dim, options);
}

std::vector<float> Model::OutputGram(int layer, int kv_head) const {
  const ModelConfig& c = config_;
  const int d = c.head_dim;
  const WeightView& wo = layers_[static_cast<size_t>(layer)].wo;  // [d_model, n_heads * d]
  const int width = static_cast<int>(wo.cols);
  constexpr int kRows = 256;
  std::vector<double> acc(static_cast<size_t>(d) * d, 0.0);
  std::vector<float> block(static_cast<size_t>(kRows) * width), part(static_cast<size_t>(d) * d);
  // Float products over row blocks, summed in double: sum_rows w_a w_b for each head slice.
  for (int64_t r0 = 0; r0 < wo.rows; r0 += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, wo.rows - r0));
    for (int i = 0; i < rows; ++i)
      GetRow(wo, r0 + i, block.data() + static_cast<size_t>(i) * width);
    for (int g = 0; g < c.group(); ++g) {
      const float* slice = block.data() + static_cast<size_t>(kv_head * c.group() + g) * d;
      dense::GemmTN(d, d, rows, 1.0f, slice, width, slice, width, 0.0f, part.data(), d);
      for (size_t t = 0; t < acc.size(); ++t) acc[t] += part[t];
    }
  }
  return std::vector<float>(acc.begin(), acc.end());
}

}  // namespace primekv
