// Rows of DIR/results.jsonl, read defensively: the runner resumes from them and the report is
// built from them, so a bad line (hand edits, another tool, a cut write) is reported with its
// line number and skipped, never trusted.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/status.h"

namespace primekv::eval_internal {

// "ok": the turn ran and has a score. "over_context": the sample needs more tokens than the
// context size; it did not run and has no score.
inline constexpr const char* kStatusOk = "ok";
inline constexpr const char* kStatusOverContext = "over_context";

struct ResultRow {
  std::string task, id, press, mode, status = kStatusOk;
  double ratio = 0;
  uint64_t seed = 0;
  int64_t length = 0;
  int64_t turn = 0, turns = 1;
  std::optional<double> score;              // status "ok" only
  int64_t needed_tokens = 0, ctx_size = 0;  // status "over_context" only
  std::vector<std::string> expected;
  std::string prediction;
  double kv_bytes_full = 0, kv_bytes_compressed = 0;
  double prefill_ms = 0, score_ms = 0, answer_ms = 0;
};

// One parsed line, or why it is unusable (missing field, wrong type, value out of range).
Result<ResultRow> ParseResultRow(const nlohmann::json& j);

// Every usable row of `file` in order; each unusable line adds "FILE:LINE: reason" to
// `warnings` (when given). A missing file gives no rows.
std::vector<ResultRow> ReadResultRows(const std::filesystem::path& file,
                                      std::vector<std::string>* warnings);

// Makes `file` safe to append to: drops lines that are not JSON at all (an interrupted write),
// with a warning each, and ends the file with a newline, rewriting it atomically when needed.
Status RepairResultsFile(const std::filesystem::path& file, std::vector<std::string>* warnings);

// The rest of a markdown table's head after "| press |": a column per ratio (printed %g), each
// followed by the `extra` cells (" n |"), then the rule row with one "---|" per column.
std::string RatioColumnsHead(const std::set<double>& ratios, std::string_view extra = "");

}  // namespace primekv::eval_internal
