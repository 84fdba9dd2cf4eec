// Task dispatch, the task list and per-turn scoring.
#include <algorithm>
#include <string>
#include <vector>

#include "eval/eval_internal.h"
#include "primekv/eval/eval.h"

namespace primekv {
namespace {

constexpr int kMultiTurnMaxNew = 64;

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

std::vector<std::string> RulerTasks() { return eval_internal::RulerTaskNames(); }

std::vector<std::string> ListTasks() {
  std::vector<std::string> out = RulerTasks();
  out.emplace_back("multiturn");
  return out;
}

namespace {

constexpr std::string_view kFilePrefixes[] = {"jsonl:", "longbench:", "aime:"};

bool IsFileTask(std::string_view task) {
  for (std::string_view prefix : kFilePrefixes) {
    if (StartsWith(task, prefix)) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> SplitTaskList(std::string_view list) {
  const std::vector<std::string> names = ListTasks();
  std::vector<std::string> out;
  for (size_t begin = 0;;) {
    const size_t comma = list.find(',', begin);
    const std::string_view piece = list.substr(
        begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin);
    const bool starts_task =
        IsFileTask(piece) || std::find(names.begin(), names.end(), piece) != names.end();
    if (!starts_task && !out.empty() && IsFileTask(out.back())) {
      out.back() += ",";
      out.back() += piece;
    } else {
      out.emplace_back(piece);
    }
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return out;
}

std::optional<std::string> TaskFilePath(std::string_view task) {
  for (std::string_view prefix : kFilePrefixes) {
    if (StartsWith(task, prefix)) return std::string(task.substr(prefix.size()));
  }
  return std::nullopt;
}

std::optional<int> DefaultMaxNewTokens(std::string_view task) {
  if (task == "multiturn") return kMultiTurnMaxNew;
  return eval_internal::RulerMaxNewTokens(task);
}

Result<std::vector<EvalSample>> GenerateTask(std::string_view task, const TaskOptions& options) {
  if (options.samples < 0) return Status::Error("samples must be >= 0");
  if (options.file_samples < 0) return Status::Error("file_samples must be >= 0");
  if (options.max_context_tokens < 0) return Status::Error("max_context_tokens must be >= 0");
  for (auto [prefix, parser] :
       {std::pair{std::string_view("jsonl:"), &eval_internal::ParseJsonl},
        std::pair{std::string_view("longbench:"), &eval_internal::ParseLongBench},
        std::pair{std::string_view("aime:"), &eval_internal::ParseAime}}) {
    if (StartsWith(task, prefix)) {
      const std::string path(task.substr(prefix.size()));
      if (path.empty()) return Status::Error(std::string(task) + ": missing file path");
      Result<std::string> text = eval_internal::ReadTextFile(path);
      if (!text.ok()) return text.status();
      return parser(path, *text, options);
    }
  }
  const std::vector<std::string> names = ListTasks();
  if (std::find(names.begin(), names.end(), task) == names.end()) {
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
    return Status::Error("unknown task '" + std::string(task) + "' (known: " + known +
                         ", jsonl:PATH, longbench:PATH, aime:PATH)");
  }
  if (options.target_tokens <= 0) return Status::Error("target_tokens must be > 0");
  if (options.reserved_tokens < 0) return Status::Error("reserved_tokens must be >= 0");
  if (task == "multiturn") return eval_internal::GenerateMultiTurn(options);
  return eval_internal::GenerateRuler(task, options);
}

bool IsKnownMetric(std::string_view metric) {
  static constexpr std::string_view kMetrics[] = {
      "string_match_all", "string_match_part", "qa_f1", "rouge_l",  "classification",
      "retrieval",        "retrieval_zh",      "count", "code_sim", "exact_integer"};
  return std::find(std::begin(kMetrics), std::end(kMetrics), metric) != std::end(kMetrics);
}

double ScoreTurn(const EvalSample& sample, int turn, std::string_view prediction) {
  Check(turn >= 0 && turn < static_cast<int>(sample.turns.size()), "ScoreTurn: turn out of range");
  const std::vector<std::string>& refs = sample.turns[static_cast<size_t>(turn)].answers;
  const std::string_view pred =
      sample.first_line_only ? eval_internal::FirstLine(prediction) : prediction;
  const std::string& m = sample.metric;
  // Metrics that compare with one reference at a time take the best one, as LongBench does.
  const auto best = [&](auto&& metric) {
    double score = 0.0;
    for (const std::string& r : refs) score = std::max(score, metric(pred, r));
    return score;
  };
  double score = 0.0;
  if (m == "string_match_all") {
    score = StringMatchAll(pred, refs);
  } else if (m == "string_match_part") {
    score = StringMatchPart(pred, refs);
  } else if (m == "qa_f1") {
    score = QaF1(pred, refs);
  } else if (m == "rouge_l") {
    score = RougeL(pred, refs);
  } else if (m == "classification") {
    score = best([&](std::string_view p, std::string_view r) {
      return Classification(p, r, sample.all_classes);
    });
  } else if (m == "retrieval") {
    score = best([](std::string_view p, std::string_view r) { return Retrieval(p, r); });
  } else if (m == "retrieval_zh") {
    score = best([](std::string_view p, std::string_view r) { return RetrievalZh(p, r); });
  } else if (m == "count") {
    score = best([](std::string_view p, std::string_view r) { return Count(p, r); });
  } else if (m == "code_sim") {
    score = best([](std::string_view p, std::string_view r) { return CodeSim(p, r); });
  } else if (m == "exact_integer") {
    score = best([](std::string_view p, std::string_view r) { return ExactInteger(p, r); });
  } else {
    Check(false, "ScoreTurn: sample has an unknown metric");
  }
  return std::clamp(score, 0.0, 1.0);
}

}  // namespace primekv
