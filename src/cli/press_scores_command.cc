// Scores fixed tensors with one press and writes the scores and kept sets: the hook through
// which tests/reference/ checks every scorer against an independent numpy implementation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "primekv/model/model.h"
#include "primekv/press/compressor.h"
#include "primekv/press/output_gram.h"
#include "primekv/press/press.h"
#include "primekv/util/json_read.h"

namespace primekv::cli {

namespace {

template <typename T>
Result<std::vector<T>> ReadRaw(const std::filesystem::path& p, size_t expected, bool optional) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    if (optional) return std::vector<T>{};
    return Status::Error("cannot read '" + p.string() + "'");
  }
  in.seekg(0, std::ios::end);
  const auto bytes = static_cast<size_t>(in.tellg());
  if (expected != 0 && bytes != expected * sizeof(T)) {
    return Status::Error(p.string() + ": " + std::to_string(bytes) + " bytes, expected " +
                         std::to_string(expected * sizeof(T)));
  }
  if (bytes % sizeof(T) != 0)
    return Status::Error(p.string() + ": size is not a multiple of the element");
  std::vector<T> v(bytes / sizeof(T));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
  return v;
}

// meta.json: the layer's shape (as a ModelConfig) and the run's settings.
struct Meta {
  ModelConfig config;
  int n = 0;
  int layer = 0;
  int32_t next_position = 0;
  double ratio = 0.5;
  std::string press;
};

// Bounds of meta.json's shape: far above any real layer, far below what would exhaust memory.
constexpr int64_t kMaxEntries = int64_t{1} << 20;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxDModel = int64_t{1} << 16;
constexpr int64_t kMaxPosition = int64_t{1} << 30;

Result<Meta> ReadMeta(const std::string& meta_name) {
  PRIMEKV_ASSIGN_OR_RETURN(const std::string text, ReadInputFile(meta_name, "meta"));
  PRIMEKV_ASSIGN_OR_RETURN(const nlohmann::json doc, ParseJson(text, meta_name));
  // Every field is typed and bounded in its own width before use (2^32 + 32 is not 32).
  const JsonNode meta(doc, meta_name + ":");
  if (!meta.is_object()) return Status::Error(meta_name + ": expected a JSON object");
  Meta m;
  ModelConfig& c = m.config;
  const auto integer = [&](std::string_view key, int64_t lo, int64_t hi) -> Result<int> {
    PRIMEKV_ASSIGN_OR_RETURN(const JsonNode node, meta.Field(key));
    PRIMEKV_ASSIGN_OR_RETURN(const int64_t v, node.Integer(lo, hi));
    return static_cast<int>(v);
  };
  const auto integer_or = [&](std::string_view key, int64_t fallback, int64_t lo,
                              int64_t hi) -> Result<int> {
    PRIMEKV_ASSIGN_OR_RETURN(const int64_t v, meta.IntegerOr(key, fallback, lo, hi));
    return static_cast<int>(v);
  };
  PRIMEKV_ASSIGN_OR_RETURN(m.press, meta.StringOr("press", "primekv"));
  PRIMEKV_ASSIGN_OR_RETURN(m.n, integer("n", 1, kMaxEntries));
  PRIMEKV_ASSIGN_OR_RETURN(c.n_heads, integer("n_heads", 1, kMaxHeads));
  PRIMEKV_ASSIGN_OR_RETURN(c.n_kv_heads, integer("n_kv_heads", 1, c.n_heads));
  if (c.n_heads % c.n_kv_heads != 0)
    return Status::Error(meta_name + ": n_heads " + std::to_string(c.n_heads) +
                         " is not a multiple of n_kv_heads " + std::to_string(c.n_kv_heads));
  PRIMEKV_ASSIGN_OR_RETURN(c.head_dim, integer("head_dim", 2, kMaxHeadDim));
  if (c.head_dim % 2 != 0)
    return Status::Error(meta_name + ": head_dim " + std::to_string(c.head_dim) +
                         " is odd (RoPE rotates pairs)");
  PRIMEKV_ASSIGN_OR_RETURN(c.d_model, integer_or("d_model", 0, 0, kMaxDModel));
  PRIMEKV_ASSIGN_OR_RETURN(c.n_layers, integer_or("n_layers", 1, 1, kMaxLayers));
  PRIMEKV_ASSIGN_OR_RETURN(m.layer, integer_or("layer", 0, 0, c.n_layers - 1));
  PRIMEKV_ASSIGN_OR_RETURN(m.next_position, integer_or("next_position", m.n, 0, kMaxPosition));
  PRIMEKV_ASSIGN_OR_RETURN(const double rope_base, meta.NumberOr("rope_base", 10000.0));
  c.rope_base = static_cast<float>(rope_base);
  if (!(c.rope_base > 0) || !std::isfinite(c.rope_base))
    return Status::Error(meta_name + ": rope_base must be a finite float > 0");
  PRIMEKV_ASSIGN_OR_RETURN(const bool rope_half, meta.BoolOr("rope_half", false));
  c.rope_style = rope_half ? RopeStyle::kHalf : RopeStyle::kAdjacent;
  PRIMEKV_ASSIGN_OR_RETURN(m.ratio, meta.NumberOr("ratio", 0.5));
  if (!(m.ratio >= 0 && m.ratio < 1)) return Status::Error(meta_name + ": ratio must be in [0, 1)");
  if (c.d_model == 0) c.d_model = c.q_width();
  return m;
}

