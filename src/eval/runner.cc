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
  PRIMEKV_ASSIGN_OR_RETURN(const auto fp,
                           eval_internal::FingerprintFile(std::string(task.substr(colon + 1))));
  return json{{"size", fp.size}, {"hash", fp.hash}, {"scheme", fp.scheme}};
}

// `presses`: each press's name (as its rows carry it) -> its resolved text.
Result<json> CurrentConfig(const EvalRunSpec& spec, int ctx_size, json presses) {
  json model;
  if (spec.model_path.empty()) {
    model = {{"path", "(unknown)"}, {"size", nullptr}, {"hash", "(unknown)"}, {"scheme", ""}};
  } else {
    PRIMEKV_ASSIGN_OR_RETURN(const auto fp, eval_internal::FingerprintFile(spec.model_path));
    std::error_code ec;
    const auto abs = std::filesystem::weakly_canonical(spec.model_path, ec);
    model = {{"path", (ec ? spec.model_path : abs).string()},
             {"size", fp.size},
             {"hash", fp.hash},
             {"scheme", fp.scheme}};
  }
  json settings = {
      {"mode", spec.mode},
      {"seed", spec.seed},
      {"length", spec.length},
      {"max-new-tokens", spec.max_new_tokens},
      {"ctx-size", ctx_size},
      {"chat", spec.chat},
      {"chat-template", spec.chat_template.empty() ? json() : json(spec.chat_template)},
      {"kv-type", KvDTypeName(spec.kv_dtype)},
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
              {"tasks", tasks},
              {"presses", std::move(presses)}};
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
    // The press names that have rows (read only; unusable lines are reported later).
    std::set<std::string> row_presses;
    for (const auto& row : eval_internal::ReadResultRows(results_path, nullptr))
      row_presses.insert(row.press);
    PRIMEKV_RETURN_IF_ERROR(eval_internal::CheckRunConfig(recorded, current, dir, row_presses));
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

namespace {

// The presses and the (press, ratio) grid: "none" is the full-cache baseline at ratio 0.
struct PressGrid {
  std::vector<Compressor> compressors;
  std::vector<std::pair<size_t, double>> cells;  // (compressor, ratio)
  PressNeeds needs;                              // of every press: one shared prefill
};

Result<PressGrid> MakeGrid(const Model& model, const EvalRunSpec& spec) {
  PressGrid grid;
  PRIMEKV_ASSIGN_OR_RETURN(grid.compressors, MakeCompressors(model, spec.presses, &grid.needs));
  for (size_t idx = 0; idx < grid.compressors.size(); ++idx) {
    PRIMEKV_RETURN_IF_ERROR(CheckPipelinePress(grid.compressors[idx].press()));
    if (!grid.compressors[idx].enabled()) {
      grid.cells.emplace_back(idx, 0.0);
    } else {
      for (double r : spec.ratios) {
        if (!(r >= 0 && r < 1)) return Status::Error("eval: ratios must be in [0, 1)");
        grid.cells.emplace_back(idx, r);
      }
    }
  }
  return grid;
}

struct TaskSamples {
  std::string name;
  std::vector<EvalSample> samples;
};

// One evaluation run: the checked settings, the grid, the tasks, and the results file.
class Evaluation {
 public:
  Evaluation(const Model& model, const EvalRunSpec& spec) : model_(model), spec_(spec) {}

  Result<EvalRunSummary> Run() {
    // Everything is checked before the --out folder is created or touched.
    PRIMEKV_RETURN_IF_ERROR(CheckSettings());
    PRIMEKV_ASSIGN_OR_RETURN(grid_, MakeGrid(model_, spec_));
    for (const auto& task : spec_.tasks) {
      std::vector<std::string> task_warnings;
      auto samples = GenerateTask(task, TaskOptionsFor(model_, spec_, task, &task_warnings));
      for (std::string& w : task_warnings) Warn(std::move(w));
      if (!samples.ok()) return Status::Error("task " + task + ": " + samples.message());
      tasks_.push_back({task, std::move(samples).value()});
    }
    PRIMEKV_RETURN_IF_ERROR(OpenResults());
    ThreadPool pool(spec_.threads);
    for (const auto& task : tasks_) {
      for (const EvalSample& s : task.samples) PRIMEKV_RETURN_IF_ERROR(RunSample(task, s, pool));
    }
    return Finish();
  }

 private:
  void Warn(std::string w) {
    if (spec_.on_warning) spec_.on_warning(w);
    summary_.warnings.push_back(std::move(w));
  }

  Status CheckSettings() {
    auto mode = ParseCompressionMode(spec_.mode);
    if (!mode) return Status::Error("unknown --mode '" + spec_.mode + "'");
    mode_ = *mode;
    if (spec_.chat) {
      PRIMEKV_ASSIGN_OR_RETURN(chat_format_,
                               ResolveChatFormat(model_.tokenizer(), spec_.chat_template));
    }
    if (spec_.tasks.empty() || spec_.presses.empty())
      return Status::Error("eval: need tasks and presses");
    if (spec_.samples < 1) return Status::Error("--samples must be >= 1");
    if (spec_.max_new_tokens < 0) return Status::Error("--max-new-tokens must be >= 0");
    std::string ctx_note;
    PRIMEKV_ASSIGN_OR_RETURN(ctx_size_, ResolveContextSize(model_.config(), spec_.ctx_size,
                                                           spec_.allow_ctx_overflow, &ctx_note));
    if (!ctx_note.empty()) Warn(ctx_note);
    summary_.ctx_size = ctx_size_;
    if (spec_.max_new_tokens >= ctx_size_) {
      return Status::Error("--max-new-tokens " + std::to_string(spec_.max_new_tokens) +
                           " leaves no room for a prompt in the context size of " +
                           std::to_string(ctx_size_) + " tokens");
    }
    const std::vector<std::string> generated = ListTasks();
    for (const std::string& task : spec_.tasks) {
      if (std::find(generated.begin(), generated.end(), task) != generated.end() &&
          spec_.length > ctx_size_) {
        return Status::Error("--length " + std::to_string(spec_.length) + " (for task " + task +
                             ") exceeds the context size of " + std::to_string(ctx_size_) +
                             " tokens");
      }
    }
    PRIMEKV_RETURN_IF_ERROR(CheckKvDType(spec_.kv_dtype, model_.config().head_dim));
    kv_.dtype = spec_.kv_dtype;
    return Status::Ok();
  }

  // Records the run's config in --out, repairs results.jsonl, and finds the finished units.
  Status OpenResults() {
    json presses = json::object();
    for (const Compressor& c : grid_.compressors) presses[c.press().name] = c.press().resolved;
    PRIMEKV_ASSIGN_OR_RETURN(const json config,
                             CurrentConfig(spec_, ctx_size_, std::move(presses)));
    PRIMEKV_RETURN_IF_ERROR(CheckAndRecordConfig(spec_.out, config));
    results_path_ = spec_.out / "results.jsonl";
    {
      std::vector<std::string> repair;
      Status s = eval_internal::RepairResultsFile(results_path_, &repair);
      for (std::string& w : repair) Warn(std::move(w));
      if (!s.ok()) return s;
    }
    std::vector<std::string> bad_rows;
    finished_ = FinishedUnits(eval_internal::ReadResultRows(results_path_, &bad_rows));
    for (const std::string& w : bad_rows) Warn(w);
    int64_t total = 0;
    for (const auto& t : tasks_)
      total += static_cast<int64_t>(t.samples.size() * grid_.cells.size());
    bar_.emplace("eval", total, spec_.progress);
    out_.open(results_path_, std::ios::app | std::ios::binary);
    if (!out_) return Status::Error("cannot write '" + results_path_.string() + "'");
    return Status::Ok();
  }

  // The grid cells of sample s not yet in results.jsonl (the others count as skipped).
  std::vector<size_t> Todo(const TaskSamples& task, const EvalSample& s) {
    std::vector<size_t> todo;
    for (size_t g = 0; g < grid_.cells.size(); ++g) {
      const auto& [ci, r] = grid_.cells[g];
      if (finished_.count(UnitKey(task.name, s.id, grid_.compressors[ci].press().name, r,
                                  spec_.mode, spec_.seed, spec_.length))) {
        ++summary_.skipped;
        bar_->Update(++done_);
      } else {
        todo.push_back(g);
      }
    }
    return todo;
  }

  // The sample's conversation as tokens, and the mode and positions it runs under.
  struct Prompt {
    std::vector<Token> context;
    std::vector<std::vector<Token>> questions;
    int max_new = 1;
    CompressionMode mode;
    int64_t needed = 0;
    bool fits = false;
  };

  Prompt Encode(const TaskSamples& task, const EvalSample& s) {
    Prompt p;
    std::vector<std::string> qs, prefixes;
    for (const auto& t : s.turns) {
      qs.push_back(t.question);
      prefixes.push_back(t.answer_prefix);
    }
    auto conv =
        EncodeConversation(model_.tokenizer(), spec_.chat, s.context, qs, prefixes, chat_format_);
    p.context = std::move(conv.context);
    p.questions = std::move(conv.turns);
    for (const auto& t : s.turns) p.max_new = std::max(p.max_new, t.max_new_tokens);
    // The multi-turn task keeps answers in the cache, whatever the mode for other tasks.
    p.mode = mode_;
    if (s.task == "multiturn" && p.mode == CompressionMode::kContext)
      p.mode = CompressionMode::kMultiTurn;
    // Every turn decodes up to max_new tokens (answers are cut to their turn's length after).
    p.needed = ConversationPositions(p.mode, static_cast<int64_t>(p.context.size()), p.questions,
                                     p.max_new);
    p.fits = p.needed <= ctx_size_;
    if (!p.fits) {
      ++summary_.over_context;
      Warn("task " + task.name + ", sample " + eval_internal::QuotedForMessage(s.id) + ": needs " +
           std::to_string(p.needed) + " tokens (prompt and answers), more than the " +
           "context size of " + std::to_string(ctx_size_) + "; not run, marked over_context");
    }
    return p;
  }

  Status RunSample(const TaskSamples& task, const EvalSample& s, ThreadPool& pool) {
    const std::vector<size_t> todo = Todo(task, s);
    const Prompt p = Encode(task, s);
    if (todo.empty()) return Status::Ok();
    std::optional<PrefilledContext> pre;
    if (p.fits) {
      auto made = PrefillContext(model_, grid_.needs, kv_, p.context, pool, ctx_size_);
      if (!made.ok()) return Status::Error("sample " + s.id + ": " + made.message());
      pre.emplace(std::move(made).value());
    }
    for (size_t g : todo) {
      const Compressor& comp = grid_.compressors[grid_.cells[g].first];
      const Cell cell{task, s, comp, grid_.cells[g].second, p};
      if (p.fits) {
        PRIMEKV_RETURN_IF_ERROR(RunCell(cell, *pre, pool));
      } else {
        WriteOverContext(cell);
      }
      out_.flush();
      bar_->Update(++done_);
    }
    return Status::Ok();
  }

  // One (sample, press, ratio) unit.
  struct Cell {
    const TaskSamples& task;
    const EvalSample& s;
    const Compressor& comp;
    double ratio;
    const Prompt& p;
  };

  json Row(const Cell& c, size_t t) const {
    json j;
    j["task"] = c.task.name;
    j["id"] = c.s.id;
    j["press"] = c.comp.press().name;
    j["ratio"] = std::stod(RatioText(c.ratio));
    j["mode"] = spec_.mode;
    j["seed"] = spec_.seed;
    j["length"] = spec_.length;
    j["turn"] = t;
    j["turns"] = c.s.turns.size();
    j["context_tokens"] = c.p.context.size();
    j["expected"] = c.s.turns[t].answers;
    return j;
  }

  void WriteRow(const json& j) {
    out_ << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }

  void WriteOverContext(const Cell& c) {
    for (size_t t = 0; t < c.s.turns.size(); ++t) {
      json j = Row(c, t);
      j["status"] = eval_internal::kStatusOverContext;
      j["needed_tokens"] = c.p.needed;
      j["ctx_size"] = ctx_size_;
      WriteRow(j);
    }
  }

  Status RunCell(const Cell& c, const PrefilledContext& pre, ThreadPool& pool) {
    PipelineOptions opt;
    opt.ratio = c.ratio;
    opt.mode = c.p.mode;
    opt.chunk = spec_.chunk;
    opt.interval = spec_.interval;
    opt.max_new_tokens = c.p.max_new;
    opt.kv = kv_;
    opt.window = ctx_size_;
    const auto t0 = std::chrono::steady_clock::now();
    auto report = RunPipeline(model_, c.comp, opt, c.p.context, c.p.questions, pool, &pre);
    if (!report.ok())
      return Status::Error("sample " + c.s.id + ", press " + c.comp.press().name + ": " +
                           report.message());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (size_t t = 0; t < c.s.turns.size(); ++t) {
      auto tokens = report->turns[t].tokens;
      if (static_cast<int>(tokens.size()) > c.s.turns[t].max_new_tokens)
        tokens.resize(static_cast<size_t>(c.s.turns[t].max_new_tokens));
      const std::string pred = model_.tokenizer().Decode(tokens, false);
      json j = Row(c, t);
      j["status"] = eval_internal::kStatusOk;
      j["prediction"] = pred;
      j["score"] = ScoreTurn(c.s, static_cast<int>(t), pred);
      j["kv_bytes_full"] = report->kv_bytes_full;
      j["kv_bytes_compressed"] = report->kv_bytes_compressed;
      j["prefill_ms"] = pre.prefill_ms;
      j["score_ms"] = report->score_ms;
      j["answer_ms"] = ms;
      WriteRow(j);
    }
    ++summary_.computed;
    return Status::Ok();
  }

  Result<EvalRunSummary> Finish() {
    out_.close();
    if (!out_) return Status::Error("error writing '" + results_path_.string() + "'");
    std::vector<std::string> report_warnings;
    Status st = WriteEvalReport(spec_.out, &report_warnings);
    // Lines already reported when the run started are not repeated.
    for (std::string& w : report_warnings) {
      if (std::find(summary_.warnings.begin(), summary_.warnings.end(), w) ==
          summary_.warnings.end())
        Warn(std::move(w));
    }
    if (!st.ok()) return st;
    return summary_;
  }

  const Model& model_;
  const EvalRunSpec& spec_;
  EvalRunSummary summary_;
  CompressionMode mode_ = CompressionMode::kContext;
  std::optional<ChatFormat> chat_format_;
  int ctx_size_ = 0;
  KvCacheOptions kv_;
  PressGrid grid_;
  std::vector<TaskSamples> tasks_;
  std::filesystem::path results_path_;
  std::set<std::string> finished_;
  std::optional<ProgressBar> bar_;
  int64_t done_ = 0;
  std::ofstream out_;
};

}  // namespace

Result<EvalRunSummary> RunEvaluation(const Model& model, const EvalRunSpec& spec) {
  return Evaluation(model, spec).Run();
}

}  // namespace primekv
