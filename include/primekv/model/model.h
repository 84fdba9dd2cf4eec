// A Llama-family decoder loaded from GGUF: configuration as plain data, weights as views into
// the memory-mapped file, and a forward pass over a KV cache.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/attention/attention.h"
#include "primekv/gguf/gguf.h"
#include "primekv/kv/kv_cache.h"
#include "primekv/kv/retention.h"
#include "primekv/tokenizer/tokenizer.h"
#include "primekv/util/status.h"
#include "primekv/util/tensor.h"
#include "primekv/util/thread_pool.h"

namespace primekv {

enum class Arch { kLlama, kQwen2, kQwen3, kQwen3Moe, kGranite, kPhi3, kGemma, kGemma2 };
// The GGUF general.architecture name of an architecture, and back (nullopt: not supported).
std::string_view ArchName(Arch arch);
std::optional<Arch> ArchFromName(std::string_view name);
// kAdjacent rotates (x[2i], x[2i+1]) (llama); kHalf rotates (x[i], x[i + n/2]) (NeoX: qwen2/3).
enum class RopeStyle { kAdjacent, kHalf };
// The FFN's gate activation: SiLU (SwiGLU) or GELU with the tanh approximation (GeGLU: gemma).
enum class FfnActivation { kSilu, kGeluTanh };

struct ModelConfig {  // filled from "<arch>.*" GGUF keys
  Arch arch = Arch::kLlama;
  std::string arch_name;
  std::string name;
  int n_layers = 0;
  int d_model = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int d_ff = 0;
  int vocab_size = 0;
  int max_context = 0;
  int rope_dim = 0;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::kAdjacent;
  bool tied_embeddings = false;
  bool qkv_bias = false;                 // qwen2
  bool qk_norm = false;                  // qwen3
  std::vector<float> rope_freq_factors;  // [rope_dim / 2]; empty = none (llama3 or LongRoPE)
  // Phi-3 LongRoPE: the factors above are rope_factors_long when the context the model is loaded
  // for exceeds rope_original_context, else rope_factors_short (llama.cpp's rule); rotated
  // dimensions of queries and keys are also multiplied by rope_attn_factor.
  int rope_original_context = 0;
  float rope_attn_factor = 1.0f;
  bool long_rope = false;          // the file has LongRoPE factors
  bool rope_long_factors = false;  // LongRoPE: the long ones are in force
  FfnActivation ffn_activation = FfnActivation::kSilu;
  // Scalars of granite and gemma (1 or 0: absent).
  float embedding_scale = 1.0f;  // embeddings are multiplied by it (gemma: sqrt(d_model))
  float residual_scale = 1.0f;   // each block's output is multiplied by it before the residual
  float attention_scale = 0.0f;  // the q.k scale; 0 = 1/sqrt(head_dim)
  float logit_scale = 1.0f;      // the logits are divided by it
  float attn_softcap = 0.0f;     // gemma2: a score s becomes cap * tanh(s / cap); 0 = off
  float final_softcap = 0.0f;    // gemma2: the same on the logits
  bool post_norms = false;       // gemma2: RMSNorm after attention and after the FFN
  // Sliding-window attention: a query at p sees keys at p - sliding_window + 1 .. p in the
  // local layers (gemma2: even layers; phi3: every layer). 0 = none.
  int sliding_window = 0;
  bool swa_every_layer = false;
  bool LocalLayer(int l) const { return sliding_window > 0 && (swa_every_layer || l % 2 == 0); }
  // Mixture of experts (qwen3moe); 0 for dense models.
  int n_experts = 0;       // expert_count
  int n_experts_used = 0;  // expert_used_count: top-k per token
  int d_ff_expert = 0;     // expert_feed_forward_length
  bool moe() const { return n_experts > 0; }
  int group() const { return n_heads / n_kv_heads; }
  // The q.k scale the forward pass uses, and its soft-cap of a scaled score (gemma2).
  double QkScale() const {
    return attention_scale > 0 ? attention_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  }
  double SoftCap(double score) const {
    return attn_softcap > 0 ? attn_softcap * std::tanh(score / attn_softcap) : score;
  }
  int q_width() const { return n_heads * head_dim; }
  int kv_width() const { return n_kv_heads * head_dim; }
};

// A GGUF 3-D tensor ne = [cols, rows, n_experts]: one matrix per expert, back to back.
struct ExpertWeights {
  WeightView all;  // all experts stacked: rows = n_experts * rows_per_expert
  int64_t rows_per_expert = 0;
  WeightView Expert(int e) const {
    WeightView w = all;
    w.rows = rows_per_expert;
    w.data =
        all.data + static_cast<size_t>(e) * static_cast<size_t>(rows_per_expert) * all.row_bytes;
    return w;
  }
};

struct LayerWeights {
  std::vector<float> attn_norm;       // [d_model]
  WeightView wq;                      // [n_heads * head_dim, d_model]
  WeightView wk;                      // [n_kv_heads * head_dim, d_model]
  WeightView wv;                      // [n_kv_heads * head_dim, d_model]
  WeightView wo;                      // [d_model, n_heads * head_dim]
  std::vector<float> bq, bk, bv;      // qwen2 biases, else empty
  std::vector<float> q_norm, k_norm;  // qwen3 per-head norms [head_dim], else empty
  std::vector<float> attn_post_norm;  // gemma2 [d_model], else empty
  std::vector<float> ffn_post_norm;   // gemma2 [d_model], else empty
  std::vector<float> ffn_norm;        // [d_model]
  WeightView w_gate;                  // [d_ff, d_model]
  WeightView w_up;                    // [d_ff, d_model]
  WeightView w_down;                  // [d_model, d_ff]
  // Mixture-of-experts FFN (qwen3moe) in place of w_gate/w_up/w_down.
  WeightView router;        // ffn_gate_inp [n_experts, d_model]
  ExpertWeights gate_exps;  // [n_experts][d_ff_expert, d_model]
  ExpertWeights up_exps;    // [n_experts][d_ff_expert, d_model]
  ExpertWeights down_exps;  // [n_experts][d_model, d_ff_expert]
};

// One routed expert of a token and its mixing weight.
struct ExpertChoice {
  int expert = 0;
  float weight = 0;
};

// Qwen3-MoE routing of one token: softmax over the router logits, the k most probable experts
// (equal probabilities: the lower expert index first), their probabilities renormalised to sum
// 1 (norm_topk_prob). out.size() == k <= logits.size(); out is ordered by falling weight.
void SelectExperts(std::span<const float> logits, std::span<ExpertChoice> out);

// Observation points for evaluation (fidelity, oracle, query-aware presses).
class ForwardTap {
 public:
  virtual ~ForwardTap() = default;
  // Post-RoPE queries of a layer: [n, n_heads * head_dim], positions [n].
  virtual void OnQueries(int /*layer*/, std::span<const int32_t> /*pos*/,
                         MatView<const float> /*q*/) {}
  // Attention outputs before W_O: [n, n_heads * head_dim].
  virtual void OnAttentionOutput(int /*layer*/, MatView<const float> /*o*/) {}
};

// Reusable buffers for Forward; after warm-up a decode step allocates nothing. Shapes are
// row-major for a call of n tokens; buffers only grow, so they may be larger.
struct ForwardWorkspace {
  std::vector<float> x;         // [n, d_model] residual stream
  std::vector<float> h;         // [n, max(d_model, n_heads * head_dim)] normed input, then the
                                //   attention or FFN output before it is added to x
  std::vector<float> q;         // [n, n_heads * head_dim] post-RoPE queries
  std::vector<float> k, v;      // [n, n_kv_heads * head_dim] the new keys (post-RoPE) and values
  std::vector<float> attn;      // [n, n_heads * head_dim] attention output before W_O
  std::vector<float> gate, up;  // [n, d_ff] SwiGLU halves; MoE: [rows of one expert, d_ff_expert]
  std::vector<int32_t> positions;  // [n] positions of the tokens
  // Mixture of experts (K = n_experts_used, E = n_experts, D = d_model).
  std::vector<float> router_logits;    // [n, E]
  std::vector<ExpertChoice> choices;   // [n, K] routed experts per token, slot = t * K + j
  std::vector<int32_t> expert_start;   // [E + 1] first index into expert_rows of each expert
  std::vector<int32_t> expert_rows;    // [n * K] slots grouped by expert, tokens in order
  std::vector<float> moe_in, moe_out;  // [rows of one expert, D] gathered inputs, outputs
  AttentionWorkspace attention;
  // Bytes the buffers hold (their capacity): after a prefill, that of its largest piece.
  size_t Bytes() const;
};

struct ForwardOptions {
  bool all_logits = false;  // logits for every token, else only the last
  // Sliding-window layers drop, right after their attention, every entry no later query can
  // see. The call's tokens are then appended and attended one page of queries at a time, so a
  // local layer holds at most window - 1 entries between calls and window - 1 + page_tokens
  // during one (window in a one-token step). The cache can no longer rewind those layers.
  bool drop_expired = false;
};

// One sequence of a batched decode step (Model::ForwardDecodeBatch).
struct DecodeSlot {
  Token token = 0;
  KvCache* cache = nullptr;  // this sequence's cache; no two slots of a batch share one
  ForwardTap* tap = nullptr;
  bool drop_expired = false;  // as ForwardOptions::drop_expired
};

// Rows per matrix product in ForwardDecodeBatch. Below MatMul's switch to its GEMM kernel (at 6
// rows, MatMulTiling::small_batch; the integer path switches at 16) each output element is the
// same dot product as for one row alone, so a batch's logits equal one-token Forward calls bit
// for bit (tests/model/forward_batch_test.cc).
inline constexpr int kDecodeBatchRows = 5;

// The largest attention.sliding_window a file may state (Model::Load refuses more).
inline constexpr int kMaxSlidingWindow = 1 << 24;

// Phi-3 LongRoPE: whether a run at `context` positions (0: the trained context) uses
// rope_factors_long rather than rope_factors_short. llama.cpp's rule: long when the context size
// exceeds rope.scaling.original_context_length. Model::Load applies it; whoever runs one file at
// several context sizes (the C API's sessions) asks it which loaded model to use.
bool UsesLongRopeFactors(const ModelConfig& config, int64_t context);

class Model {
 public:
  // `memory`: how the file's bytes are held (GgufFile::Open).
  // `context`: the context size the model will run at (--ctx-size, a session's ctx_size), 0 =
  // its trained context_length; it only chooses Phi-3's LongRoPE factors (UsesLongRopeFactors),
  // so every caller that runs at a chosen context size passes it here.
  static Result<Model> Load(const std::filesystem::path& path,
                            WeightMemory memory = WeightMemory::kMapped, int64_t context = 0);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // The mapped file's tensor table and data; its metadata is released after loading (config()
  // and tokenizer() hold what was read from it).
  const GgufFile& file() const { return *file_; }
  // The path Load read (a press's profile=auto looks for the model's profile beside it).
  const std::filesystem::path& path() const { return path_; }
  const LayerWeights& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
  // "ARCH:HEX": the architecture and a 64-bit hash of the shape and the RMSNorm weights, which
  // files measured on this model (budget profiles) record to be matched later. Quantizers keep
  // norms in F32, so every quantization of the same weights shares it; the same shape trained
  // or fine-tuned further does not. Hashing every weight would read gigabytes per check.
  std::string Identity() const;

