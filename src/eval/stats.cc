// Bootstrap intervals and paired comparisons over results.jsonl (include/primekv/eval/eval_stats.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "eval/results.h"
#include "primekv/eval/eval_stats.h"
#include "primekv/util/file_io.h"
#include "primekv/util/json_read.h"

namespace primekv {

namespace {

// SplitMix64: tiny, and easy to reproduce in numpy for the reference test.
struct SplitMix64 {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
};

double MeanOf(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return x.empty() ? 0.0 : s / static_cast<double>(x.size());
}

// numpy.quantile(x, q) with the default linear method; x sorted.
double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto i = static_cast<size_t>(std::floor(pos));
  const double frac = pos - static_cast<double>(i);
  if (i + 1 >= sorted.size()) return sorted.back();
  return sorted[i] + frac * (sorted[i + 1] - sorted[i]);
}

std::string Fmt(double x, const char* fmt = "%.1f") {
  char buf[48];
  std::snprintf(buf, sizeof(buf), fmt, x);
  return buf;
}

std::string Cell(const BootstrapInterval& b, bool sign = false) {
  return Fmt(100 * b.mean, sign ? "%+.1f" : "%.1f") + " [" +
         Fmt(100 * b.lo, sign ? "%+.1f" : "%.1f") + ", " +
         Fmt(100 * b.hi, sign ? "%+.1f" : "%.1f") + "]";
}

}  // namespace

BootstrapInterval StratifiedBootstrap(const std::vector<std::vector<double>>& strata,
                                      int replicates, uint64_t seed, double level) {
  BootstrapInterval out;
  std::vector<const std::vector<double>*> used;
  for (const auto& s : strata)
    if (!s.empty()) used.push_back(&s);
  if (used.empty()) return out;
  for (const auto* s : used) {
    out.mean += MeanOf(*s);
    out.n += static_cast<int>(s->size());
  }
  out.mean /= static_cast<double>(used.size());
  SplitMix64 rng{seed};
  std::vector<double> stats;
  stats.reserve(static_cast<size_t>(std::max(replicates, 0)));
  for (int r = 0; r < replicates; ++r) {
    double total = 0;
    for (const auto* s : used) {
      const uint64_t n = s->size();
      double sum = 0;
      for (uint64_t i = 0; i < n; ++i) sum += (*s)[static_cast<size_t>(rng.Next() % n)];
      total += sum / static_cast<double>(n);
    }
    stats.push_back(total / static_cast<double>(used.size()));
  }
  std::sort(stats.begin(), stats.end());
  out.lo = replicates > 0 ? Quantile(stats, (1 - level) / 2) : out.mean;
  out.hi = replicates > 0 ? Quantile(stats, 1 - (1 - level) / 2) : out.mean;
  return out;
}

