// What a conversation's save costs per turn (issue 51): the whole image rewritten (every turn
// before append-only files) against the delta a turn appends, at 2K and 16K tokens, for the
// full cache and primekv at 0.75 and 0.9, with f16 and q8_0 caches. The model has the long
// reference model's shape (8 layers, 2 KV heads of 128) with random weights; the cache is filled
// with random rows (a save's cost depends on the entries, not on what they hold), and each turn
// adds 64 entries per head, then compresses back to the conversation's budget.
//
//   bench_session_save [--dir DIR] [--turns N] [--json FILE]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "primekv/model/random_model.h"
#include "primekv/press/compressor.h"
#include "primekv/press/press.h"
#include "primekv/session/conversation.h"
#include "primekv/session/session_file.h"

namespace primekv {
namespace {

constexpr int kTurnTokens = 64;

// `n` entries of random rows at the next positions, in every head, with their tokens.
// (Written into a stored image of the conversation, which it then restores, keeping what its
// store holds so the next save is a delta.)
void AddEntries(Conversation& conv, int n, std::mt19937& rng) {
  const ConversationRecord& r = conv.record();
  ConversationRecord image{.cache_salt = r.cache_salt,
                           .budget = r.budget,
                           .last_prompt_len = r.last_prompt_len,
                           .turn = r.turn,
                           .tokens = r.tokens};
  std::optional<StoredImage> held = conv.stored();
  image.cache = conv.TakeCache();
  KvCache& c = *image.cache;
  const int width = c.n_kv_heads() * c.head_dim();
  std::normal_distribution<float> normal;
  std::vector<float> k(static_cast<size_t>(n) * width), v(k.size());
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) pos[i] = c.NextPosition() + i;
  for (int l = 0; l < c.n_layers(); ++l) {
    for (auto& x : k) x = normal(rng);
    for (auto& x : v) x = normal(rng);
    Check(c.Append(l, {k.data(), n, width}, {v.data(), n, width}, pos).ok(), "append");
  }
  for (int i = 0; i < n; ++i) image.tokens.push_back(static_cast<Token>(3 + i % 500));
  conv.Restore(std::move(image), std::move(held));
}

double Ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct Row {
  int context = 0;
  std::string kv, press;
  double ratio = 0;
  double image_kib = 0, rewrite_ms = 0;  // the whole image, written as before
  double turn2_kib = 0, turn2_ms = 0, turn20_kib = 0, turn20_ms = 0;  // the appended deltas
};

// Median of `reps` whole-image writes of the conversation's current state.
double RewriteMs(const Conversation& conv, const std::string& dir, int reps) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto image = conv.Image();
    Check(image.ok() && WriteSessionImage(dir, "rewrite", *image).ok(), "rewrite");
    ms.push_back(Ms(t0));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

Row Measure(const Model& model, ThreadPool& pool, const std::string& dir, int context, KvDType t,
            double ratio, int turns) {
  const std::string press = ratio > 0 ? "primekv" : "none";
  Compressor compressor(model, std::move(MakePress(*ParsePressSpec(press))).value());
  Conversation conv(model, compressor, pool,
                    {.id = "bench",
                     .press = press,
                     .schedule = {.ratio = ratio, .mode = ScheduleMode::kMultiTurn}},
                    {.dtype = t});
  std::mt19937 rng(1);
  AddEntries(conv, context, rng);
  if (ratio > 0) Check(conv.CompressNow(ratio).ok(), "compress");
  std::filesystem::remove(dir + "/bench.pkvs");
  Check(conv.Save(dir).ok(), "first save");
  Row row{.context = context, .kv = KvDTypeName(t), .press = press, .ratio = ratio};
  for (int turn = 1; turn <= turns; ++turn) {
    AddEntries(conv, kTurnTokens, rng);
    Check(conv.EndTurn().ok(), "end turn");
    const uint64_t before = conv.stored()->extent.bytes;
    const auto t0 = std::chrono::steady_clock::now();
    Check(conv.Save(dir).ok(), "save");
    const double ms = Ms(t0);
    const auto& e = conv.stored()->extent;
    const double kib = (e.deltas > 0 ? e.bytes - before : e.bytes) / 1024.0;
    if (turn == 2) row.turn2_ms = ms, row.turn2_kib = kib;
    if (turn == turns) row.turn20_ms = ms, row.turn20_kib = kib;
  }
  row.image_kib = static_cast<double>(conv.Image()->size()) / 1024.0;
  row.rewrite_ms = RewriteMs(conv, dir, 3);
  return row;
}

int Main(int argc, char** argv) {
  std::string dir = "/tmp/primekv-bench-session-save", json_path;
  int turns = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--dir"))
      dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--turns"))
      turns = std::max(2, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--json"))
      json_path = argv[i + 1];
  }
  std::filesystem::create_directories(dir);
  RandomModelSpec spec;
  spec.n_layers = 8;
  spec.d_model = 384;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.head_dim = 128;
  spec.d_ff = 1024;
  spec.vocab_size = 512;
  spec.max_context = 32768;
  const std::string model_path = dir + "/model.gguf";
  Check(WriteRandomModel(spec, model_path).ok(), "model");
  auto model = Model::Load(model_path);
  Check(model.ok(), "load");
  ThreadPool pool(1);
  std::vector<Row> rows;
  std::printf(
      "| context | kv | press | ratio | image KiB | rewrite ms | turn 2 KiB | turn 2 ms | "
      "turn %d KiB | turn %d ms |\n|---|---|---|---|---|---|---|---|---|---|\n",
      turns, turns);
  for (int context : {2048, 16384}) {
    for (KvDType t : {KvDType::kF16, KvDType::kQ8_0}) {
      for (double ratio : {0.0, 0.75, 0.9}) {
        const Row r = Measure(*model, pool, dir, context, t, ratio, turns);
        std::printf("| %d | %s | %s | %.2f | %.0f | %.1f | %.1f | %.2f | %.1f | %.2f |\n",
                    r.context, r.kv.c_str(), r.press.c_str(), r.ratio, r.image_kib, r.rewrite_ms,
                    r.turn2_kib, r.turn2_ms, r.turn20_kib, r.turn20_ms);
        std::fflush(stdout);
        rows.push_back(r);
      }
    }
  }
  if (!json_path.empty()) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows)
      out.push_back({{"context", r.context},
                     {"kv", r.kv},
                     {"press", r.press},
                     {"ratio", r.ratio},
                     {"image_kib", r.image_kib},
                     {"rewrite_ms", r.rewrite_ms},
                     {"turn2_kib", r.turn2_kib},
                     {"turn2_ms", r.turn2_ms},
                     {"turn_last_kib", r.turn20_kib},
                     {"turn_last_ms", r.turn20_ms},
                     {"turns", turns}});
    std::ofstream(json_path) << out.dump(1) << "\n";
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace primekv

int main(int argc, char** argv) { return primekv::Main(argc, argv); }