  // A cache shaped for this model.
  KvCache NewCache(KvCacheOptions options = {}) const;
  // What each layer's cache keeps (sliding-window layers: their window). Forward drops nothing
  // itself unless asked (ForwardOptions::drop_expired), so a caller may still rewind
  // (TruncateFrom) to any position since its last KvRetention::DropExpired.
  KvRetention Retention() const;

  // Runs `tokens` at positions cache.NextPosition() onward, appending their K/V to `cache`.
  // logits: [1, vocab] (last token) or [n, vocab] with opts.all_logits.
  Status Forward(std::span<const Token> tokens, KvCache& cache, const ForwardOptions& opts,
                 MatView<float> logits, ThreadPool& pool, ForwardWorkspace& ws,
                 ForwardTap* tap = nullptr) const;

  // One decode step of several sequences at once: slot i's token runs at its cache's next
  // position, is appended to and attends over that cache only, and its logits go to row i of
  // `logits` ([slots.size(), vocab]). The matrix products take kDecodeBatchRows slots together,
  // so the weights are read once per step for up to that many sequences. Every check is made
  // before any cache changes; a failure inside (a full cache) leaves the caches suspect, as in
  // Forward.
  Status ForwardDecodeBatch(std::span<const DecodeSlot> slots, MatView<float> logits,
                            ThreadPool& pool, ForwardWorkspace& ws) const;