Result<SampleScores> LoadSampleScores(const std::filesystem::path& results_jsonl) {
  PRIMEKV_ASSIGN_OR_RETURN(const std::string text,
                           ReadFileCapped(results_jsonl.string(), "results file",
                                          FileSource::kRegular, eval_internal::kMaxResultsBytes));
  // Sum and count of turn scores per sample. Lines need only task, id, press, ratio and score
  // (other tools write such files); unusable lines are skipped (the runner names them), and a
  // repeated (unit, turn) row counts once.
  std::map<std::string,
           std::map<std::string, std::map<double, std::map<std::string, std::pair<double, int>>>>>
      acc;
  std::set<std::string> seen;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view line = std::string_view(text).substr(begin, end - begin);
    begin = end + 1;
    if (line.size() > eval_internal::kMaxResultLineBytes) continue;
    auto parsed = ParseJson(line, "row");
    if (!parsed.ok() || !parsed->is_object()) continue;
    const JsonNode row(*parsed, "row");
    auto task = row.StringOr("task", "");
    auto press = row.StringOr("press", "");
    auto ratio = row.NumberOr("ratio", -1);
    auto score = row.NumberOr("score", -1);
    auto turn = row.IntegerOr("turn", 0, 0, INT64_MAX);
    if (!task.ok() || !press.ok() || !ratio.ok() || !score.ok() || !turn.ok() || task->empty() ||
        press->empty() || *ratio < 0 || *score < 0)
      continue;
    const auto id_it = parsed->find("id");
    if (id_it == parsed->end()) continue;
    const std::string id =
        id_it->is_string() ? id_it->get<std::string>()
                           : id_it->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const auto value_or = [](auto result, auto fallback) {
      return result.ok() ? *result : fallback;
    };
    const std::string key =
        eval_internal::UnitKey(
            *task, id, *press, *ratio, value_or(row.StringOr("mode", ""), ""),
            static_cast<uint64_t>(value_or(row.IntegerOr("seed", 0, 0, INT64_MAX), int64_t{0})),
            value_or(row.IntegerOr("length", 0, 0, INT64_MAX), int64_t{0}),
            value_or(row.IntegerOr("turns", 1, 1, INT64_MAX), int64_t{1})) +
        std::to_string(*turn);
    if (!seen.insert(key).second) continue;
    auto& [sum, count] = acc[*task][*press][*ratio][id];
    sum += *score;
    ++count;
  }
  SampleScores out;
  for (const auto& [task, presses] : acc)
    for (const auto& [press, ratios] : presses)
      for (const auto& [ratio, ids] : ratios)
        for (const auto& [id, sc] : ids)
          out.scores[task][press][ratio][id] = sc.first / std::max(sc.second, 1);
  return out;
}

std::string IntervalTable(const SampleScores& s) {
  // press -> ratio -> per-task sample scores
  std::map<std::string, std::map<double, std::vector<std::vector<double>>>> strata;
  std::set<double> ratios;
  for (const auto& [task, presses] : s.scores)
    for (const auto& [press, rs] : presses)
      for (const auto& [r, ids] : rs) {
        std::vector<double> v;
        for (const auto& [id, x] : ids) v.push_back(x);
        strata[press][r].push_back(std::move(v));
        ratios.insert(r);
      }
  std::ostringstream md;
  md << "## Average over tasks with 95% bootstrap intervals\n\nMean over tasks of the task means "
        "(x100), [2.5%, 97.5%] percentile interval of 2000 bootstrap replicates that redraw each "
        "task's samples, and n = samples (all tasks).\n\n| press |"
     << eval_internal::RatioColumnsHead(ratios, " n |");
  for (const auto& [press, rs] : strata) {
    md << "| " << press << " |";
    for (double r : ratios) {
      auto it = rs.find(r);
      if (it == rs.end()) {
        md << " | |";
        continue;
      }
      const BootstrapInterval b = StratifiedBootstrap(it->second);
      md << " " << Cell(b) << " | " << std::to_string(b.n) << " |";
    }
    md << "\n";
  }
  md << "\n### Per task with 95% bootstrap intervals\n\n| task | press |";
  for (double r : ratios) md << " " << Fmt(r, "%g") << " | n |";
  md << "\n|---|---|";
  for (size_t i = 0; i < ratios.size(); ++i) md << "---|---|";
  md << "\n";
  for (const auto& [task, presses] : s.scores)
    for (const auto& [press, rs] : presses) {
      md << "| " << task << " | " << press << " |";
      for (double r : ratios) {
        auto it = rs.find(r);
        if (it == rs.end()) {
          md << " | |";
          continue;
        }
        std::vector<double> v;
        for (const auto& [id, x] : it->second) v.push_back(x);
        const BootstrapInterval b = StratifiedBootstrap({v});
        md << " " << Cell(b) << " | " << std::to_string(b.n) << " |";
      }
      md << "\n";
    }
  md << "\n";
  return md.str();
}

