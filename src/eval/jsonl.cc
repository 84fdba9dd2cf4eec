// Bring-your-own jsonl samples and AIME-style problems, plus the line-by-line jsonl reading with
// per-line warnings shared with the LongBench loader.
#include <algorithm>
#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "eval/eval_internal.h"
#include "primekv/util/json_read.h"

namespace primekv::eval_internal {
namespace {

using nlohmann::json;

constexpr int kJsonlMaxNew = 128;
constexpr int kAimeMaxNew = 2048;

bool IsBlank(std::string_view line) { return PyStrip(line).empty(); }

// The "id" field: a string, or an integer written as its decimal text.
Result<std::string> SampleIdField(const json& object) {
  const auto it = object.find("id");
  if (it == object.end()) return Status::Error("missing \"id\"");
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_unsigned()) return std::to_string(it->get<unsigned long long>());
  if (it->is_number_integer()) return std::to_string(it->get<long long>());
  return Status::Error(
      "\"id\" must be a string or an integer, not " +
      std::string(it->is_number_float() ? "a fractional number" : it->type_name()));
}

// Byte offset of the first byte that does not belong to well-formed UTF-8 (no overlongs, no
// surrogates, at most U+10FFFF), or nullopt.
std::optional<size_t> FirstInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned c = b(0);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;                   // continuation bytes
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + n >= s.size()) return i;  // the sequence is cut short by the end of the line
    if (b(1) < lo || b(1) > hi) return i;
    for (size_t k = 2; k <= n; ++k) {
      if (b(k) < 0x80 || b(k) > 0xBF) return i;
    }
    i += n + 1;
  }
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

Result<std::string> StringField(const json& object, const char* name) {
  const json* field = Field(object, name);
  if (!field || !field->is_string()) {
    return Status::Error("missing string \"" + std::string(name) + "\"");
  }
  return field->get<std::string>();
}

Result<EvalSample> ParseUserLine(const json& j, const TaskOptions& options) {
  EvalSample s;
  s.task = "jsonl";
  PRIMEKV_ASSIGN_OR_RETURN(s.id, SampleIdField(j));
  PRIMEKV_ASSIGN_OR_RETURN(s.context, StringField(j, "context"));
  PRIMEKV_ASSIGN_OR_RETURN(s.metric, StringField(j, "metric"));
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
    // Every prediction contains the empty string: such a reference would score 1 for anything.
    for (const std::string& ref : *refs) {
      if (PyStrip(ref).empty())
        return Status::Error(where +
                             "\"answers\" holds an empty answer, which any prediction "
                             "would match");
    }
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
  PRIMEKV_ASSIGN_OR_RETURN(s.id, SampleIdField(j));
  PRIMEKV_ASSIGN_OR_RETURN(const std::string problem, StringField(j, "problem"));
  const json* answer = Field(j, "answer");
  std::optional<long long> value;
  if (answer && answer->is_number_integer()) {
    value = answer->get<long long>();
  } else if (answer && answer->is_string()) {
    value = ParsePlainInteger(PyStrip(answer->get<std::string>()));  // e.g. "33" or "033"
  }
  if (!value) return Status::Error("\"answer\" must be an integer");
  s.context = "Solve the following competition math problem.\n\nProblem:\n" + problem + "\n\n";
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

Result<std::vector<EvalSample>> ParseJsonLines(const std::string& path, std::string_view text,
                                               const TaskOptions& options,
                                               const JsonLineParser& parse) {
  std::vector<EvalSample> out;
  std::map<std::string, int> id_line;  // id -> line of its first sample
  std::string first_problem;
  int skipped = 0;
  int line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    if (options.file_samples > 0 && static_cast<int>(out.size()) >= options.file_samples) break;
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (IsBlank(line)) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    Result<EvalSample> sample = Status::Error("not a JSON object");
    if (line.size() > kMaxTaskLineBytes) {
      sample =
          Status::Error("line of " + std::to_string(line.size()) + " bytes, over the limit of " +
                        std::to_string(kMaxTaskLineBytes) + " bytes per sample");
    } else if (Status depth = CheckJsonDepth(line, "the line"); !depth.ok()) {
      sample = depth;
    } else if (const std::optional<size_t> bad = FirstInvalidUtf8(line)) {
      sample = Status::Error("invalid UTF-8 at byte " + std::to_string(*bad + 1) + " of the line");
    } else {
      try {
        const json j = json::parse(line);
        if (j.is_object()) sample = parse(j, line_no);
      } catch (const json::parse_error& e) {
        sample = Status::Error("invalid JSON at byte " + std::to_string(e.byte) + " of the line");
      } catch (const json::exception& e) {
        // Valid syntax the parser still refuses, e.g. a number past double's range (406).
        constexpr size_t kMaxMessage = 120;  // the message quotes the offending text
        std::string what = e.what();
        if (what.size() > kMaxMessage) what = what.substr(0, kMaxMessage) + "...";
        sample = Status::Error("unreadable JSON: " + what);
      }
    }
    if (sample.ok()) {
      const auto [it, fresh] = id_line.emplace(sample->id, line_no);
      if (!fresh) {
        return Status::Error(where + "duplicate id " + QuotedForMessage(sample->id) +
                             " (first on line " + std::to_string(it->second) + ")");
      }
      out.push_back(std::move(sample).value());
      continue;
    }
    ++skipped;
    std::string warning = where + sample.message();
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

Result<std::vector<EvalSample>> ParseJsonl(const std::string& path, std::string_view text,
                                           const TaskOptions& options) {
  return ParseJsonLines(path, text, options,
                        [&](const json& j, int) { return ParseUserLine(j, options); });
}

Result<std::vector<EvalSample>> ParseAime(const std::string& path, std::string_view text,
                                          const TaskOptions& options) {
  return ParseJsonLines(path, text, options,
                        [&](const json& j, int) { return ParseAimeLine(j, options); });
}

std::string QuotedForMessage(std::string_view text) {
  return json(std::string(text))
      .dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
}

}  // namespace primekv::eval_internal
