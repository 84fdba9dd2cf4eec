#include "eval/results.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "primekv/util/file_io.h"
#include "primekv/util/json_read.h"

namespace primekv::eval_internal {
namespace {

using nlohmann::json;

// Field readers: each records the first problem in `error` and returns a default.
struct RowReader {
  const json& j;
  std::string error;

  const json* Get(const char* key, bool required) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (required && error.empty()) error = std::string("missing \"") + key + "\"";
      return nullptr;
    }
    return &*it;
  }
  void Wrong(const char* key, const char* want) {
    if (!error.empty()) return;
    const auto it = j.find(key);
    error = std::string("\"") + key + "\" must be " + want;
    if (it != j.end()) error += std::string(" (it is ") + it->type_name() + ")";
  }
  std::string Str(const char* key, bool required) {
    const json* v = Get(key, required);
    if (v == nullptr) return {};
    if (!v->is_string()) {
      Wrong(key, "a string");
      return {};
    }
    return v->get<std::string>();
  }
  double Num(const char* key, bool required) {
    const json* v = Get(key, required);
    if (v == nullptr) return 0;
    if (!v->is_number() || !std::isfinite(v->get<double>())) {
      Wrong(key, "a finite number");
      return 0;
    }
    return v->get<double>();
  }
  int64_t Int(const char* key, bool required, int64_t min) {
    const json* v = Get(key, required);
    if (v == nullptr) return min;
    if (!v->is_number_integer() || v->get<int64_t>() < min) {
      Wrong(key, min == 0 ? "an integer >= 0" : "an integer >= 1");
      return min;
    }
    return v->get<int64_t>();
  }
  uint64_t Unsigned(const char* key) {
    const json* v = Get(key, false);
    if (v == nullptr) return 0;
    if (!v->is_number_unsigned()) {
      Wrong(key, "an integer >= 0");
      return 0;
    }
    return v->get<uint64_t>();
  }
};

}  // namespace

Result<ResultRow> ParseResultRow(const json& j) {
  if (!j.is_object()) return Status::Error(std::string("not a JSON object but ") + j.type_name());
  RowReader r{j, {}};
  ResultRow row;
  row.task = r.Str("task", true);
  row.id = r.Str("id", true);
  row.press = r.Str("press", true);
  row.ratio = r.Num("ratio", true);
  if (r.error.empty() && !(row.ratio >= 0 && row.ratio < 1))
    r.error = "\"ratio\" must be in [0, 1)";
  row.mode = r.Str("mode", false);
  row.seed = r.Unsigned("seed");
  row.length = r.Int("length", false, 0);
  row.turn = r.Int("turn", true, 0);
  row.turns = r.Int("turns", true, 1);
  if (r.error.empty() && row.turn >= row.turns) r.error = "\"turn\" must be below \"turns\"";
  if (const json* st = r.Get("status", false)) {
    if (!st->is_string() || (*st != kStatusOk && *st != kStatusOverContext)) {
      r.Wrong("status", "\"ok\" or \"over_context\"");
    } else {
      row.status = st->get<std::string>();
    }
  }
  if (row.status == kStatusOk) {
    const double score = r.Num("score", true);
    if (r.error.empty() && !(score >= 0 && score <= 1)) r.error = "\"score\" must be in [0, 1]";
    row.score = score;
    row.prediction = r.Str("prediction", false);
  } else {
    row.needed_tokens = r.Int("needed_tokens", true, 1);
    row.ctx_size = r.Int("ctx_size", true, 1);
  }
  if (const json* e = r.Get("expected", false)) {
    if (!e->is_array()) r.Wrong("expected", "an array of strings");
    for (const json& s : e->is_array() ? *e : json::array()) {
      if (!s.is_string()) {
        r.Wrong("expected", "an array of strings");
        break;
      }
      row.expected.push_back(s.get<std::string>());
    }
  }
  row.kv_bytes_full = r.Num("kv_bytes_full", false);
  row.kv_bytes_compressed = r.Num("kv_bytes_compressed", false);
  row.prefill_ms = r.Num("prefill_ms", false);
  row.second_pass_ms = r.Num("second_pass_ms", false);
  row.score_ms = r.Num("score_ms", false);
  row.answer_ms = r.Num("answer_ms", false);
  if (!r.error.empty()) return Status::Error(r.error);
  return row;
}

Result<ResultRow> ParseResultLine(std::string_view line) {
  if (line.size() > kMaxResultLineBytes) {
    return Status::Error("line of " + std::to_string(line.size()) + " bytes, over the limit of " +
                         std::to_string(kMaxResultLineBytes));
  }
  auto j = ParseJson(line, "row");
  if (!j.ok()) return Status::Error("invalid JSON");
  return ParseResultRow(*j);
}

std::string RatioText(double ratio) {
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, ratio);
    if (std::strtod(buf, nullptr) == ratio) break;
  }
  return buf;
}

