// Scores fixed tensors with one press and writes the scores and kept sets: the hook through
// which tests/reference/ checks every scorer against an independent numpy implementation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "primekv/model/model.h"
#include "primekv/press/press.h"
#include "primekv/press/tensor_scores.h"
#include "primekv/util/file_io.h"
#include "primekv/util/json_read.h"

namespace primekv::cli {

namespace {

template <typename T>
Result<std::vector<T>> ReadRaw(const std::filesystem::path& p, size_t expected, bool optional) {
  std::error_code ec;
  if (optional && !std::filesystem::exists(p, ec)) return std::vector<T>{};
  // A FIFO or device is refused unopened; a regular file's size is checked before reading.
  const uint64_t cap =
      expected != 0 ? uint64_t{expected} * sizeof(T) : std::numeric_limits<uint64_t>::max();
  PRIMEKV_ASSIGN_OR_RETURN(const std::string bytes,
                           ReadFileCapped(p.string(), "press-scores", FileSource::kRegular, cap));
  if (expected != 0 && bytes.size() != expected * sizeof(T)) {
    return Status::Error(p.string() + ": " + std::to_string(bytes.size()) + " bytes, expected " +
                         std::to_string(expected * sizeof(T)));
  }
  if (bytes.size() % sizeof(T) != 0)
    return Status::Error(p.string() + ": size is not a multiple of the element");
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
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

using Limits = LayerTensorLimits;
constexpr int64_t kMaxEntries = Limits::kMaxEntries;
constexpr int64_t kMaxHeads = Limits::kMaxHeads;
constexpr int64_t kMaxHeadDim = Limits::kMaxHeadDim;
constexpr int64_t kMaxLayers = Limits::kMaxLayers;
constexpr int64_t kMaxDModel = Limits::kMaxDModel;
constexpr int64_t kMaxPosition = Limits::kMaxPosition;

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

// Both files are checked before either is written, and each is replaced whole or not at all
// (write errors used to go unnoticed: exit 0 with nothing written).
Status WriteScores(const std::filesystem::path& dir, const Press& press, const HeadScores& scores,
                   const std::vector<std::vector<int32_t>>& kept) {
  const std::string scores_path = (dir / "scores.f32").string();
  const std::string kept_path = (dir / "kept.json").string();
  PRIMEKV_RETURN_IF_ERROR(CheckReplaceableOutput(scores_path, "press-scores"));
  PRIMEKV_RETURN_IF_ERROR(CheckReplaceableOutput(kept_path, "press-scores"));
  std::string bytes;
  for (const auto& s : scores)
    bytes.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(float));
  nlohmann::json j;
  j["press"] = press.name;
  j["kept"] = kept;
  PRIMEKV_RETURN_IF_ERROR(WriteFileReplacing(scores_path, bytes, "press-scores"));
  return WriteFileReplacing(kept_path, j.dump() + "\n", "press-scores");
}

Status PressScores(const std::string& dir_s, const std::string& press_text) {
  const std::filesystem::path dir(dir_s);
  PRIMEKV_ASSIGN_OR_RETURN(const Meta m, ReadMeta((dir / "meta.json").string()));
  PRIMEKV_ASSIGN_OR_RETURN(const PressSpec spec,
                           ParsePressSpec(press_text.empty() ? m.press : press_text));
  PRIMEKV_ASSIGN_OR_RETURN(const Press press, MakePress(spec));
  if (!press.scorer) return Status::Error("press none has no scores");
  PRIMEKV_ASSIGN_OR_RETURN(const Tensors t, ReadTensors(dir, m));
  LayerTensors lt{.config = m.config,
                  .layer = m.layer,
                  .n = m.n,
                  .next_position = m.next_position,
                  .keys = t.keys,
                  .values = t.values,
                  .positions = t.positions,
                  .window_queries = t.window_queries,
                  .window_positions = t.window_positions,
                  .wo = t.wo,
                  .context_queries = t.context_queries,
                  .context_positions = t.context_positions,
                  .future_queries = t.future_queries,
                  .wq = t.wq,
                  .wk = t.wk,
                  .wv = t.wv};
  auto scores = ScoreLayerTensors(press, std::move(lt));
  if (!scores.ok()) return Status::Error(dir.string() + ": " + scores.message());
  const auto kept =
      SelectForLayer(*scores, m.ratio, press.budget, press.scorer->ComparableAcrossHeads(), m.layer,
                     m.config.n_layers);
  return WriteScores(dir, press, *scores, kept);
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