// RoPE inverse frequencies base^(-2i/d), each a positive finite float (as Model::Load demands).
Result<std::vector<float>> InvFreq(const Meta& m, const std::string& meta_name) {
  const ModelConfig& c = m.config;
  std::vector<float> out;
  for (int i = 0; i < c.head_dim / 2; ++i) {
    const auto v = static_cast<float>(std::pow(c.rope_base, -2.0 * i / c.head_dim));
    if (!(v > 0) || !std::isfinite(v))
      return Status::Error(meta_name + ": rope_base gives a RoPE inverse frequency of " +
                           std::to_string(v) + " at pair " + std::to_string(i) +
                           "; it must be a finite float > 0");
    out.push_back(v);
  }
  return out;
}

// The raw tensors of DIR; the optional ones are empty when their file is absent.
struct Tensors {
  std::vector<float> keys, values, window_queries, wo, context_queries, future_queries;
  std::vector<float> wq, wk, wv;  // projections [rows, d_model] (key=typical), all or none
  std::vector<int32_t> positions, window_positions, context_positions;
};

Result<Tensors> ReadTensors(const std::filesystem::path& dir, const Meta& m) {
  const ModelConfig& c = m.config;
  const size_t entries = static_cast<size_t>(c.n_kv_heads) * m.n * c.head_dim;
  Tensors t;
  PRIMEKV_ASSIGN_OR_RETURN(t.keys, ReadRaw<float>(dir / "keys.f32", entries, false));
  PRIMEKV_ASSIGN_OR_RETURN(t.values, ReadRaw<float>(dir / "values.f32", entries, false));
  PRIMEKV_ASSIGN_OR_RETURN(t.positions, ReadRaw<int32_t>(dir / "positions.i32", m.n, false));
  PRIMEKV_ASSIGN_OR_RETURN(t.window_queries, ReadRaw<float>(dir / "window_queries.f32", 0, true));
  PRIMEKV_ASSIGN_OR_RETURN(t.window_positions,
                           ReadRaw<int32_t>(dir / "window_positions.i32", 0, true));
  const size_t wo_size = static_cast<size_t>(c.d_model) * c.q_width();
  PRIMEKV_ASSIGN_OR_RETURN(t.wo, ReadRaw<float>(dir / "wo.f32", wo_size, true));
  PRIMEKV_ASSIGN_OR_RETURN(t.context_queries, ReadRaw<float>(dir / "context_queries.f32", 0, true));
  PRIMEKV_ASSIGN_OR_RETURN(t.context_positions,
                           ReadRaw<int32_t>(dir / "context_positions.i32", 0, true));
  PRIMEKV_ASSIGN_OR_RETURN(t.future_queries, ReadRaw<float>(dir / "future_queries.f32", 0, true));
  const auto projection = [&](const char* name, int rows) {
    return ReadRaw<float>(dir / name, static_cast<size_t>(rows) * c.d_model, true);
  };
  PRIMEKV_ASSIGN_OR_RETURN(t.wq, projection("wq.f32", c.q_width()));
  PRIMEKV_ASSIGN_OR_RETURN(t.wk, projection("wk.f32", c.kv_width()));
  PRIMEKV_ASSIGN_OR_RETURN(t.wv, projection("wv.f32", c.kv_width()));
  if (t.wq.empty() != t.wk.empty() || t.wq.empty() != t.wv.empty())
    return Status::Error("wq.f32, wk.f32 and wv.f32 come together");
  return t;
}

