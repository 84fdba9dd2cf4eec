// Report files from results.jsonl: results.csv, report.md and PNG plots (gnuplot).
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "eval/results.h"
#include "eval/run_config.h"
#include "primekv/eval/eval_runner.h"
#include "primekv/eval/eval_stats.h"
#include "primekv/util/file_io.h"

namespace primekv {

namespace {

using nlohmann::json;

struct Mean {
  double sum = 0;
  int n = 0;
  void Add(double x) {
    sum += x;
    ++n;
  }
  double value() const { return n ? sum / n : 0.0; }
};

std::string Csv(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string Num(double x, const char* fmt = "%.1f") {
  char buf[32];
  std::snprintf(buf, sizeof(buf), fmt, x);
  return buf;
}

// gnuplot's path from $PATH, or "" when it is not installed.
std::string FindGnuplot() {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/bin:/bin";
  while (true) {
    const size_t colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/gnuplot";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) return "";
    dirs.remove_prefix(colon + 1);
  }
}

// Runs `gnuplot SCRIPT` with `dir` as its working directory, without a shell (the folder's name
// never reaches a command line), its output discarded. True when it exits 0.
bool RunGnuplot(const std::string& gnuplot, const std::filesystem::path& dir,
                const std::string& script) {
  posix_spawn_file_actions_t actions;
  if (posix_spawn_file_actions_init(&actions) != 0) return false;
  bool ok = posix_spawn_file_actions_addchdir_np(&actions, dir.c_str()) == 0 &&
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0) == 0 &&
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0) == 0 &&
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0) == 0;
  pid_t pid = -1;
  std::string arg0 = "gnuplot", arg1 = script;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  ok = ok && posix_spawn(&pid, gnuplot.c_str(), &actions, nullptr, argv, environ) == 0;
  posix_spawn_file_actions_destroy(&actions);
  if (!ok) return false;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// `text` as a gnuplot single-quoted string: a quote is doubled, and control characters (a
// newline would end the command) become spaces, so names from results.jsonl stay text.
std::string GnuplotQuoted(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "''";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string SafeName(const std::string& s) {
  std::string o;
  for (char c : s)
    o += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ? c : '_';
  return o;
}

// Mean scores by task, press and ratio (and by turn for multi-turn tasks), and the samples
// that did not fit the context.
using ByRatio = std::map<double, Mean>;
struct ScoreTables {
  std::map<std::string, std::map<std::string, ByRatio>> table;  // task -> press -> ratio
  std::map<std::string, std::map<std::string, std::map<double, std::map<int, Mean>>>> per_turn;
  std::map<std::string, ByRatio> average;  // press -> ratio, averaged over tasks
  // task -> ids of samples that did not fit, and the largest need and context size seen.
  struct OverContext {
    std::set<std::string> ids;
    int64_t max_needed = 0, ctx_size = 0;
  };
  std::map<std::string, OverContext> over;
  std::set<double> ratios;
};

void WriteCsvRow(std::ostream& csv, const eval_internal::ResultRow& r) {
  std::string expected;
  for (const auto& e : r.expected) expected += (expected.empty() ? "" : " | ") + e;
  csv << Csv(r.task) << "," << Csv(r.id) << "," << Csv(r.press) << "," << r.ratio << ","
      << Csv(r.mode) << "," << r.seed << "," << r.length << "," << r.turn << "," << r.status << ","
      << (r.score ? Num(*r.score, "%.6g") : std::string()) << "," << r.kv_bytes_full << ","
      << r.kv_bytes_compressed << "," << r.prefill_ms << "," << r.second_pass_ms << ","
      << r.score_ms << "," << r.answer_ms << "," << Csv(expected) << "," << Csv(r.prediction)
      << "\n";
}

// Writes results.csv and gathers the score tables of the rows.
Result<ScoreTables> WriteCsvAndTabulate(const std::vector<eval_internal::ResultRow>& rows,
                                        const std::filesystem::path& csv_path) {
  std::ofstream csv(csv_path);
  csv << "task,id,press,ratio,mode,seed,length,turn,status,score,kv_bytes_full,"
         "kv_bytes_compressed,prefill_ms,second_pass_ms,score_ms,answer_ms,expected,prediction\n";
  ScoreTables t;
  for (const eval_internal::ResultRow& r : rows) {
    WriteCsvRow(csv, r);
    if (!r.score) {
      ScoreTables::OverContext& o = t.over[r.task];
      o.ids.insert(r.id);
      o.max_needed = std::max(o.max_needed, r.needed_tokens);
      o.ctx_size = r.ctx_size;
      continue;
    }
    t.table[r.task][r.press][r.ratio].Add(*r.score);
    if (r.turns > 1) t.per_turn[r.task][r.press][r.ratio][static_cast<int>(r.turn)].Add(*r.score);
    t.ratios.insert(r.ratio);
  }
  for (const auto& [task, presses] : t.table)
    for (const auto& [press, rs] : presses)
      for (const auto& [r, m] : rs) t.average[press][r].Add(m.value());
  PRIMEKV_RETURN_IF_ERROR(FlushChecked(csv, csv_path.string()));
  return t;
}

// The report's opening: what the scores are, and the model and settings from config.json
// (written by the runner).
void WriteIntro(std::ostream& md, const std::filesystem::path& dir) {
  md << "# Evaluation report\n\nScores are x100, averaged over samples (and turns). Full KV "
        "(`none`) is the "
        "ratio-0 baseline. Regenerate with `primekv eval ... --out "
     << dir.string() << "`.\n\n";
  std::error_code ec;
  if (!std::filesystem::exists(dir / "config.json", ec)) return;
  auto read = eval_internal::ReadRunConfig(dir / "config.json");
  if (!read.ok()) {
    md << "(config.json unusable, so the model and settings are not shown: " << read.message()
       << ")\n\n";
    return;
  }
  const json& config = *read;
  {
    const json& m = config["model"];
    md << "Model `" << m.value("path", std::string("?")) << "` (" << m.value("size", json()).dump()
       << " bytes, " << m.value("scheme", std::string("?")) << " hash "
       << m.value("hash", std::string("?")) << "). Settings:";
    for (const auto& [key, value] : config["settings"].items()) {
      if (!value.is_null()) md << " `--" << key << " " << value.dump() << "`";
    }
    md << ".\n\n";
  }
  // What each press name meant when its rows were made (defaults change between versions).
  if (config.is_object() && config.contains("presses") && config["presses"].is_object()) {
    std::string line;
    for (const auto& [name, resolved] : config["presses"].items()) {
      if (resolved.is_string() && resolved.get<std::string>() != name)
        line +=
            (line.empty() ? "" : ", ") + ("`" + name + "` = `" + resolved.get<std::string>() + "`");
    }
    if (!line.empty()) md << "Presses with every parameter: " << line << ".\n\n";
  }
}

void WriteOverContext(std::ostream& md, const ScoreTables& t) {
  if (t.over.empty()) return;
  md << "## Samples that did not fit the context (not scored)\n\nThese samples need more "
        "tokens (prompt + answer) than the context size; they were not run and are left out "
        "of every score below.\n\n| task | samples | largest need (tokens) | context size "
        "|\n|---|---|---|---|\n";
  for (const auto& [task, o] : t.over) {
    md << "| " << task << " | " << o.ids.size() << " | " << o.max_needed << " | " << o.ctx_size
       << " |\n";
  }
  md << "\n";
}

// A press x ratio table of mean scores.
void WriteScoreTable(std::ostream& md, const std::string& title,
                     const std::map<std::string, ByRatio>& rows, const std::set<double>& ratios) {
  md << "## " << title << "\n\n| press |" << eval_internal::RatioColumnsHead(ratios);
  for (const auto& [press, rs] : rows) {
    md << "| " << press << " |";
    for (double r : ratios) {
      auto it = rs.find(r);
      md << " " << (it == rs.end() ? std::string("") : Num(100 * it->second.value())) << " |";
    }
    md << "\n";
  }
  md << "\n";
}

void WritePerTurn(std::ostream& md, const ScoreTables& t) {
  for (const auto& [task, presses] : t.per_turn) {
    md << "## " << task
       << " by turn (query drift)\n\n| press | ratio | turn scores |\n|---|---|---|\n";
    for (const auto& [press, rs] : presses)
      for (const auto& [r, turns] : rs) {
        md << "| " << press << " | " << r << " |";
        for (const auto& [turn, m] : turns)
          md << " " << Num(100 * m.value())
             << (turn + 1 < static_cast<int>(turns.size()) ? " /" : "");
        md << " |\n";
      }
    md << "\n";
  }
}

// A fresh file beside `dir / name` ("NAME.XXXXXX"), mode 0644, holding `text`; its name
// relative to `dir`, or "" when it cannot be made (the file is then removed).
std::string FreshFileBeside(const std::filesystem::path& dir, const std::string& name,
                            std::string_view text) {
  std::string path = (dir / (name + ".XXXXXX")).string();
  const int fd = ::mkstemp(path.data());
  if (fd < 0) return "";
  ::fchmod(fd, 0644);
  std::FILE* f = ::fdopen(fd, "w");
  const bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if ((f != nullptr ? std::fclose(f) : ::close(fd)) != 0 || !ok) {
    ::unlink(path.c_str());
    return "";
  }
  return std::filesystem::path(path).filename().string();
}

// Writes the script `gp` (its output `png`, for running by hand) and draws the plot. gnuplot
// opens its output by name, which would write through a link put there or wait on a FIFO, so it
// runs a copy of the script whose output is a fresh temporary, renamed over `png` when done.
// True when the plot was made; an error when `gp` or `png` cannot be replaced.
Result<bool> RenderPlot(const std::filesystem::path& dir, const std::string& gnuplot,
                        const std::string& gp, const std::string& png, const std::string& script) {
  const size_t after_terminal = script.find('\n') + 1;
  auto with_output = [&](const std::string& out) {
    std::string s = script;
    return s.insert(after_terminal, "set output " + GnuplotQuoted(out) + "\n");
  };
  PRIMEKV_RETURN_IF_ERROR(WriteFileReplacing((dir / gp).string(), with_output(png), "eval"));
  const std::string tmp_png = FreshFileBeside(dir, png, "");
  const std::string tmp_gp = tmp_png.empty() ? "" : FreshFileBeside(dir, gp, with_output(tmp_png));
  Status st;
  bool made = false;
  if (!tmp_gp.empty() && RunGnuplot(gnuplot, dir, tmp_gp)) {
    st = CheckReplaceableOutput((dir / png).string(), "eval");
    made = st.ok() && std::rename((dir / tmp_png).c_str(), (dir / png).c_str()) == 0;
  }
  if (!tmp_gp.empty()) ::unlink((dir / tmp_gp).c_str());
  if (!made && !tmp_png.empty()) ::unlink((dir / tmp_png).c_str());
  if (!st.ok()) return st;
  return made;
}

// Score against ratio, a line per press and the full-KV score dashed; linked from the report
// when gnuplot succeeds. The data and script files are replaced whole (WriteFileReplacing).
// gnuplot runs in `dir` and the script names its files relatively (plot_<safe name>.*), so
// the folder's name appears in no script or command line.
Status Plot(std::ostream& md, const std::filesystem::path& dir, const std::string& gnuplot,
            const std::string& name, const std::map<std::string, ByRatio>& rows) {
  const std::string stem = "plot_" + SafeName(name);
  const std::string dat = stem + ".dat", gp = stem + ".gp", png = stem + ".png";
  std::ostringstream d, g;
  g << "set terminal pngcairo size 900,600 noenhanced\nset title " << GnuplotQuoted(name)
    << "\nset xlabel 'compression ratio'\nset ylabel 'score'\nset yrange [0:100]\n"
    << "set key outside right\nset grid\nplot ";
  int index = 0;
  bool first = true;
  double base = -1;
  for (const auto& [press, rs] : rows) {
    if (press == "none") {
      base = 100 * rs.begin()->second.value();
      continue;
    }
    for (const auto& [r, m] : rs) d << r << " " << 100 * m.value() << "\n";
    d << "\n\n";
    g << (first ? "" : ", ") << GnuplotQuoted(dat) << " index " << index++
      << " with linespoints title " << GnuplotQuoted(press);
    first = false;
  }
  if (base >= 0)
    g << (first ? "" : ", ") << base << " with lines dashtype 2 lc rgb 'black' title 'full KV'";
  g << "\n";
  PRIMEKV_RETURN_IF_ERROR(WriteFileReplacing((dir / dat).string(), d.str(), "eval"));
  if (first && base < 0) return Status::Ok();  // nothing to draw
  PRIMEKV_ASSIGN_OR_RETURN(const bool made, RenderPlot(dir, gnuplot, gp, png, g.str()));
  if (made) md << "![" << name << "](" << png << ")\n\n";
  return Status::Ok();
}

}  // namespace

Status WriteEvalReport(const std::filesystem::path& dir, std::vector<std::string>* warnings) {
  const std::filesystem::path results = dir / "results.jsonl";
  if (!std::filesystem::is_regular_file(results))
    return Status::Error("no results.jsonl in '" + dir.string() + "'");
  std::vector<std::string> bad_lines;
  PRIMEKV_ASSIGN_OR_RETURN(const std::vector<eval_internal::ResultRow> rows,
                           eval_internal::ReadResultRows(results, &bad_lines));
  if (warnings != nullptr) warnings->insert(warnings->end(), bad_lines.begin(), bad_lines.end());
  PRIMEKV_ASSIGN_OR_RETURN(const ScoreTables t, WriteCsvAndTabulate(rows, dir / "results.csv"));

  std::ofstream md(dir / "report.md");
  WriteIntro(md, dir);
  WriteOverContext(md, t);
  if (!bad_lines.empty()) {
    md << "(" << bad_lines.size() << " unusable lines of results.jsonl were skipped; eval "
       << "printed them.)\n\n";
  }
  WriteScoreTable(md, "Average over tasks", t.average, t.ratios);
  if (auto ss = LoadSampleScores(dir / "results.jsonl"); ss.ok()) md << IntervalTable(*ss);
  for (const auto& [task, rows] : t.table) WriteScoreTable(md, task, rows, t.ratios);
  WritePerTurn(md, t);
  // One plot per task plus the average.
  const std::string gnuplot = FindGnuplot();
  if (gnuplot.empty()) {
    md << "(gnuplot not found: no plots)\n";
  } else {
    PRIMEKV_RETURN_IF_ERROR(Plot(md, dir, gnuplot, "average", t.average));
    for (const auto& [task, task_rows] : t.table)
      PRIMEKV_RETURN_IF_ERROR(Plot(md, dir, gnuplot, task, task_rows));
  }
  return FlushChecked(md, (dir / "report.md").string());
}

}  // namespace primekv
