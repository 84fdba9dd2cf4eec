// Bring-your-own jsonl samples and AIME-style problems, plus the line-by-line jsonl reading with
// per-line warnings shared with the LongBench loader.
#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "eval/internal.h"

namespace primekv::eval_internal {
namespace {

using nlohmann::json;

constexpr int kJsonlMaxNew = 128;
constexpr int kAimeMaxNew = 2048;

bool IsBlank(std::string_view line) { return PyStrip(line).empty(); }

// A string field, or an integer field written as its decimal text.
std::optional<std::string> StringOrInteger(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_number_integer()) return std::to_string(j.get<long long>());
  return std::nullopt;
}

Result<std::vector<std::string>> StringArray(const json& j, std::string_view what) {
  if (!j.is_array() || j.empty())
    return Status::Error("\"" + std::string(what) + "\" must be a non-empty array of strings");
  std::vector<std::string> out;
  for (const json& item : j) {
    if (!item.is_string())
      return Status::Error("\"" + std::string(what) + "\" must hold only strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

// An optional '-' and decimal digits, nothing else.
std::optional<long long> ParsePlainInteger(std::string_view text) {
  long long v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || text[0] == '+' || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

const json* Field(const json& object, const char* name) {
  const auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

Result<EvalSample> ParseUserLine(const json& j, const TaskOptions& options) {
  EvalSample s;
  s.task = "jsonl";
  const json* id = Field(j, "id");
  const std::optional<std::string> id_text = id ? StringOrInteger(*id) : std::nullopt;
  if (!id_text) return Status::Error("missing string \"id\"");
  s.id = *id_text;
  const json* context = Field(j, "context");
  if (!context || !context->is_string()) return Status::Error("missing string \"context\"");
  s.context = context->get<std::string>();
  const json* metric = Field(j, "metric");
  if (!metric || !metric->is_string()) return Status::Error("missing string \"metric\"");
  s.metric = metric->get<std::string>();
  static constexpr std::string_view kAllowed[] = {"string_match_all", "string_match_part", "qa_f1",
                                                  "rouge_l", "exact_integer"};
  if (std::find(std::begin(kAllowed), std::end(kAllowed), s.metric) == std::end(kAllowed)) {
    return Status::Error("unsupported metric \"" + s.metric +
                         "\" (use string_match_all, string_match_part, qa_f1, rouge_l or "
                         "exact_integer)");
  }
  const json* turns = Field(j, "turns");
  if (!turns || !turns->is_array() || turns->empty()) {
    return Status::Error("\"turns\" must be a non-empty array");
  }
  for (size_t t = 0; t < turns->size(); ++t) {
    const json& turn = (*turns)[t];
    const std::string where = "turn " + std::to_string(t + 1) + ": ";
    if (!turn.is_object()) return Status::Error(where + "must be an object");
    EvalTurn out;
    const json* question = Field(turn, "question");
    if (!question || !question->is_string())
      return Status::Error(where + "missing string \"question\"");
    out.question = question->get<std::string>();
    const json* answers = Field(turn, "answers");
    if (!answers) return Status::Error(where + "missing \"answers\"");
    Result<std::vector<std::string>> refs = StringArray(*answers, "answers");
    if (!refs.ok()) return Status::Error(where + refs.message());
    out.answers = std::move(refs).value();
    if (const json* prefix = Field(turn, "answer_prefix")) {
      if (!prefix->is_string()) return Status::Error(where + "\"answer_prefix\" must be a string");
      out.answer_prefix = prefix->get<std::string>();
    }
    out.max_new_tokens = EffectiveMaxNewTokens(options, kJsonlMaxNew);
    if (const json* max_new = Field(turn, "max_new_tokens");
        max_new && options.max_new_tokens <= 0) {
      if (!max_new->is_number_integer() || max_new->get<long long>() <= 0 ||
          max_new->get<long long>() > (1 << 24)) {
        return Status::Error(where + "\"max_new_tokens\" must be a positive integer");
      }
      out.max_new_tokens = static_cast<int>(max_new->get<long long>());
    }
    s.turns.push_back(std::move(out));
  }
  return s;
}

Result<EvalSample> ParseAimeLine(const json& j, const TaskOptions& options) {
  EvalSample s;
  s.task = "aime";
  const json* id = Field(j, "id");
  const std::optional<std::string> id_text = id ? StringOrInteger(*id) : std::nullopt;
  if (!id_text) return Status::Error("missing string \"id\"");
  s.id = *id_text;
  const json* problem = Field(j, "problem");
  if (!problem || !problem->is_string()) return Status::Error("missing string \"problem\"");
  const json* answer = Field(j, "answer");
  std::optional<long long> value;
  if (answer && answer->is_number_integer()) {
    value = answer->get<long long>();
  } else if (answer && answer->is_string()) {
    value = ParsePlainInteger(PyStrip(answer->get<std::string>()));  // e.g. "33" or "033"
  }
  if (!value) return Status::Error("\"answer\" must be an integer");
  s.context = "Solve the following competition math problem.\n\nProblem:\n" +
              problem->get<std::string>() + "\n\n";
  s.turns.push_back(
      {"Reason step by step, then give the final answer, an integer, inside "
       "\\boxed{}.",
       "",
       {std::to_string(*value)},
       EffectiveMaxNewTokens(options, kAimeMaxNew)});
  s.metric = "exact_integer";
  return s;
}

}  // namespace

Result<std::vector<EvalSample>> LoadJsonLines(const std::string& path, const TaskOptions& options,
                                              const JsonLineParser& parse) {
  Result<std::vector<std::string>> lines = ReadLines(path);
  if (!lines.ok()) return lines.status();
  std::vector<EvalSample> out;
  std::string first_problem;
  int skipped = 0;
  for (size_t i = 0; i < lines->size(); ++i) {
    if (options.file_samples > 0 && static_cast<int>(out.size()) >= options.file_samples) break;
    const std::string& line = (*lines)[i];
    if (IsBlank(line)) continue;
    const int line_no = static_cast<int>(i) + 1;
    Result<EvalSample> sample = Status::Error("not a JSON object");
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      sample = Status::Error("invalid JSON");
    } else if (j.is_object()) {
      sample = parse(j, line_no);
    }
    if (sample.ok()) {
      out.push_back(std::move(sample).value());
      continue;
    }
    ++skipped;
    std::string warning = path + ":" + std::to_string(line_no) + ": " + sample.message();
    if (first_problem.empty()) first_problem = warning;
    if (options.warnings != nullptr) options.warnings->push_back(std::move(warning));
  }
  if (out.empty()) {
    return Status::Error(
        path + ": no valid sample" +
        (skipped > 0 ? " (" + std::to_string(skipped) + " bad lines; first: " + first_problem + ")"
                     : std::string(" (empty file)")));
  }
  return out;
}

Result<std::vector<EvalSample>> LoadJsonl(const std::string& path, const TaskOptions& options) {
  return LoadJsonLines(path, options,
                       [&](const json& j, int) { return ParseUserLine(j, options); });
}

Result<std::vector<EvalSample>> LoadAime(const std::string& path, const TaskOptions& options) {
  return LoadJsonLines(path, options,
                       [&](const json& j, int) { return ParseAimeLine(j, options); });
}

}  // namespace primekv::eval_internal
