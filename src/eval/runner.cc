#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "primekv/compressor.h"
#include "primekv/eval.h"
#include "primekv/eval_runner.h"
#include "primekv/pipeline.h"
#include "primekv/progress.h"

namespace primekv {

namespace {

using nlohmann::json;

std::string RatioText(double r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", r);
  return buf;
}

std::string UnitKey(const std::string& task, const std::string& id, const std::string& press,
                    double ratio, const std::string& mode, uint64_t seed, int length) {
  return task + "|" + id + "|" + press + "|" + RatioText(ratio) + "|" + mode + "|" +
         std::to_string(seed) + "|" + std::to_string(length);
}

// Drops lines an interruption cut short, so the file stays valid JSON lines.
void DropBrokenLines(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return;
  std::vector<std::string> good;
  bool dropped = false;
  for (std::string line; std::getline(in, line);) {
    if (json::accept(line)) {
      good.push_back(line);
    } else {
      dropped = true;
    }
  }
  in.close();
  if (!dropped) return;
  std::ofstream out(file, std::ios::trunc);
  for (const auto& l : good) out << l << "\n";
}

// Keys of (sample, press, ratio) units whose every turn is in results.jsonl.
std::set<std::string> FinishedUnits(const std::filesystem::path& file) {
  std::map<std::string, std::pair<int, int>> turns;  // key -> (seen, expected)
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    try {
      const json j = json::parse(line);
      const std::string key = UnitKey(j.at("task"), j.at("id"), j.at("press"), j.at("ratio"),
                                      j.at("mode"), j.at("seed"), j.at("length"));
      auto& t = turns[key];
      t.first += 1;
      t.second = j.at("turns").get<int>();
    } catch (const std::exception&) {
      // A line cut by an interruption is simply not counted; its unit runs again.
    }
  }
  std::set<std::string> done;
  for (const auto& [k, t] : turns) {
    if (t.first >= t.second) done.insert(k);
  }
  return done;
}

}  // namespace

TaskOptions TaskOptionsFor(const Model& model, const EvalRunSpec& spec, std::string_view task,
                           std::vector<std::string>* warnings) {
  TaskOptions to;
  to.target_tokens = spec.length;
  to.samples = spec.samples;
  to.seed = spec.seed;
  to.tokenizer = &model.tokenizer();
  to.max_new_tokens = spec.max_new_tokens;
  to.file_samples = task.find(':') != std::string_view::npos ? spec.samples : 0;
  to.warnings = warnings;
  to.max_context_tokens = model.config().max_context > 0 ? model.config().max_context - 64 : 0;
  return to;
}

