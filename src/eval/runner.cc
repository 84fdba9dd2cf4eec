#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "eval/internal.h"
#include "eval/results.h"
#include "eval/run_config.h"
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
                    double ratio, const std::string& mode, uint64_t seed, int64_t length) {
  return task + "|" + id + "|" + press + "|" + RatioText(ratio) + "|" + mode + "|" +
         std::to_string(seed) + "|" + std::to_string(length);
}

// Keys of (sample, press, ratio) units whose every turn is in results.jsonl.
std::set<std::string> FinishedUnits(const std::vector<eval_internal::ResultRow>& rows) {
  std::map<std::string, std::pair<int64_t, int64_t>> turns;  // key -> (seen, expected)
  for (const eval_internal::ResultRow& r : rows) {
    auto& t = turns[UnitKey(r.task, r.id, r.press, r.ratio, r.mode, r.seed, r.length)];
    t.first += 1;
    t.second = r.turns;
  }
  std::set<std::string> done;
  for (const auto& [k, t] : turns) {
    if (t.first >= t.second) done.insert(k);
  }
  return done;
}

// What identifies a task's samples beyond the settings: a file task's content.
Result<json> TaskFingerprint(std::string_view task) {
  const size_t colon = task.find(':');
  if (colon == std::string_view::npos) return json("generated");
  auto fp = eval_internal::FingerprintFile(std::string(task.substr(colon + 1)));
  if (!fp.ok()) return fp.status();
  return json{{"size", fp->size}, {"hash", fp->hash}, {"scheme", fp->scheme}};
}

Result<json> CurrentConfig(const EvalRunSpec& spec, int ctx_size) {
  json model;
  if (spec.model_path.empty()) {
    model = {{"path", "(unknown)"}, {"size", nullptr}, {"hash", "(unknown)"}, {"scheme", ""}};
  } else {
    auto fp = eval_internal::FingerprintFile(spec.model_path);
    if (!fp.ok()) return fp.status();
    std::error_code ec;
    const auto abs = std::filesystem::weakly_canonical(spec.model_path, ec);
    model = {{"path", (ec ? spec.model_path : abs).string()},
             {"size", fp->size},
             {"hash", fp->hash},
             {"scheme", fp->scheme}};
  }
  json settings = {
      {"mode", spec.mode},
      {"seed", spec.seed},
      {"length", spec.length},
      {"max-new-tokens", spec.max_new_tokens},
      {"ctx-size", ctx_size},
      {"chat", spec.chat},
      {"chat-template", spec.chat_template.empty() ? json() : json(spec.chat_template)},
      {"kv-type", spec.kv_dtype == KvDType::kF32 ? "f32" : "f16"},
      {"chunk", spec.mode == "chunked" ? json(spec.chunk) : json()},
      {"interval", spec.mode == "decode" ? json(spec.interval) : json()}};
  json tasks = json::object();
  for (const std::string& task : spec.tasks) {
    auto fp = TaskFingerprint(task);
    if (!fp.ok()) return Status::Error("task " + task + ": " + fp.message());
    tasks[task] = *fp;
  }
  return json{{"format", "primekv-eval-config-1"},
              {"model", model},
              {"settings", settings},
              {"tasks", tasks}};
}

// Refuses an --out folder whose results were made under other settings, then records ours.
// Creates the folder (only now, after every check of the run has passed).
Status CheckAndRecordConfig(const std::filesystem::path& dir, const json& current) {
  const auto config_path = dir / "config.json";
  const auto results_path = dir / "results.jsonl";
  json recorded;
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    std::ifstream in(config_path, std::ios::binary);
    recorded = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (recorded.is_discarded())
      return Status::Error(config_path.string() + ": not valid JSON; use another --out folder");
    if (Status s = eval_internal::CheckRunConfig(recorded, current, dir); !s.ok()) return s;
  } else if (std::filesystem::exists(results_path, ec)) {
    return Status::Error("--out " + dir.string() +
                         " has results.jsonl but no config.json (an older primekv made it), so "
                         "its settings cannot be checked; use another --out folder");
  } else if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
    return Status::Error("--out " + dir.string() + " is not a directory");
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error("cannot create '" + dir.string() + "': " + ec.message());
  const auto tmp = dir / "config.json.tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << eval_internal::MergeRunConfig(recorded, current).dump(2) << "\n";
    if (!out.flush()) return Status::Error("cannot write '" + tmp.string() + "'");
  }
  std::filesystem::rename(tmp, config_path, ec);
  if (ec) return Status::Error("cannot write '" + config_path.string() + "': " + ec.message());
  return Status::Ok();
}