Result<std::string> PairedComparison(const SampleScores& s, const std::string& a,
                                     const std::string& b) {
  // ratio -> task -> sample id -> (score of a, score of b)
  std::map<double, std::map<std::string, std::map<std::string, std::pair<double, double>>>> pairs;
  for (const auto& [task, presses] : s.scores) {
    auto ia = presses.find(a), ib = presses.find(b);
    if (ia == presses.end() || ib == presses.end()) continue;
    std::set<double> rs;
    for (const auto& [r, ids] : ia->second) rs.insert(r);
    for (const auto& [r, ids] : ib->second) rs.insert(r);
    for (double r : rs) {
      // The full cache runs once at ratio 0; it pairs with every ratio of the other press.
      auto xa = ia->second.find(a == "none" ? 0.0 : r);
      auto xb = ib->second.find(b == "none" ? 0.0 : r);
      if (xa == ia->second.end() || xb == ib->second.end()) continue;
      for (const auto& [id, va] : xa->second) {
        auto jt = xb->second.find(id);
        if (jt != xb->second.end()) pairs[r][task][id] = {va, jt->second};
      }
    }
  }
  if (pairs.empty())
    return Status::Error("presses '" + a + "' and '" + b + "' share no samples");  // NOLINT
  std::ostringstream md;
  md << "## " << b << " minus " << a
     << " (paired, same samples)\n\nx100; mean over tasks of the per-task mean "
        "difference, 95% paired bootstrap interval (2000 replicates redrawing each "
        "task's samples); n = paired samples.\n\n| ratio | n | "
     << a << " | " << b << " | difference [95% CI] |\n|---|---|---|---|---|\n";
  std::ostringstream per_task;
  per_task << "\n### Per task\n\n| task | ratio | n | " << a << " | " << b
           << " | difference [95% CI] |\n|---|---|---|---|---|---|\n";
  // task -> id -> (sum of differences, ratios) for the mean over ratios.
  std::map<std::string, std::map<std::string, std::pair<double, int>>> over_ratios;
  for (const auto& [r, tasks] : pairs) {
    std::vector<std::vector<double>> d, xa, xb;
    for (const auto& [task, ids] : tasks) {
      std::vector<double> dt, at, bt;
      for (const auto& [id, ab] : ids) {
        dt.push_back(ab.second - ab.first);
        at.push_back(ab.first);
        bt.push_back(ab.second);
        auto& [sum, count] = over_ratios[task][id];
        sum += ab.second - ab.first;
        ++count;
      }
      const BootstrapInterval bi = StratifiedBootstrap({dt});
      per_task << "| " << task << " | " << Fmt(r, "%g") << " | " << std::to_string(bi.n) << " | "
               << Fmt(100 * MeanOf(at)) << " | " << Fmt(100 * MeanOf(bt)) << " | " << Cell(bi, true)
               << " |\n";
      d.push_back(std::move(dt));
      xa.push_back(std::move(at));
      xb.push_back(std::move(bt));
    }
    const BootstrapInterval bd = StratifiedBootstrap(d);
    md << "| " << Fmt(r, "%g") << " | " << std::to_string(bd.n) << " | "
       << Fmt(100 * StratifiedBootstrap(xa, 0).mean) << " | "
       << Fmt(100 * StratifiedBootstrap(xb, 0).mean) << " | " << Cell(bd, true) << " |\n";
  }
  if (pairs.size() > 1) {
    // Per sample, the mean difference over the ratios it was run at.
    std::vector<std::vector<double>> d;
    for (const auto& [task, ids] : over_ratios) {
      std::vector<double> v;
      for (const auto& [id, sc] : ids) v.push_back(sc.first / sc.second);
      d.push_back(std::move(v));
    }
    const BootstrapInterval bd = StratifiedBootstrap(d);
    md << "| mean over ratios | " << std::to_string(bd.n) << " | | | " << Cell(bd, true) << " |\n";
  }
  md << per_task.str();
  return md.str();
}

}  // namespace primekv