Result<EvalRunSummary> RunEvaluation(const Model& model, const EvalRunSpec& spec) {
  auto mode = ParseCompressionMode(spec.mode);
  if (!mode) return Status::Error("unknown mode '" + spec.mode + "'");
  std::optional<ChatFormat> chat_format;
  if (spec.chat) {
    auto f = ResolveChatFormat(model.tokenizer(), spec.chat_template);
    if (!f.ok()) return f.status();
    chat_format = *f;
  }
  if (spec.tasks.empty() || spec.presses.empty())
    return Status::Error("eval: need tasks and presses");
  std::error_code ec;
  std::filesystem::create_directories(spec.out, ec);
  if (ec) return Status::Error("cannot create '" + spec.out.string() + "': " + ec.message());
  const auto results_path = spec.out / "results.jsonl";
  DropBrokenLines(results_path);
  const std::set<std::string> finished = FinishedUnits(results_path);

  // Presses, and the (press, ratio) grid: "none" is the full-cache baseline at ratio 0.
  std::vector<Compressor> compressors;
  std::vector<std::pair<size_t, double>> grid;
  PressNeeds needs;
  for (const auto& name : spec.presses) {
    auto ps = ParsePressSpec(name);
    if (!ps.ok()) return ps.status();
    auto press = MakePress(*ps);
    if (!press.ok()) return press.status();
    if (press->scorer && press->scorer->Needs().future_queries) {
      return Status::Error("press " + name + " needs future queries: use primekv fidelity");
    }
    compressors.emplace_back(model, std::move(press).value());
    needs = UnionNeeds(needs, compressors.back().Needs());
    const size_t idx = compressors.size() - 1;
    if (!compressors.back().enabled()) {
      grid.emplace_back(idx, 0.0);
    } else {
      for (double r : spec.ratios) {
        if (!(r >= 0 && r < 1)) return Status::Error("eval: ratios must be in [0, 1)");
        grid.emplace_back(idx, r);
      }
    }
  }

  EvalRunSummary summary;
  struct TaskSamples {
    std::string name;
    std::vector<EvalSample> samples;
  };
  std::vector<TaskSamples> all;
  for (const auto& task : spec.tasks) {
    auto samples = GenerateTask(task, TaskOptionsFor(model, spec, task, &summary.warnings));
    if (!samples.ok()) return Status::Error("task " + task + ": " + samples.message());
    all.push_back({task, std::move(samples).value()});
  }
  int64_t total = 0;
  for (const auto& t : all) total += static_cast<int64_t>(t.samples.size() * grid.size());
  ProgressBar bar("eval", total, spec.progress);
  int64_t done = 0;

  std::ofstream out(results_path, std::ios::app);
  if (!out) return Status::Error("cannot write '" + results_path.string() + "'");
  ThreadPool pool(spec.threads);
  KvCacheOptions kv;
  kv.dtype = spec.kv_dtype;
  std::vector<Token> ctx;
  std::vector<std::vector<Token>> questions;
  for (const auto& task : all) {
    for (const EvalSample& s : task.samples) {
      std::vector<size_t> todo;
      for (size_t g = 0; g < grid.size(); ++g) {
        const auto& [ci, r] = grid[g];
        if (finished.count(UnitKey(task.name, s.id, compressors[ci].press().name, r, spec.mode,
                                   spec.seed, spec.length))) {
          ++summary.skipped;
          bar.Update(++done);
        } else {
          todo.push_back(g);
        }
      }
      if (todo.empty()) continue;
      {
        std::vector<std::string> qs, prefixes;
        for (const auto& t : s.turns) {
          qs.push_back(t.question);
          prefixes.push_back(t.answer_prefix);
        }
        auto conv =
            EncodeConversation(model.tokenizer(), spec.chat, s.context, qs, prefixes, chat_format);
        ctx = std::move(conv.context);
        questions = std::move(conv.turns);
      }
      int max_new = 1;
      for (const auto& t : s.turns) max_new = std::max(max_new, t.max_new_tokens);
      // The multi-turn task keeps answers in the cache, whatever the mode for other tasks.
      CompressionMode m = *mode;
      if (s.task == "multiturn" && m == CompressionMode::kContext) m = CompressionMode::kMultiTurn;
      auto pre = PrefillContext(model, needs, kv, ctx, pool);
      if (!pre.ok()) return Status::Error("sample " + s.id + ": " + pre.message());
      for (size_t g : todo) {
        const auto& [ci, r] = grid[g];
        const Compressor& comp = compressors[ci];
        PipelineOptions opt;
        opt.ratio = r;
        opt.mode = m;
        opt.chunk = spec.chunk;
        opt.interval = spec.interval;
        opt.max_new_tokens = max_new;
        opt.kv = kv;
        const auto t0 = std::chrono::steady_clock::now();
        auto report = RunPipeline(model, comp, opt, ctx, questions, pool, &*pre);
        if (!report.ok())
          return Status::Error("sample " + s.id + ", press " + comp.press().name + ": " +
                               report.message());
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        for (size_t t = 0; t < s.turns.size(); ++t) {
          auto tokens = report->turns[t].tokens;
          if (static_cast<int>(tokens.size()) > s.turns[t].max_new_tokens)
            tokens.resize(static_cast<size_t>(s.turns[t].max_new_tokens));
          const std::string pred = model.tokenizer().Decode(tokens, false);
          json j;
          j["task"] = task.name;
          j["id"] = s.id;
          j["press"] = comp.press().name;
          j["ratio"] = std::stod(RatioText(r));
          j["mode"] = spec.mode;
          j["seed"] = spec.seed;
          j["length"] = spec.length;
          j["turn"] = t;
          j["turns"] = s.turns.size();
          j["context_tokens"] = ctx.size();
          j["expected"] = s.turns[t].answers;
          j["prediction"] = pred;
          j["score"] = ScoreTurn(s, static_cast<int>(t), pred);
          j["kv_bytes_full"] = report->kv_bytes_full;
          j["kv_bytes_compressed"] = report->kv_bytes_compressed;
          j["prefill_ms"] = pre->prefill_ms;
          j["score_ms"] = report->score_ms;
          j["answer_ms"] = ms;
          out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
        }
        out.flush();
        ++summary.computed;
        bar.Update(++done);
      }
    }
  }
  out.close();
  if (Status s = WriteEvalReport(spec.out); !s.ok()) return s;
  return summary;
}

}  // namespace primekv