// W_O Gram per KV head, stacked [n_kv_heads][d][d].
std::vector<float> OutputGrams(const ModelConfig& c, const std::vector<float>& wo) {
  std::vector<float> gram;
  for (int h = 0; h < c.n_kv_heads; ++h) {
    const std::vector<float> one = OutputGram(c, {wo.data(), c.d_model, c.q_width()}, h);
    gram.insert(gram.end(), one.begin(), one.end());
  }
  return gram;
}

// Query statistics from raw pre-RoPE context queries (past the sinks, as the engine does).
QueryStats ContextStats(const ModelConfig& c, const Tensors& t) {
  const int d = c.head_dim;
  QueryStats stats;
  stats.sum.assign(static_cast<size_t>(c.n_heads) * d, 0.0);
  stats.sum_sq.assign(static_cast<size_t>(c.n_heads) * d * d, 0.0);
  const MatView<const float> q(t.context_queries.data(), std::ssize(t.context_positions),
                               c.q_width());
  for (int64_t r = 0; r < q.rows; ++r) {
    if (t.context_positions[r] < PressCapture::kStatsSinks) continue;
    for (int h = 0; h < c.n_heads; ++h) {
      const float* x = q.Row(r) + static_cast<int64_t>(h) * d;
      for (int a = 0; a < d; ++a) {
        stats.sum[h * d + a] += x[a];
        for (int b = 0; b < d; ++b)
          stats.sum_sq[(static_cast<size_t>(h) * d + a) * d + b] +=
              static_cast<double>(x[a]) * x[b];
      }
    }
    ++stats.count;
  }
  return stats;
}

// Everything LayerInput points into, kept alive together.
struct Inputs {
  std::vector<HeadEntries> heads;
  std::vector<float> inv_freq, gram;
  QueryStats stats;
  std::vector<MeanQueryMap> mean_query;
};

Status FillInput(const Meta& m, const Tensors& t, const Press& press, Inputs& x, LayerInput& in) {
  const ModelConfig& c = m.config;
  const int d = c.head_dim, width = c.q_width();
  const size_t per_head = static_cast<size_t>(m.n) * d;
  for (int h = 0; h < c.n_kv_heads; ++h) {
    const auto at = [&](const std::vector<float>& v) { return v.begin() + h * per_head; };
    x.heads.push_back({{at(t.keys), at(t.keys) + per_head},
                       {at(t.values), at(t.values) + per_head},
                       t.positions});
  }
  in.layer = m.layer;
  in.next_position = m.next_position;
  in.rope_inv_freq = x.inv_freq;
  in.heads = x.heads;
  if (!t.window_queries.empty()) {
    const int64_t rows = std::ssize(t.window_queries) / width;
    if (std::ssize(t.window_positions) != rows)
      return Status::Error("window positions/queries differ in count");
    // The engine's capture keeps only the last rows the scorer asked for; do the same.
    const int64_t keep = std::min<int64_t>(rows, std::max(1, press.scorer->Needs().window_queries));
    in.window_queries = {t.window_queries.data() + (rows - keep) * width, keep, width};
    in.window_positions = std::span<const int32_t>(t.window_positions).subspan(rows - keep);
  }
  if (!t.wo.empty()) {
    x.gram = OutputGrams(c, t.wo);
    in.output_gram = x.gram;
    in.output_weights = {t.wo.data(), c.d_model, width};
  }
  if (!t.context_queries.empty()) {
    if (t.context_positions.size() != t.context_queries.size() / width)
      return Status::Error("context positions/queries differ in count");
    x.stats = ContextStats(c, t);
    in.query_stats = &x.stats;
  }
  if (!t.future_queries.empty())
    in.future_queries = {t.future_queries.data(), std::ssize(t.future_queries) / width, width};
  if (!t.wq.empty()) {
    const int64_t dm = c.d_model, gd = int64_t{c.group()} * d;
    for (int h = 0; h < c.n_kv_heads; ++h) {
      x.mean_query.push_back(BuildMeanQueryMap(
          {t.wq.data() + h * gd * dm, gd, dm}, {t.wk.data() + int64_t{h} * d * dm, d, dm},
          {t.wv.data() + int64_t{h} * d * dm, d, dm}, {}, {}, {}, {}, {}, c.rms_eps));
    }
    in.mean_query = x.mean_query;
  }
  return Status::Ok();
}

