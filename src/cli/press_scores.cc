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
#include "primekv/press.h"

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

int RunPressScores(const std::string& dir_s, const std::string& press_text) {
  namespace fs = std::filesystem;
  const fs::path dir(dir_s);
  const std::string meta_name = (dir / "meta.json").string();
  auto meta_text = ReadInputFile(meta_name, "meta");
  if (!meta_text.ok()) return Fail(meta_text.message());
  nlohmann::json meta = nlohmann::json::parse(*meta_text, nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object()) return Fail(meta_name + ": not a JSON object");
  LayerInput in;
  int n = 0;
  double ratio = 0.5;
  std::string meta_press;
  // Every field is typed and bounded before use: meta.json is input like any other.
  try {
    meta_press = meta.value("press", "primekv");
    n = meta.at("n").get<int>();
    in.n_heads = meta.at("n_heads").get<int>();
    in.n_kv_heads = meta.at("n_kv_heads").get<int>();
    in.head_dim = meta.at("head_dim").get<int>();
    in.d_model = meta.value("d_model", 0);
    in.layer = meta.value("layer", 0);
    in.n_layers = meta.value("n_layers", 1);
    in.next_position = meta.value("next_position", n);
    in.rope_base = meta.value("rope_base", 10000.0f);
    in.rope_half = meta.value("rope_half", false);
    ratio = meta.value("ratio", 0.5);
  } catch (const nlohmann::json::exception& e) {
    return Fail(meta_name + ": " + e.what());
  }
  if (n < 1 || n > (1 << 20) || in.n_heads < 1 || in.n_heads > 1024 || in.n_kv_heads < 1 ||
      in.n_heads % in.n_kv_heads != 0 || in.head_dim < 2 || in.head_dim > 1024 ||
      in.head_dim % 2 != 0 || in.n_layers < 1 || in.n_layers > 4096 || in.layer < 0 ||
      in.layer >= in.n_layers || in.d_model < 0 || in.d_model > (1 << 16) || !(in.rope_base > 0) ||
      !std::isfinite(in.rope_base) || !(ratio >= 0 && ratio < 1)) {
    return Fail(meta_name + ": shape, layer, rope_base or ratio out of range");
  }
  if (in.d_model == 0) in.d_model = in.n_heads * in.head_dim;
  auto spec = ParsePressSpec(press_text.empty() ? meta_press : press_text);
  if (!spec.ok()) return Fail(spec.message());
  auto press = MakePress(*spec);
  if (!press.ok()) return Fail(press.message());
  if (!press->scorer) return Fail("press none has no scores");

  const int d = in.head_dim, H = in.n_kv_heads, width = in.n_heads * d;
  std::vector<float> inv_freq(static_cast<size_t>(d / 2));
  for (int i = 0; i < d / 2; ++i)
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(std::pow(in.rope_base, -2.0 * i / d));
  in.rope_inv_freq = inv_freq;

  auto keys = ReadRaw<float>(dir / "keys.f32", static_cast<size_t>(H) * n * d, false);
  auto values = ReadRaw<float>(dir / "values.f32", static_cast<size_t>(H) * n * d, false);
  auto pos = ReadRaw<int32_t>(dir / "positions.i32", static_cast<size_t>(n), false);
  auto wq = ReadRaw<float>(dir / "window_queries.f32", 0, true);
  auto wpos = ReadRaw<int32_t>(dir / "window_positions.i32", 0, true);
  auto wo = ReadRaw<float>(dir / "wo.f32", static_cast<size_t>(in.d_model) * width, true);
  auto ctxq = ReadRaw<float>(dir / "context_queries.f32", 0, true);
  auto ctxpos = ReadRaw<int32_t>(dir / "context_positions.i32", 0, true);
  auto fut = ReadRaw<float>(dir / "future_queries.f32", 0, true);
  for (const Status& s : {keys.status(), values.status(), pos.status(), wq.status(), wpos.status(),
                          wo.status(), ctxq.status(), ctxpos.status(), fut.status()}) {
    if (!s.ok()) return Fail(s.message());
  }
  std::vector<HeadEntries> heads(static_cast<size_t>(H));
  for (int h = 0; h < H; ++h) {
    auto& e = heads[static_cast<size_t>(h)];
    e.keys.assign(keys->begin() + static_cast<int64_t>(h) * n * d,
                  keys->begin() + static_cast<int64_t>(h + 1) * n * d);
    e.values.assign(values->begin() + static_cast<int64_t>(h) * n * d,
                    values->begin() + static_cast<int64_t>(h + 1) * n * d);
    e.positions = *pos;
  }
  in.heads = heads;
  if (!wq->empty()) {
    const int64_t rows = static_cast<int64_t>(wq->size()) / width;
    if (wpos->size() != static_cast<size_t>(rows))
      return Fail("window positions/queries differ in count");
    // The engine's capture keeps only the last rows the scorer asked for; do the same.
    const int64_t keep =
        std::min<int64_t>(rows, std::max(1, press->scorer->Needs().window_queries));
    in.window_queries = {wq->data() + (rows - keep) * width, keep, width};
    in.window_positions = std::span<const int32_t>(*wpos).subspan(static_cast<size_t>(rows - keep));
  }
  // W_O Gram per KV head: sum over the group's query heads of W_O^(h)T W_O^(h).
  std::vector<float> gram;
  if (!wo->empty()) {
    const int G = in.group();
    gram.assign(static_cast<size_t>(H) * d * d, 0.0f);
    for (int h = 0; h < H; ++h) {
      std::vector<double> acc(static_cast<size_t>(d) * d, 0.0);
      for (int row = 0; row < in.d_model; ++row)
        for (int g = 0; g < G; ++g) {
          const float* w =
              wo->data() + static_cast<size_t>(row) * width + static_cast<size_t>(h * G + g) * d;
          for (int a = 0; a < d; ++a)
            for (int b = 0; b < d; ++b)
              acc[static_cast<size_t>(a) * d + b] += static_cast<double>(w[a]) * w[b];
        }
      for (size_t t = 0; t < acc.size(); ++t)
        gram[static_cast<size_t>(h) * d * d + t] = static_cast<float>(acc[t]);
    }
    in.output_gram = gram;
    in.wo_rows = *wo;
  }
  // Query statistics from raw pre-RoPE context queries (positions >= 4, as the engine does).
  QueryStats stats;
  if (!ctxq->empty()) {
    stats.sum.assign(static_cast<size_t>(in.n_heads) * d, 0.0);
    stats.sum_sq.assign(static_cast<size_t>(in.n_heads) * d * d, 0.0);
    const size_t rows = ctxq->size() / static_cast<size_t>(width);
    if (ctxpos->size() != rows) return Fail("context positions/queries differ in count");
    for (size_t r = 0; r < rows; ++r) {
      if ((*ctxpos)[r] < 4) continue;
      for (int h = 0; h < in.n_heads; ++h) {
        const float* x = ctxq->data() + r * width + static_cast<size_t>(h) * d;
        for (int a = 0; a < d; ++a) {
          stats.sum[static_cast<size_t>(h) * d + a] += x[a];
          for (int b = 0; b < d; ++b)
            stats.sum_sq[(static_cast<size_t>(h) * d + a) * d + b] +=
                static_cast<double>(x[a]) * x[b];
        }
      }
      ++stats.count;
    }
    in.query_stats = &stats;
  }
  if (!fut->empty())
    in.future_queries = {fut->data(), static_cast<int64_t>(fut->size()) / width, width};
  const PressNeeds needs = press->scorer->Needs();
  if ((needs.window_queries > 0 && in.window_queries.rows == 0) ||
      (needs.query_stats && !in.query_stats) || (needs.output_gram && gram.empty()) ||
      (needs.future_queries && in.future_queries.rows == 0)) {
    return Fail("press " + press->name + " needs inputs missing from " + dir.string());
  }
  HeadScores scores(static_cast<size_t>(H), std::vector<float>(static_cast<size_t>(n)));
  press->scorer->Score(in, scores);
  const auto kept = SelectForLayer(scores, ratio, press->budget,
                                   press->scorer->ComparableAcrossHeads(), in.layer, in.n_layers);
  std::ofstream out(dir / "scores.f32", std::ios::binary);
  for (const auto& s : scores)
    out.write(reinterpret_cast<const char*>(s.data()), static_cast<std::streamsize>(s.size() * 4));
  nlohmann::json j;
  j["press"] = press->name;
  j["kept"] = kept;
  std::ofstream(dir / "kept.json") << j.dump() << "\n";
  if (!out) return Fail("cannot write scores");
  return 0;
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