  // Rotates rows of x ([n, n_heads_x * head_dim]) in place for the given positions.
  void ApplyRope(MatView<float> x, int n_heads_x, std::span<const int32_t> positions) const;
  // Queries (post-RoPE, after q-norm) for hidden inputs already normed: used by query-aware
  // presses that recompute window queries. h: [n, d_model], out: [n, n_heads * head_dim].
  void ProjectQueries(int layer, MatView<const float> h, std::span<const int32_t> positions,
                      MatView<float> out, ThreadPool& pool) const;
  // RoPE inverse frequencies per rotated pair [rope_dim / 2], after any llama3 or LongRoPE
  // factors.
  std::span<const float> rope_inv_freq() const { return rope_inv_freq_; }
  // The attention of a layer as the forward pass runs it (scale, soft-cap, window).
  AttnShape Attention(int layer) const;

 private:
  Model() = default;
  // Steps of Forward and ForwardDecodeBatch (forward.cc).
  void Embed(std::span<const Token> tokens, MatView<float> x) const;
  void EmbedRow(Token token, float* row) const;
  void OutputLogits(MatView<const float> rows, float* scratch, MatView<float> logits,
                    ThreadPool& pool) const;
  Status DecodeRows(std::span<const DecodeSlot> slots, MatView<float> logits, ThreadPool& pool,
                    ForwardWorkspace& ws) const;
  ModelConfig config_;
  std::unique_ptr<GgufFile> file_;
  std::filesystem::path path_;
  std::unique_ptr<Tokenizer> tokenizer_;
  WeightView token_embd_;  // [vocab, d_model]
  WeightView output_;      // [vocab, d_model]
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<float> rope_inv_freq_;  // [rope_dim / 2]
};

}  // namespace primekv
