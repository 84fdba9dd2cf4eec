#include "eval/results.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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
  row.score_ms = r.Num("score_ms", false);
  row.answer_ms = r.Num("answer_ms", false);
  if (!r.error.empty()) return Status::Error(r.error);
  return row;
}

std::vector<ResultRow> ReadResultRows(const std::filesystem::path& file,
                                      std::vector<std::string>* warnings) {
  std::vector<ResultRow> rows;
  std::ifstream in(file, std::ios::binary);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    Result<ResultRow> row = j.is_discarded() ? Status::Error("invalid JSON") : ParseResultRow(j);
    if (row.ok()) {
      rows.push_back(std::move(row).value());
    } else if (warnings != nullptr) {
      warnings->push_back(file.string() + ":" + std::to_string(line_no) + ": " + row.message() +
                          "; line skipped");
    }
  }
  return rows;
}

Status RepairResultsFile(const std::filesystem::path& file, std::vector<std::string>* warnings) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::Ok();  // nothing yet
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  in.close();
  if (text.empty()) return Status::Ok();
  std::string kept;
  bool changed = text.back() != '\n';
  int line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (json::accept(line)) {
      kept += line + "\n";
    } else {
      changed = true;
      if (warnings != nullptr) {
        warnings->push_back(file.string() + ":" + std::to_string(line_no) +
                            ": not JSON (cut by an interruption?); dropped, its unit runs again");
      }
    }
  }
  if (!changed) return Status::Ok();
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << kept;
    if (!out.flush()) return Status::Error("cannot write '" + tmp.string() + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) return Status::Error("cannot replace '" + file.string() + "': " + ec.message());
  return Status::Ok();
}

std::string RatioColumnsHead(const std::set<double>& ratios, std::string_view extra) {
  const size_t extra_columns = static_cast<size_t>(std::count(extra.begin(), extra.end(), '|'));
  std::string head, rule = "\n|---|";
  for (double r : ratios) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), " %g |", r);
    head += buf;
    head += extra;
    for (size_t c = 0; c <= extra_columns; ++c) rule += "---|";
  }
  return head + rule + "\n";
}

}  // namespace primekv::eval_internal