// Tokens EncodeConversation adds to a sample of `turns` turns beyond its text encoded in one
// piece (separators, chat template), plus one per turn for merges that differ at the joins.
int RunnerOverhead(const Tokenizer& tok, bool chat, int turns) {
  const std::vector<std::string> qs(static_cast<size_t>(turns), "Question?"),
      prefixes(static_cast<size_t>(turns), "Answer:");
  const ConversationTokens conv = EncodeConversation(tok, chat, "Context.", qs, prefixes);
  size_t encoded = conv.context.size();
  std::string plain = "Context.";
  for (int t = 0; t < turns; ++t) plain += "Question?Answer:";
  for (const auto& turn : conv.turns) encoded += turn.size();
  const int64_t extra = static_cast<int64_t>(encoded) -
                        static_cast<int64_t>(tok.Encode(plain, /*add_bos=*/true).size());
  return static_cast<int>(std::max<int64_t>(0, extra)) + turns;
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
  // Generated samples are fitted to --length as plain text; the runner adds turn separators (and
  // the chat template), so their tokens are reserved: a sample of --length = the context size
  // must still fit once encoded as a conversation.
  to.reserved_tokens =
      RunnerOverhead(model.tokenizer(), spec.chat, task == "multiturn" ? to.multiturn_facts : 1);
  // LongBench cuts the middle of documents to fit; 64 tokens are left for the chat template.
  const auto ctx = ResolveContextSize(model.config(), spec.ctx_size, spec.allow_ctx_overflow);
  to.max_context_tokens = ctx.ok() ? std::max(1, *ctx - 64) : 0;
  return to;
}

