// Loading: GGUF metadata -> ModelConfig, tensors -> checked views into the mapping.
#include "primekv/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "primekv/quant/dense.h"
#include "primekv/quant/matmul.h"
#include "primekv/quant/quant.h"
#include "primekv/util/text.h"

namespace primekv {

namespace {

constexpr int64_t kMaxVocab = int64_t{1} << 24;

// What each architecture changes in the llama block.
struct ArchTraits {
  Arch arch;
  std::string_view name;
  RopeStyle rope_style;
  bool qkv_bias;
  bool qk_norm;
};
constexpr ArchTraits kArchs[] = {
    {Arch::kLlama, "llama", RopeStyle::kAdjacent, false, false},
    {Arch::kQwen2, "qwen2", RopeStyle::kHalf, true, false},
    {Arch::kQwen3, "qwen3", RopeStyle::kHalf, false, true},
    {Arch::kQwen3Moe, "qwen3moe", RopeStyle::kHalf, false, true},
    {Arch::kGranite, "granite", RopeStyle::kAdjacent, false, false},
    {Arch::kPhi3, "phi3", RopeStyle::kHalf, false, false},
    {Arch::kGemma, "gemma", RopeStyle::kHalf, false, false},
    {Arch::kGemma2, "gemma2", RopeStyle::kHalf, false, false},
};

std::string SupportedArchNames() {
  std::string out;
  for (const ArchTraits& t : kArchs) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

// File text in messages: printable ASCII, other bytes as \xNN, at most 80 bytes.
// (Appended rather than "'" + ... + "'": g++ 12 -O3 warns falsely (-Wrestrict) on that form.)
std::string QuoteForMessage(std::string_view s) {
  std::string quoted = "'";
  quoted += Printable(s, 80);
  quoted += '\'';
  return quoted;
}

std::string Key(const ModelConfig& c, const std::string& suffix) {
  return c.arch_name + "." + suffix;
}

// The value of an integer key as text, whatever its width or sign (never wrapped to -1).
std::string IntText(const GgufValue& v) {
  const bool is_unsigned = v.type == GgufType::kUint8 || v.type == GgufType::kUint16 ||
                           v.type == GgufType::kUint32 || v.type == GgufType::kUint64;
  return is_unsigned ? std::to_string(v.u) : std::to_string(v.i);
}

// A float in messages, as %g prints it ("nan", "inf", "1.4013e-45").
std::string FloatText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// An integer key in [lo, hi]; absent keys give `fallback` when there is one, else an error.
Result<int> IntKey(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi,
                   std::optional<int> fallback) {
  const GgufValue* raw = f.Find(key);
  if (!raw) {
    if (fallback) return *fallback;
    return Status::Error(f.display_name() + ": missing metadata key '" + key + "'");
  }
  auto v = f.GetInt(key);
  if (!v && raw->type != GgufType::kUint64) {
    return Status::Error(f.display_name() + ": metadata '" + key + "' is a " +
                         std::string(GgufTypeName(raw->type)) + ", not an integer");
  }
  if (!v || *v < lo || *v > hi) {
    return Status::Error(f.display_name() + ": metadata '" + key + "' = " + IntText(*raw) +
                         " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int>(*v);
}

Result<int> RequiredInt(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi) {
  return IntKey(f, key, lo, hi, std::nullopt);
}

Result<int> OptionalInt(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi,
                        int fallback) {
  return IntKey(f, key, lo, hi, fallback);
}

class TensorLoader {
 public:
  explicit TensorLoader(const GgufFile& f) : f_(f) {}

  // A 2-D weight with GGUF ne = [cols, rows].
  Result<WeightView> Matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (!t) return Status::Error(f_.display_name() + ": missing tensor '" + name + "'");
    return Matrix(*t, rows, cols);
  }

  Result<WeightView> Matrix(const GgufTensorInfo& info_in, int64_t rows, int64_t cols) const {
    const GgufTensorInfo* t = &info_in;
    const std::string& name = t->name;
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
          ", which this engine cannot compute (supported: " + ComputableTypeNames() + ")");
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

  // A GGUF 3-D tensor ne = [cols, rows, n_experts] (one matrix per expert).
  Result<ExpertWeights> Experts(const std::string& name, int64_t n_experts, int64_t rows,
                                int64_t cols) const {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (!t) return Status::Error(f_.display_name() + ": missing tensor '" + name + "'");
    if (t->ne.size() != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n_experts) {
      return Status::Error(f_.display_name() + ": tensor '" + name + "' has shape " + Shape(*t) +
                           ", expected [" + std::to_string(cols) + ", " + std::to_string(rows) +
                           ", " + std::to_string(n_experts) + "]");
    }
    // Viewed as one matrix of n_experts * rows rows, so Matrix's type checks apply.
    GgufTensorInfo flat = *t;
    flat.ne = {cols, rows * n_experts};
    auto all = Matrix(flat, rows * n_experts, cols);
    if (!all.ok()) return all.status();
    return ExpertWeights{*all, rows};
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

// expert_count and expert_used_count are required; the expert FFN width falls back to
// feed_forward_length / expert_used_count, as llama.cpp does for files that omit it.
Status ReadExpertConfig(const GgufFile& f, ModelConfig& c) {
  PRIMEKV_ASSIGN_OR_RETURN(c.n_experts, RequiredInt(f, Key(c, "expert_count"), 1, 4096));
  PRIMEKV_ASSIGN_OR_RETURN(c.n_experts_used,
                           RequiredInt(f, Key(c, "expert_used_count"), 1, c.n_experts));
  const std::string ff_key = Key(c, "expert_feed_forward_length");
  if (f.GetInt(ff_key)) {
    PRIMEKV_ASSIGN_OR_RETURN(c.d_ff_expert, RequiredInt(f, ff_key, 1, int64_t{1} << 24));
  } else {
    c.d_ff_expert = c.d_ff / c.n_experts_used;
    if (c.d_ff_expert <= 0) {
      return Status::Error(f.display_name() + ": no '" + ff_key +
                           "' and feed_forward_length is smaller than expert_used_count");
    }
  }
  if (auto shared = f.GetInt(Key(c, "expert_shared_count")); shared && *shared != 0) {
    return Status::Error(f.display_name() + ": shared experts (expert_shared_count " +
                         std::to_string(*shared) + ") are not supported for " + c.arch_name);
  }
  return Status::Ok();
}

// Architecture, name and the traits that follow from the architecture.
Status ReadArch(const GgufFile& f, ModelConfig& c) {
  auto arch = f.GetString("general.architecture");
  if (!arch) return Status::Error(f.display_name() + ": missing 'general.architecture'");
  c.arch_name = *arch;
  const auto traits = std::find_if(std::begin(kArchs), std::end(kArchs),
                                   [&](const ArchTraits& t) { return t.name == c.arch_name; });
  if (traits == std::end(kArchs)) {
    return Status::Error(f.display_name() + ": architecture " + QuoteForMessage(c.arch_name) +
                         " is not supported (supported: " + SupportedArchNames() + ")");
  }
  c.arch = traits->arch;
  c.rope_style = traits->rope_style;
  c.qkv_bias = traits->qkv_bias;
  c.qk_norm = traits->qk_norm;
  c.name = f.GetString("general.name").value_or(c.arch_name);
  return Status::Ok();
}

constexpr int64_t kBig = int64_t{1} << 24;
constexpr int64_t kMaxHeadDim = 4096;

// Layers, widths and heads.
Status ReadDimensions(const GgufFile& f, ModelConfig& c) {
  PRIMEKV_ASSIGN_OR_RETURN(c.n_layers, RequiredInt(f, Key(c, "block_count"), 1, 4096));
  PRIMEKV_ASSIGN_OR_RETURN(c.d_model, RequiredInt(f, Key(c, "embedding_length"), 1, kBig));
  PRIMEKV_ASSIGN_OR_RETURN(c.d_ff, RequiredInt(f, Key(c, "feed_forward_length"), 1, kBig));
  PRIMEKV_ASSIGN_OR_RETURN(c.n_heads, RequiredInt(f, Key(c, "attention.head_count"), 1, 65536));
  PRIMEKV_ASSIGN_OR_RETURN(
      c.n_kv_heads, OptionalInt(f, Key(c, "attention.head_count_kv"), 1, c.n_heads, c.n_heads));
  if (c.n_heads % c.n_kv_heads != 0) {
    return Status::Error(f.display_name() + ": head_count " + std::to_string(c.n_heads) +
                         " is not a multiple of head_count_kv " + std::to_string(c.n_kv_heads));
  }
  PRIMEKV_ASSIGN_OR_RETURN(c.head_dim,
                           OptionalInt(f, Key(c, "attention.key_length"), 1, kMaxHeadDim,
                                       std::max(1, c.d_model / c.n_heads)));
  PRIMEKV_ASSIGN_OR_RETURN(const int value_length, OptionalInt(f, Key(c, "attention.value_length"),
                                                               1, kMaxHeadDim, c.head_dim));
  if (static_cast<int64_t>(c.n_heads) * c.head_dim > kBig) {
    return Status::Error(f.display_name() + ": head_count " + std::to_string(c.n_heads) +
                         " x key_length " + std::to_string(c.head_dim) + " exceeds " +
                         std::to_string(kBig));
  }
  if (c.head_dim % 2 != 0 || value_length != c.head_dim) {
    return Status::Error(f.display_name() + ": unsupported head dimension (key " +
                         std::to_string(c.head_dim) + ", value " + std::to_string(value_length) +
                         ")");
  }
  return Status::Ok();
}

// Context length, RoPE and the norm epsilon.
Status ReadPositions(const GgufFile& f, ModelConfig& c) {
  // 0 or a wrapped 0xFFFFFFFF would read as "no limit": a context is 1 .. 2^28 tokens.
  PRIMEKV_ASSIGN_OR_RETURN(c.max_context,
                           OptionalInt(f, Key(c, "context_length"), 1, int64_t{1} << 28, 2048));
  PRIMEKV_ASSIGN_OR_RETURN(
      c.rope_dim, OptionalInt(f, Key(c, "rope.dimension_count"), 1, kMaxHeadDim, c.head_dim));
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    return Status::Error(f.display_name() + ": rope.dimension_count " + std::to_string(c.rope_dim) +
                         " must be even and at most the head dimension " +
                         std::to_string(c.head_dim));
  }
  c.rope_base = static_cast<float>(f.GetFloat(Key(c, "rope.freq_base")).value_or(10000.0));
  c.rms_eps = static_cast<float>(
      f.GetFloat(Key(c, "attention.layer_norm_rms_epsilon"))
          .value_or(c.arch == Arch::kLlama || c.arch == Arch::kGranite ? 1e-5 : 1e-6));
  if (!(c.rope_base > 0) || !(c.rms_eps > 0) || !std::isfinite(c.rope_base) ||
      !std::isfinite(c.rms_eps)) {
    return Status::Error(f.display_name() + ": rope.freq_base and rms epsilon must be positive");
  }
  return Status::Ok();
}

// A positive finite float key, or `fallback` when absent.
Result<float> PositiveFloat(const GgufFile& f, const std::string& key, float fallback) {
  const GgufValue* raw = f.Find(key);
  if (!raw) return fallback;
  auto v = f.GetFloat(key);
  if (!v || !(*v > 0) || !std::isfinite(static_cast<float>(*v))) {
    return Status::Error(f.display_name() + ": metadata '" + key + "' must be a finite number > 0");
  }
  return static_cast<float>(*v);
}

// Granite's four multipliers (llama.cpp's build_llama applies them).
Status ReadGraniteScales(const GgufFile& f, ModelConfig& c) {
  PRIMEKV_ASSIGN_OR_RETURN(c.embedding_scale, PositiveFloat(f, Key(c, "embedding_scale"), 1.0f));
  PRIMEKV_ASSIGN_OR_RETURN(c.residual_scale, PositiveFloat(f, Key(c, "residual_scale"), 1.0f));
  PRIMEKV_ASSIGN_OR_RETURN(c.attention_scale, PositiveFloat(f, Key(c, "attention.scale"), 0.0f));
  PRIMEKV_ASSIGN_OR_RETURN(c.logit_scale, PositiveFloat(f, Key(c, "logit_scale"), 1.0f));
  return Status::Ok();
}

// Gemma and Gemma 2: scaled embeddings and GeGLU; Gemma 2 adds post-norms, soft-capping and
// sliding-window layers.
Status ReadGemmaConfig(const GgufFile& f, ModelConfig& c) {
  c.embedding_scale = std::sqrt(static_cast<float>(c.d_model));
  c.ffn_activation = FfnActivation::kGeluTanh;
  if (c.arch != Arch::kGemma2) return Status::Ok();
  c.post_norms = true;
  PRIMEKV_ASSIGN_OR_RETURN(c.attn_softcap,
                           PositiveFloat(f, Key(c, "attn_logit_softcapping"), 50.0f));
  PRIMEKV_ASSIGN_OR_RETURN(c.final_softcap,
                           PositiveFloat(f, Key(c, "final_logit_softcapping"), 30.0f));
  PRIMEKV_ASSIGN_OR_RETURN(c.sliding_window, OptionalInt(f, Key(c, "attention.sliding_window"), 1,
                                                         kMaxSlidingWindow, 4096));
  // llama.cpp scales queries by 1/sqrt(d_model / n_heads) for the 46-layer 27B (its
  // query_pre_attn_scalar) and by 1/sqrt(head_dim) otherwise.
  const int q_scalar = c.n_layers == 46 ? c.d_model / c.n_heads : c.head_dim;
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(q_scalar));
  return Status::Ok();
}

// Phi-3: the sliding window (llama.cpp's defaults for files that predate the key) and the
// LongRoPE keys; the factors themselves are tensors, read with the weights.
Status ReadPhi3Config(const GgufFile& f, ModelConfig& c) {
  int window = 0;
  if ((c.n_layers == 32 || c.n_layers == 40) && c.max_context == 4096) {
    window = 2047;
  } else if (c.n_layers == 32 && c.n_kv_heads == 32 && c.max_context == 131072) {
    window = 262144;
  } else if (c.n_layers == 40 && c.max_context == 131072) {
    window = 131072;
  }
  PRIMEKV_ASSIGN_OR_RETURN(c.sliding_window, OptionalInt(f, Key(c, "attention.sliding_window"), 0,
                                                         kMaxSlidingWindow, window));
  c.swa_every_layer = true;
  PRIMEKV_ASSIGN_OR_RETURN(c.rope_original_context,
                           OptionalInt(f, Key(c, "rope.scaling.original_context_length"), 1,
                                       int64_t{1} << 28, c.max_context));
  PRIMEKV_ASSIGN_OR_RETURN(c.rope_attn_factor,
                           PositiveFloat(f, Key(c, "rope.scaling.attn_factor"), 1.0f));
  return Status::Ok();
}

// rope.scaling.type: absent, "none" or "llama3" (whose scaling arrives as the rope_freqs
// tensor); linear and yarn are not implemented. A value of another type is refused rather than
// taken for absent, which would run the model unscaled.
Status CheckRopeScaling(const GgufFile& f, const ModelConfig& c) {
  const std::string key = Key(c, "rope.scaling.type");
  const GgufValue* raw = f.Find(key);
  if (raw == nullptr) return Status::Ok();
  if (raw->type != GgufType::kString) {
    return Status::Error(f.display_name() + ": metadata '" + key + "' is a " +
                         std::string(GgufTypeName(raw->type)) + ", not a string");
  }
  if (raw->s != "none" && raw->s != "llama3") {
    return Status::Error(f.display_name() + ": rope scaling " + QuoteForMessage(raw->s) +
                         " is not supported");
  }
  return Status::Ok();
}

Result<ModelConfig> ReadConfig(const GgufFile& f) {
  ModelConfig c;
  PRIMEKV_RETURN_IF_ERROR(ReadArch(f, c));
  PRIMEKV_RETURN_IF_ERROR(ReadDimensions(f, c));
  PRIMEKV_RETURN_IF_ERROR(ReadPositions(f, c));
  if (c.arch == Arch::kQwen3Moe) PRIMEKV_RETURN_IF_ERROR(ReadExpertConfig(f, c));
  if (c.arch == Arch::kGranite) PRIMEKV_RETURN_IF_ERROR(ReadGraniteScales(f, c));
  if (c.arch == Arch::kGemma || c.arch == Arch::kGemma2)
    PRIMEKV_RETURN_IF_ERROR(ReadGemmaConfig(f, c));
  if (c.arch == Arch::kPhi3) PRIMEKV_RETURN_IF_ERROR(ReadPhi3Config(f, c));
  PRIMEKV_RETURN_IF_ERROR(CheckRopeScaling(f, c));
  return c;
}

// Router and the three stacked expert tensors of one MoE layer (prefix "blk.N.").
Status LoadExpertLayer(const TensorLoader& t, const std::string& p, const ModelConfig& c,
                       LayerWeights& L) {
  PRIMEKV_ASSIGN_OR_RETURN(L.router, t.Matrix(p + "ffn_gate_inp.weight", c.n_experts, c.d_model));
  struct Want {
    const char* name;
    int64_t rows, cols;
    ExpertWeights* out;
  };
  for (const Want& w : {Want{"ffn_gate_exps.weight", c.d_ff_expert, c.d_model, &L.gate_exps},
                        Want{"ffn_up_exps.weight", c.d_ff_expert, c.d_model, &L.up_exps},
                        Want{"ffn_down_exps.weight", c.d_model, c.d_ff_expert, &L.down_exps}}) {
    PRIMEKV_ASSIGN_OR_RETURN(*w.out, t.Experts(p + w.name, c.n_experts, w.rows, w.cols));
  }
  return Status::Ok();
}

// Rows [first, first + count) of a matrix.
WeightView RowRange(const WeightView& w, int64_t first, int64_t count) {
  WeightView out = w;
  out.rows = count;
  out.data = w.data + static_cast<size_t>(first) * w.row_bytes;
  return out;
}

// The weights of layer l (prefix "blk.l."), checked against the configuration.
Result<LayerWeights> LoadLayer(const TensorLoader& t, const ModelConfig& c, int l) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const int qw = c.q_width(), kw = c.kv_width();
  LayerWeights L;
  auto vec = [&](const std::string& name, int64_t n, std::vector<float>& out) -> Status {
    PRIMEKV_ASSIGN_OR_RETURN(out, t.Vector(p + name, n));
    return Status::Ok();
  };
  auto mat = [&](const std::string& name, int64_t rows, int64_t cols, WeightView& out) -> Status {
    PRIMEKV_ASSIGN_OR_RETURN(out, t.Matrix(p + name, rows, cols));
    return Status::Ok();
  };
  for (Status s : {vec("attn_norm.weight", c.d_model, L.attn_norm),
                   mat("attn_output.weight", c.d_model, qw, L.wo),
                   vec("ffn_norm.weight", c.d_model, L.ffn_norm)}) {
    PRIMEKV_RETURN_IF_ERROR(s);
  }
  if (c.arch == Arch::kPhi3) {
    // Fused projections, viewed as row ranges (rows are quantised independently): attn_qkv is
    // q, k, v stacked; ffn_up is the SwiGLU gate then its up half.
    WeightView qkv, gate_up;
    PRIMEKV_RETURN_IF_ERROR(mat("attn_qkv.weight", qw + 2 * kw, c.d_model, qkv));
    L.wq = RowRange(qkv, 0, qw);
    L.wk = RowRange(qkv, qw, kw);
    L.wv = RowRange(qkv, qw + kw, kw);
    PRIMEKV_RETURN_IF_ERROR(mat("ffn_up.weight", 2 * int64_t{c.d_ff}, c.d_model, gate_up));
    L.w_gate = RowRange(gate_up, 0, c.d_ff);
    L.w_up = RowRange(gate_up, c.d_ff, c.d_ff);
    PRIMEKV_RETURN_IF_ERROR(mat("ffn_down.weight", c.d_model, c.d_ff, L.w_down));
    return L;
  }
  for (Status s :
       {mat("attn_q.weight", qw, c.d_model, L.wq), mat("attn_k.weight", kw, c.d_model, L.wk),
        mat("attn_v.weight", kw, c.d_model, L.wv)}) {
    PRIMEKV_RETURN_IF_ERROR(s);
  }
  if (c.post_norms) {
    for (Status s : {vec("post_attention_norm.weight", c.d_model, L.attn_post_norm),
                     vec("post_ffw_norm.weight", c.d_model, L.ffn_post_norm)}) {
      PRIMEKV_RETURN_IF_ERROR(s);
    }
  }
  if (c.moe()) {
    PRIMEKV_RETURN_IF_ERROR(LoadExpertLayer(t, p, c, L));
  } else {
    for (Status s : {mat("ffn_gate.weight", c.d_ff, c.d_model, L.w_gate),
                     mat("ffn_up.weight", c.d_ff, c.d_model, L.w_up),
                     mat("ffn_down.weight", c.d_model, c.d_ff, L.w_down)}) {
      PRIMEKV_RETURN_IF_ERROR(s);
    }
  }
  if (c.qkv_bias) {
    for (Status s : {vec("attn_q.bias", qw, L.bq), vec("attn_k.bias", kw, L.bk),
                     vec("attn_v.bias", kw, L.bv)}) {
      PRIMEKV_RETURN_IF_ERROR(s);
    }
  }
  if (c.qk_norm) {
    for (Status s : {vec("attn_q_norm.weight", c.head_dim, L.q_norm),
                     vec("attn_k_norm.weight", c.head_dim, L.k_norm)}) {
      PRIMEKV_RETURN_IF_ERROR(s);
    }
  }
  return L;
}

Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const GgufFile& f) {
  auto spec = TokenizerSpecFromGguf(f);
  if (!spec.ok()) return Status::Error(f.display_name() + ": tokenizer: " + spec.message());
  auto tok = Tokenizer::Create(std::move(spec).value());
  if (!tok.ok()) return Status::Error(f.display_name() + ": tokenizer: " + tok.message());
  return std::make_unique<Tokenizer>(std::move(tok).value());
}

// The vocabulary size is token_embd's row count; vocab_size, when present, must agree, and
// the tokenizer must fit in it.
Status ReadVocabSize(const GgufFile& f, const Tokenizer& tokenizer, ModelConfig& c) {
  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  if (!embd || embd->ne.size() != 2) {
    return Status::Error(f.display_name() + ": missing 2-D tensor 'token_embd.weight'");
  }
  if (embd->ne[1] < 1 || embd->ne[1] > kMaxVocab) {
    return Status::Error(f.display_name() + ": token_embd.weight has " +
                         std::to_string(embd->ne[1]) + " rows; a vocabulary is 1 to " +
                         std::to_string(kMaxVocab) + " tokens");
  }
  c.vocab_size = static_cast<int>(embd->ne[1]);
  if (const GgufValue* v = f.Find(Key(c, "vocab_size"));
      v && f.GetInt(Key(c, "vocab_size")) != std::optional<int64_t>(c.vocab_size)) {
    return Status::Error(f.display_name() + ": vocab_size " + IntText(*v) +
                         " differs from token_embd rows " + std::to_string(c.vocab_size));
  }
  if (tokenizer.vocab_size() > c.vocab_size) {
    return Status::Error(f.display_name() + ": tokenizer has " +
                         std::to_string(tokenizer.vocab_size()) + " tokens but the model only " +
                         std::to_string(c.vocab_size));
  }
  return Status::Ok();
}

// RoPE inverse frequencies base^(-2i/rope_dim), divided by any llama3 frequency factors. Each
// must be a positive float: a NaN, infinite or zero one (a factor of 0 or NaN, a base so small
// that base^-1 overflows) turns every rotated query and key into NaN or leaves them unrotated.
Result<std::vector<float>> RopeInvFreq(const GgufFile& f, const ModelConfig& c) {
  std::vector<float> out(static_cast<size_t>(c.rope_dim / 2));
  for (int i = 0; i < c.rope_dim / 2; ++i) {
    if (!c.rope_freq_factors.empty()) {
      const float factor = c.rope_freq_factors[static_cast<size_t>(i)];
      if (!(factor > 0) || !std::isfinite(factor)) {
        return Status::Error(f.display_name() + ": rope_freqs.weight[" + std::to_string(i) +
                             "] = " + FloatText(factor) +
                             "; a RoPE frequency factor must be finite and > 0");
      }
    }
    double inv = std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.rope_dim);
    if (!c.rope_freq_factors.empty()) inv /= c.rope_freq_factors[static_cast<size_t>(i)];
    const float v = static_cast<float>(inv);
    if (!(v > 0) || !std::isfinite(v)) {
      return Status::Error(f.display_name() + ": rope.freq_base " + FloatText(c.rope_base) +
                           (c.rope_freq_factors.empty() ? "" : " with rope_freqs.weight") +
                           " gives the RoPE inverse frequency " +
                           FloatText(static_cast<float>(inv)) + " at pair " + std::to_string(i) +
                           "; it must be a finite float > 0");
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

// Phi-3 LongRoPE: both factor tensors, and the one in force for `context` tokens (0: the trained
// context), chosen as llama.cpp chooses by its context size.
Status ReadLongRope(const TensorLoader& t, int64_t context, ModelConfig& c) {
  std::vector<float> long_f, short_f;
  // The files store head_dim / 2 factors; only the first rope_dim / 2 rotate anything.
  const int64_t n = c.head_dim / 2;
  PRIMEKV_ASSIGN_OR_RETURN(long_f, t.Vector("rope_factors_long.weight", n));
  PRIMEKV_ASSIGN_OR_RETURN(short_f, t.Vector("rope_factors_short.weight", n));
  c.long_rope = true;
  c.rope_long_factors = UsesLongRopeFactors(c, context);
  c.rope_freq_factors = c.rope_long_factors ? std::move(long_f) : std::move(short_f);
  c.rope_freq_factors.resize(static_cast<size_t>(c.rope_dim / 2));
  return Status::Ok();
}

}  // namespace

bool UsesLongRopeFactors(const ModelConfig& config, int64_t context) {
  return (context > 0 ? context : config.max_context) > config.rope_original_context;
}

std::string_view ArchName(Arch arch) {
  for (const ArchTraits& t : kArchs) {
    if (t.arch == arch) return t.name;
  }
  return "unknown";
}

std::optional<Arch> ArchFromName(std::string_view name) {
  for (const ArchTraits& t : kArchs) {
    if (t.name == name) return t.arch;
  }
  return std::nullopt;
}

std::string Model::Identity() const {
  // FNV-1a: the same bytes give the same digest on every platform and build.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  };
  const ModelConfig& c = config_;
  for (int v : {c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size})
    mix(&v, sizeof(v));
  auto floats = [&mix](const std::vector<float>& v) { mix(v.data(), v.size() * sizeof(float)); };
  for (const LayerWeights& l : layers_) {
    floats(l.attn_norm);
    floats(l.ffn_norm);
  }
  floats(output_norm_);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return c.arch_name + ":" + hex;
}

Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Result<Model> Model::Load(const std::filesystem::path& path, WeightMemory memory, int64_t context) {
  if (context < 0) return Status::Error("load: the context must be >= 0");
  PRIMEKV_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path, memory));
  Model m;
  m.file_ = std::make_unique<GgufFile>(std::move(file));
  m.path_ = path;
  const GgufFile& f = *m.file_;
  PRIMEKV_ASSIGN_OR_RETURN(m.config_, ReadConfig(f));
  ModelConfig& c = m.config_;
  PRIMEKV_ASSIGN_OR_RETURN(m.tokenizer_, LoadTokenizer(f));
  PRIMEKV_RETURN_IF_ERROR(ReadVocabSize(f, *m.tokenizer_, c));