std::string UnitKey(const std::string& task, const std::string& id, const std::string& press,
                    double ratio, const std::string& mode, uint64_t seed, int64_t length,
                    int64_t turns) {
  // Length-prefixed fields: a '|' inside an id or task path cannot make two keys equal.
  std::string key;
  for (const std::string& part : {task, id, press, RatioText(ratio), mode, std::to_string(seed),
                                  std::to_string(length), std::to_string(turns)}) {
    key += std::to_string(part.size()) + ":" + part + "|";
  }
  return key;
}

std::string UnitKey(const ResultRow& r) {
  return UnitKey(r.task, r.id, r.press, r.ratio, r.mode, r.seed, r.length, r.turns);
}

namespace {

// The text of results.jsonl ("" when it does not exist yet).
Result<std::string> ReadResultsText(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::string();
  return ReadFileCapped(file.string(), "results file", FileSource::kRegular, kMaxResultsBytes);
}

// Calls fn(line_no, line) for each line of text (without its newline).
template <typename Fn>
void ForEachLine(std::string_view text, Fn&& fn) {
  int line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    fn(++line_no, text.substr(begin, end - begin));
    begin = end + 1;
  }
}

bool IsBlankLine(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

std::vector<ResultRow> ParseResultRows(std::string_view text, const std::string& name,
                                       std::vector<std::string>* warnings) {
  std::vector<ResultRow> rows;
  ForEachLine(text, [&](int line_no, std::string_view line) {
    if (IsBlankLine(line)) return;
    Result<ResultRow> row = ParseResultLine(line);
    if (row.ok()) {
      rows.push_back(std::move(row).value());
    } else if (warnings != nullptr) {
      warnings->push_back(name + ":" + std::to_string(line_no) + ": " + row.message() +
                          "; line skipped");
    }
  });
  return rows;
}

Result<std::vector<ResultRow>> ReadResultRows(const std::filesystem::path& file,
                                              std::vector<std::string>* warnings) {
  PRIMEKV_ASSIGN_OR_RETURN(const std::string text, ReadResultsText(file));
  return ParseResultRows(text, file.string(), warnings);
}

Status WriteFileAtomically(const std::filesystem::path& path, std::string_view text) {
  return WriteFileReplacing(path.string(), text, "eval");
}

Status RepairResultsFile(const std::filesystem::path& file, std::vector<std::string>* warnings) {
  PRIMEKV_ASSIGN_OR_RETURN(const std::string text, ReadResultsText(file));
  if (text.empty()) return Status::Ok();
  struct Line {
    std::string_view text;
    std::optional<ResultRow> row;  // usable rows only; others are kept as they are
  };
  std::vector<Line> lines;
  bool changed = text.back() != '\n';
  const auto warn = [&](int line_no, const std::string& why) {
    if (warnings != nullptr)
      warnings->push_back(file.string() + ":" + std::to_string(line_no) + ": " + why);
  };
  // Turns present per unit, to find units cut short by an interruption.
  std::map<std::string, std::set<int64_t>> turns;
  std::map<std::string, int64_t> expected;
  std::vector<int> line_numbers;
  ForEachLine(text, [&](int line_no, std::string_view line) {
    if (line.size() <= kMaxResultLineBytes && CheckJsonDepth(line, "row").ok() &&
        json::accept(line)) {
      Line l{line, std::nullopt};
      if (Result<ResultRow> row = ParseResultLine(line); row.ok()) l.row = std::move(row).value();
      lines.push_back(std::move(l));
      line_numbers.push_back(line_no);
    } else {
      changed = true;
      warn(line_no, "not JSON (cut by an interruption?); dropped, its unit runs again");
    }
  });
  for (const Line& l : lines) {
    if (!l.row) continue;
    const std::string key = UnitKey(*l.row);
    turns[key].insert(l.row->turn);
    expected[key] = l.row->turns;
  }
  std::string kept;
  std::set<std::pair<std::string, int64_t>> seen;
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    if (l.row) {
      const std::string key = UnitKey(*l.row);
      if (static_cast<int64_t>(turns[key].size()) < expected[key]) {
        changed = true;
        warn(line_numbers[i], "a row of an unfinished unit (turn " + std::to_string(l.row->turn) +
                                  " of " + std::to_string(l.row->turns) +
                                  ", other turns missing); dropped, the unit runs again");
        continue;
      }
      if (!seen.emplace(key, l.row->turn).second) {
        changed = true;
        warn(line_numbers[i], "repeats turn " + std::to_string(l.row->turn) +
                                  " of a unit already in the file; dropped");
        continue;
      }
    }
    kept.append(l.text);
    kept += '\n';
  }
  if (!changed) return Status::Ok();
  return WriteFileAtomically(file, kept);
}

std::string RatioColumnsHead(const std::set<double>& ratios, std::string_view extra) {
  const size_t extra_columns = static_cast<size_t>(std::count(extra.begin(), extra.end(), '|'));
  std::string head, rule = "\n|---|";
  for (double r : ratios) {
    head += " " + RatioText(r) + " |";
    head += extra;
    for (size_t c = 0; c <= extra_columns; ++c) rule += "---|";
  }
  return head + rule + "\n";
}

}  // namespace primekv::eval_internal