Result<EvalRunSummary> RunEvaluation(const Model& model, const EvalRunSpec& spec) {
  // Everything is checked before the --out folder is created or touched.
  EvalRunSummary summary;
  const auto warn = [&](std::string w) {
    if (spec.on_warning) spec.on_warning(w);
    summary.warnings.push_back(std::move(w));
  };
  auto mode = ParseCompressionMode(spec.mode);
  if (!mode) return Status::Error("unknown --mode '" + spec.mode + "'");
  std::optional<ChatFormat> chat_format;
  if (spec.chat) {
    auto f = ResolveChatFormat(model.tokenizer(), spec.chat_template);
    if (!f.ok()) return f.status();
    chat_format = *f;
  }
  if (spec.tasks.empty() || spec.presses.empty())
    return Status::Error("eval: need tasks and presses");
  if (spec.samples < 1) return Status::Error("--samples must be >= 1");
  if (spec.max_new_tokens < 0) return Status::Error("--max-new-tokens must be >= 0");
  std::string ctx_note;
  auto ctx_size =
      ResolveContextSize(model.config(), spec.ctx_size, spec.allow_ctx_overflow, &ctx_note);
  if (!ctx_size.ok()) return ctx_size.status();
  if (!ctx_note.empty()) warn(ctx_note);
  summary.ctx_size = *ctx_size;
  if (spec.max_new_tokens >= *ctx_size) {
    return Status::Error("--max-new-tokens " + std::to_string(spec.max_new_tokens) +
                         " leaves no room for a prompt in the context size of " +
                         std::to_string(*ctx_size) + " tokens");
  }
  for (const std::string& task : spec.tasks) {
    const std::vector<std::string> generated = ListTasks();
    if (std::find(generated.begin(), generated.end(), task) != generated.end() &&
        spec.length > *ctx_size) {
      return Status::Error("--length " + std::to_string(spec.length) + " (for task " + task +
                           ") exceeds the context size of " + std::to_string(*ctx_size) +
                           " tokens");
    }
  }

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

  struct TaskSamples {
    std::string name;
    std::vector<EvalSample> samples;
  };
  std::vector<TaskSamples> all;
  for (const auto& task : spec.tasks) {
    std::vector<std::string> task_warnings;
    auto samples = GenerateTask(task, TaskOptionsFor(model, spec, task, &task_warnings));
    for (std::string& w : task_warnings) warn(std::move(w));
    if (!samples.ok()) return Status::Error("task " + task + ": " + samples.message());
    all.push_back({task, std::move(samples).value()});
  }

  auto config = CurrentConfig(spec, *ctx_size);
  if (!config.ok()) return config.status();
  if (Status s = CheckAndRecordConfig(spec.out, *config); !s.ok()) return s;
  const auto results_path = spec.out / "results.jsonl";
  {
    std::vector<std::string> repair;
    Status s = eval_internal::RepairResultsFile(results_path, &repair);
    for (std::string& w : repair) warn(std::move(w));
    if (!s.ok()) return s;
  }
  std::vector<std::string> bad_rows;
  const std::set<std::string> finished =
      FinishedUnits(eval_internal::ReadResultRows(results_path, &bad_rows));
  for (const std::string& w : bad_rows) warn(w);

  int64_t total = 0;
  for (const auto& t : all) total += static_cast<int64_t>(t.samples.size() * grid.size());
  ProgressBar bar("eval", total, spec.progress);
  int64_t done = 0;

  std::ofstream out(results_path, std::ios::app | std::ios::binary);
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
      // Every turn decodes up to max_new tokens (answers are cut to their turn's length after).
      const int64_t needed =
          ConversationPositions(m, static_cast<int64_t>(ctx.size()), questions, max_new);
      const bool fits = needed <= *ctx_size;
      if (!fits) {
        ++summary.over_context;
        warn("task " + task.name + ", sample " + eval_internal::QuotedForMessage(s.id) +
             ": needs " + std::to_string(needed) + " tokens (prompt and answers), more than the " +
             "context size of " + std::to_string(*ctx_size) + "; not run, marked over_context");
      }
      if (todo.empty()) continue;
      std::optional<PrefilledContext> pre;
      if (fits) {
        auto p = PrefillContext(model, needs, kv, ctx, pool);
        if (!p.ok()) return Status::Error("sample " + s.id + ": " + p.message());
        pre.emplace(std::move(p).value());
      }
      for (size_t g : todo) {
        // Plain names, not a structured binding: clang 14 (the fuzz build) cannot capture one.
        const size_t ci = grid[g].first;
        const double r = grid[g].second;
        const Compressor& comp = compressors[ci];
        const auto row = [&](size_t t) {
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
          return j;
        };
        if (!fits) {
          for (size_t t = 0; t < s.turns.size(); ++t) {
            json j = row(t);
            j["status"] = eval_internal::kStatusOverContext;
            j["needed_tokens"] = needed;
            j["ctx_size"] = *ctx_size;
            out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
          }
          out.flush();
          bar.Update(++done);
          continue;
        }
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
          json j = row(t);
          j["status"] = eval_internal::kStatusOk;
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
  if (!out) return Status::Error("error writing '" + results_path.string() + "'");
  std::vector<std::string> report_warnings;
  Status st = WriteEvalReport(spec.out, &report_warnings);
  // Lines already reported when the run started are not repeated.
  for (std::string& w : report_warnings) {
    if (std::find(summary.warnings.begin(), summary.warnings.end(), w) == summary.warnings.end())
      warn(std::move(w));
  }
  if (!st.ok()) return st;
  return summary;
}

}  // namespace primekv
