#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "eval/eval_internal.h"
#include "eval/results.h"
#include "eval/run_config.h"
#include "primekv/eval/eval.h"
#include "primekv/eval/eval_runner.h"
#include "primekv/press/compressor.h"
#include "primekv/session/pipeline.h"
#include "primekv/util/file_io.h"
#include "primekv/util/progress.h"

namespace primekv {

namespace {

using nlohmann::json;

// Keys of (sample, press, ratio) units with a row for every turn in results.jsonl.
std::set<std::string> FinishedUnits(const std::vector<eval_internal::ResultRow>& rows) {
  std::map<std::string, std::pair<std::set<int64_t>, int64_t>> turns;  // key -> (seen, expected)
  for (const eval_internal::ResultRow& r : rows) {
    auto& t = turns[eval_internal::UnitKey(r)];
    t.first.insert(r.turn);
    t.second = r.turns;
  }
  std::set<std::string> done;
  for (const auto& [k, t] : turns) {
    if (static_cast<int64_t>(t.first.size()) >= t.second) done.insert(k);
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

// An exclusive lock on DIR/eval.lock, held for the whole run, so that two evals cannot append
// to one results.jsonl; the file holds the holder's pid for the message of the one refused.
class OutDirLock {
 public:
  OutDirLock() = default;
  OutDirLock(const OutDirLock&) = delete;
  OutDirLock& operator=(const OutDirLock&) = delete;
  ~OutDirLock() {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Acquire(const std::filesystem::path& dir) {
    const std::filesystem::path path = dir / "eval.lock";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
      return Status::Error("cannot open '" + path.string() + "': " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      char buf[32] = {};
      const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
      ::close(fd);
      if (err != EWOULDBLOCK)
        return Status::Error("cannot lock '" + path.string() + "': " + std::strerror(err));
      std::string pid;
      for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) pid += buf[i];
      return Status::Error("--out " + dir.string() + " is in use by another eval" +
                           (pid.empty() ? std::string() : " (pid " + pid + ")") +
                           "; wait for it to finish or use another --out folder");
    }
    fd_ = fd;
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) != 0 ||
        ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
      return Status::Error("cannot write '" + path.string() + "': " + std::strerror(errno));
    }
    return Status::Ok();
  }

 private:
  int fd_ = -1;
};

// The report replaces its plots (plot_*) after every unit has run: one that is a link or a FIFO
// is refused before the first unit instead. The folder's own entries are checked, since the
// report also plots the tasks of earlier runs.
Status CheckPlotFiles(const std::filesystem::path& dir) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (it->path().filename().string().starts_with("plot_"))
      PRIMEKV_RETURN_IF_ERROR(CheckReplaceableOutput(it->path().string(), "--out"));
  }
  if (ec) return Status::Error("cannot list '" + dir.string() + "': " + ec.message());
  return Status::Ok();
}