  TensorLoader t(f);
  PRIMEKV_ASSIGN_OR_RETURN(m.token_embd_, t.Matrix("token_embd.weight", c.vocab_size, c.d_model));
  c.tied_embeddings = !t.Has("output.weight");
  if (c.tied_embeddings) {
    m.output_ = m.token_embd_;
  } else {
    PRIMEKV_ASSIGN_OR_RETURN(m.output_, t.Matrix("output.weight", c.vocab_size, c.d_model));
  }
  PRIMEKV_ASSIGN_OR_RETURN(m.output_norm_, t.Vector("output_norm.weight", c.d_model));
  for (int l = 0; l < c.n_layers; ++l) {
    PRIMEKV_ASSIGN_OR_RETURN(LayerWeights layer, LoadLayer(t, c, l));
    m.layers_.push_back(std::move(layer));
  }
  if (t.Has("rope_freqs.weight")) {
    PRIMEKV_ASSIGN_OR_RETURN(c.rope_freq_factors, t.Vector("rope_freqs.weight", c.rope_dim / 2));
  } else if (t.Has("rope_factors_long.weight") || t.Has("rope_factors_short.weight")) {
    PRIMEKV_RETURN_IF_ERROR(ReadLongRope(t, context, c));
  }
  PRIMEKV_ASSIGN_OR_RETURN(m.rope_inv_freq_, RopeInvFreq(f, c));
  // config_ and tokenizer_ hold everything read from the metadata.
  m.file_->ReleaseMetadata();
  return m;
}

KvCache Model::NewCache(KvCacheOptions options) const {
  return KvCache(config_.n_layers, config_.n_kv_heads, config_.head_dim, options);
}

KvRetention Model::Retention() const {
  std::vector<int> windows(static_cast<size_t>(config_.n_layers), 0);
  for (int l = 0; l < config_.n_layers; ++l)
    if (config_.LocalLayer(l)) windows[static_cast<size_t>(l)] = config_.sliding_window;
  return KvRetention(std::move(windows));
}

}  // namespace primekv