Status WriteScores(const std::filesystem::path& dir, const Press& press, const HeadScores& scores,
                   const std::vector<std::vector<int32_t>>& kept) {
  std::ofstream out(dir / "scores.f32", std::ios::binary);
  for (const auto& s : scores)
    out.write(reinterpret_cast<const char*>(s.data()), static_cast<std::streamsize>(s.size() * 4));
  nlohmann::json j;
  j["press"] = press.name;
  j["kept"] = kept;
  std::ofstream(dir / "kept.json") << j.dump() << "\n";
  if (!out) return Status::Error("cannot write scores");
  return Status::Ok();
}

Status PressScores(const std::string& dir_s, const std::string& press_text) {
  const std::filesystem::path dir(dir_s);
  PRIMEKV_ASSIGN_OR_RETURN(const Meta m, ReadMeta((dir / "meta.json").string()));
  PRIMEKV_ASSIGN_OR_RETURN(const PressSpec spec,
                           ParsePressSpec(press_text.empty() ? m.press : press_text));
  PRIMEKV_ASSIGN_OR_RETURN(const Press press, MakePress(spec));
  if (!press.scorer) return Status::Error("press none has no scores");
  PRIMEKV_ASSIGN_OR_RETURN(const Tensors t, ReadTensors(dir, m));
  Inputs x;
  PRIMEKV_ASSIGN_OR_RETURN(x.inv_freq, InvFreq(m, (dir / "meta.json").string()));
  LayerInput in(m.config);
  PRIMEKV_RETURN_IF_ERROR(FillInput(m, t, press, x, in));
  if (Status s = CheckLayerInput(press.scorer->Needs(), in, press.name); !s.ok()) {
    const char* why = press.scorer->Needs().reconstruction
                          ? " (press-scores runs no model, so it cannot score this press)"
                          : "";
    return Status::Error(dir.string() + ": " + s.message() + why);
  }
  HeadScores scores(m.config.n_kv_heads, std::vector<float>(m.n));
  press.scorer->Score(in, scores);
  const auto kept =
      SelectForLayer(scores, m.ratio, press.budget, press.scorer->ComparableAcrossHeads(), m.layer,
                     m.config.n_layers);
  return WriteScores(dir, press, scores, kept);
}

int RunPressScores(const std::string& dir, const std::string& press_text) {
  const Status s = PressScores(dir, press_text);
  return s.ok() ? 0 : Fail(s.message());
}

}  // namespace

void AddPressScores(CLI::App& app, Runner& run) {
  auto dir = std::make_shared<std::string>();
  auto press = std::make_shared<std::string>();
  auto* cmd =
      app.add_subcommand("press-scores", "Score tensors in DIR with a press (reference checks)");
  cmd->add_option("dir", *dir, "Directory with meta.json and raw tensors")->required();
  cmd->add_option("--press", *press, "Press (default: meta.json's)")->check(PressList(true));
  cmd->callback(
      [&run, dir, press] { run = [dir, press] { return RunPressScores(*dir, *press); }; });
}

}  // namespace primekv::cli