// Refuses an --out folder whose results were made under other settings, then records ours.
// The folder is created (and locked) only after the settings of the run have been checked; the
// checks of a recorded configuration run under the lock.
Status CheckAndRecordConfig(const std::filesystem::path& dir, const json& current,
                            OutDirLock& lock) {
  const auto config_path = dir / "config.json";
  const auto results_path = dir / "results.jsonl";
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    return Status::Error("--out " + dir.string() + " is not a directory");
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error("cannot create '" + dir.string() + "': " + ec.message());
  PRIMEKV_RETURN_IF_ERROR(lock.Acquire(dir));
  // The files eval writes in place (appends, reports) must be regular files too: a FIFO would
  // block the run, a link would be written through. config.json is checked as it is replaced.
  for (const char* name : {"results.jsonl", "results.csv", "report.md"})
    PRIMEKV_RETURN_IF_ERROR(CheckReplaceableOutput((dir / name).string(), "--out"));
  PRIMEKV_RETURN_IF_ERROR(CheckPlotFiles(dir));
  json recorded;
  if (std::filesystem::exists(config_path, ec)) {
    auto read = eval_internal::ReadRunConfig(config_path);
    if (!read.ok()) return Status::Error(read.message() + "; use another --out folder");
    recorded = std::move(read).value();
    // The press names that have rows (read only; unusable lines are reported later).
    PRIMEKV_ASSIGN_OR_RETURN(const auto rows, eval_internal::ReadResultRows(results_path, nullptr));
    std::set<std::string> row_presses;
    for (const auto& row : rows) row_presses.insert(row.press);
    PRIMEKV_RETURN_IF_ERROR(eval_internal::CheckRunConfig(recorded, current, dir, row_presses));
  } else if (std::filesystem::exists(results_path, ec)) {
    return Status::Error("--out " + dir.string() +
                         " has results.jsonl but no config.json (an older primekv made it), so "
                         "its settings cannot be checked; use another --out folder");
  }
  return eval_internal::WriteFileAtomically(
      config_path, eval_internal::MergeRunConfig(recorded, current)
                           .dump(2, ' ', false, json::error_handler_t::replace) +
                       "\n");
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
  // Rows are keyed by press name and exact ratio: a repeat would write every row twice.
  std::set<std::string> names;
  for (const Compressor& c : grid.compressors) {
    if (!names.insert(c.press().name).second)
      return Status::Error("eval: press " + c.press().name + " is listed twice");
  }
  for (size_t i = 0; i < spec.ratios.size(); ++i) {
    for (size_t k = 0; k < i; ++k) {
      if (spec.ratios[k] == spec.ratios[i])
        return Status::Error("eval: ratio " + eval_internal::RatioText(spec.ratios[i]) +
                             " is listed twice");
    }
  }
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
    for (size_t i = 0; i < spec_.tasks.size(); ++i) {
      if (std::find(spec_.tasks.begin(), spec_.tasks.begin() + static_cast<std::ptrdiff_t>(i),
                    spec_.tasks[i]) != spec_.tasks.begin() + static_cast<std::ptrdiff_t>(i))
        return Status::Error("eval: task " + spec_.tasks[i] + " is listed twice");
    }
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
    PRIMEKV_RETURN_IF_ERROR(CheckAndRecordConfig(spec_.out, config, lock_));
    results_path_ = spec_.out / "results.jsonl";
    {
      std::vector<std::string> repair;
      Status s = eval_internal::RepairResultsFile(results_path_, &repair);
      for (std::string& w : repair) Warn(std::move(w));
      if (!s.ok()) return s;
    }
    std::vector<std::string> bad_rows;
    PRIMEKV_ASSIGN_OR_RETURN(const auto rows,
                             eval_internal::ReadResultRows(results_path_, &bad_rows));
    finished_ = FinishedUnits(rows);
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
      if (finished_.count(eval_internal::UnitKey(
              task.name, s.id, grid_.compressors[ci].press().name, r, spec_.mode, spec_.seed,
              spec_.length, static_cast<int64_t>(s.turns.size())))) {
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
    size_t bytes = s.context.size();
    for (const auto& t : s.turns) {
      qs.push_back(t.question);
      prefixes.push_back(t.answer_prefix);
      bytes += t.question.size() + t.answer_prefix.size();
    }
    // A text longer than the context can hold is not tokenized: a 100 MB sample would take
    // minutes and gigabytes only to be found too long. Its need is a lower bound.
    const size_t max_token_bytes = model_.tokenizer().MaxTokenBytes();
    if (bytes > static_cast<size_t>(ctx_size_) * max_token_bytes) {
      p.mode = mode_;
      p.needed = static_cast<int64_t>((bytes + max_token_bytes - 1) / max_token_bytes);
      p.fits = false;
      ++summary_.over_context;
      Warn("task " + task.name + ", sample " + eval_internal::QuotedForMessage(s.id) +
           ": its text is " + std::to_string(bytes) + " bytes, more than the context size of " +
           std::to_string(ctx_size_) + " tokens can hold (at most " +
           std::to_string(max_token_bytes) +
           " bytes per token); not tokenized or run, marked over_context");
      return p;
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
      auto made = PrefillForPresses(model_, grid_.needs, kv_, p.context, pool, ctx_size_);
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
      // Each unit reaches the disk before the next one runs: a full disk stops the run at the
      // first unit that could not be written, not after computing all of them.
      PRIMEKV_RETURN_IF_ERROR(FlushChecked(out_, results_path_.string()));
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
    j["ratio"] = c.ratio;  // exact: dumped as the shortest text that reads back the same
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
    opt.schedule.ratio = c.ratio;
    opt.mode = c.p.mode;
    opt.schedule.chunk = spec_.chunk;
    opt.schedule.interval = spec_.interval;
    opt.max_new_tokens = c.p.max_new;
    opt.kv = kv_;
    opt.schedule.window = ctx_size_;
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
      // KVzip's pass over the context again is this press's cost, not the shared prefill's.
      j["second_pass_ms"] = c.comp.Needs().reconstruction ? pre.second_pass_ms : 0.0;
      j["score_ms"] = report->score_ms;
      j["answer_ms"] = ms;
      WriteRow(j);
    }
    ++summary_.computed;
    return Status::Ok();
  }

  Result<EvalRunSummary> Finish() {
    PRIMEKV_RETURN_IF_ERROR(FlushChecked(out_, results_path_.string()));
    out_.close();
    if (!out_) return Status::Error(results_path_.string() + ": write failed");
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
  OutDirLock lock_;  // before out_: released after the results file is closed
  std::ofstream out_;
};

}  // namespace

Result<EvalRunSummary> RunEvaluation(const Model& model, const EvalRunSpec& spec) {
  return Evaluation(model, spec).Run();
}

}  // namespace primekv
