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

#include "primekv/util/status.h"

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
  double second_pass_ms = 0;  // KVzip's second pass over the context (0 for other presses)
};

// Limits on DIR/results.jsonl: the whole file is read when a run resumes or a report is built,
// and one row holds a prediction and its references.
inline constexpr uint64_t kMaxResultsBytes = uint64_t{1} << 30;
inline constexpr size_t kMaxResultLineBytes = size_t{16} << 20;

// One parsed line, or why it is unusable (missing field, wrong type, value out of range).
Result<ResultRow> ParseResultRow(const nlohmann::json& j);
// The same from a line's text (depth-checked, never throws).
Result<ResultRow> ParseResultLine(std::string_view line);

// A ratio as the shortest decimal that reads back as the same double: rows store ratios
// exactly, so 0.5 and 0.50001 stay two settings.
std::string RatioText(double ratio);
// The (sample, press, ratio, settings, turn count) unit a row belongs to; a unit is done when
// every turn in [0, turns) has a row.
std::string UnitKey(const std::string& task, const std::string& id, const std::string& press,
                    double ratio, const std::string& mode, uint64_t seed, int64_t length,
                    int64_t turns);
std::string UnitKey(const ResultRow& row);

// Every usable row of `file` in order; each unusable line adds "FILE:LINE: reason" to
// `warnings` (when given). A missing file gives no rows; a file that is not a regular file or
// is over kMaxResultsBytes is an error naming it.
Result<std::vector<ResultRow>> ReadResultRows(const std::filesystem::path& file,
                                              std::vector<std::string>* warnings);
// The same from the file's text (`name` labels the warnings).
std::vector<ResultRow> ParseResultRows(std::string_view text, const std::string& name,
                                       std::vector<std::string>* warnings);

// Makes `file` safe to resume from: drops lines that are not JSON at all (an interrupted
// write), rows of units with a turn missing (they run again whole) and repeated (unit, turn)
// rows, with a warning each, and ends the file with a newline, rewriting it atomically when
// needed (the temporary is removed when that fails).
Status RepairResultsFile(const std::filesystem::path& file, std::vector<std::string>* warnings);

// Writes `text` to `path` through a fresh temporary beside it and a rename (WriteFileReplacing:
// a path that is not a regular file is refused); on any failure the temporary is removed and
// the error names the file.
Status WriteFileAtomically(const std::filesystem::path& path, std::string_view text);

// The rest of a markdown table's head after "| press |": a column per ratio (RatioText), each
// followed by the `extra` cells (" n |"), then the rule row with one "---|" per column.
std::string RatioColumnsHead(const std::set<double>& ratios, std::string_view extra = "");

}  // namespace primekv::eval_internal
