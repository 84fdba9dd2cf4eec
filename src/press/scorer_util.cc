#include "press/scorer_util.h"

#include <charconv>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <string_view>

namespace primekv::press_internal {

std::vector<double> WindowAttention(const LayerInput& in, int query_head, const HeadEntries& e) {
  const int w = static_cast<int>(in.window_queries.rows);
  const int n = e.size();
  const int d = in.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> p(static_cast<size_t>(w) * n, 0.0);
  for (int i = 0; i < w; ++i) {
    const float* q = in.window_queries.Row(i) + static_cast<int64_t>(query_head) * d;
    const int32_t qpos = in.window_positions[static_cast<size_t>(i)];
    double* row = p.data() + static_cast<size_t>(i) * n;
    double mx = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < n; ++j) {
      if (e.positions[static_cast<size_t>(j)] > qpos) {
        row[j] = -std::numeric_limits<double>::infinity();
        continue;
      }
      row[j] = Dot(q, e.keys.data() + static_cast<size_t>(j) * d, d) * scale;
      mx = std::max(mx, row[j]);
    }
    double sum = 0;
    for (int j = 0; j < n; ++j) {
      row[j] = std::isinf(row[j]) && row[j] < 0 ? 0.0 : std::exp(row[j] - mx);
      sum += row[j];
    }
    if (sum > 0) {
      for (int j = 0; j < n; ++j) row[j] /= sum;
    }
  }
  return p;
}

std::vector<int32_t> WindowRows(const LayerInput& in, const HeadEntries& e) {
  std::vector<int32_t> rows;
  if (in.window_positions.empty()) return rows;
  const int32_t first = in.window_positions.front();
  for (int j = 0; j < e.size(); ++j) {
    if (e.positions[static_cast<size_t>(j)] >= first) rows.push_back(j);
  }
  return rows;
}

}  // namespace primekv::press_internal

namespace primekv::press_internal {

namespace {

// Appends pieces one by one (g++ 12 warns falsely on long operator+ chains of std::string).
std::string Join(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out.append(p);
  return out;
}

}  // namespace

void ParamReader::Fail(const std::string& message) {
  if (error_.empty()) error_ = message;
}

int64_t ParamReader::Integer64(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) {
  used_.push_back(key);
  auto it = params_.find(key);
  if (it == params_.end()) return fallback;
  const std::string& t = it->second;
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  const std::string range = Join({"[", std::to_string(lo), ", ", std::to_string(hi), "]"});
  if (t.empty() || ptr != t.data() + t.size() ||
      (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    Fail(Join({key, "='", t, "' is not an integer (want one in ", range, ")"}));
  } else if (ec == std::errc::result_out_of_range || v < lo || v > hi) {
    Fail(Join({key, "=", t, " is outside ", range}));
  } else {
    return v;
  }
  return fallback;
}

int ParamReader::Integer(const std::string& key, int fallback, int lo, int hi) {
  return static_cast<int>(Integer64(key, fallback, lo, hi));
}

double ParamReader::Real(const std::string& key, double fallback, double lo, double hi) {
  used_.push_back(key);
  auto it = params_.find(key);
  if (it == params_.end()) return fallback;
  const std::string& t = it->second;
  double v = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  char range[80];
  std::snprintf(range, sizeof(range), "[%g, %g]", lo, hi);
  if (t.empty() || ptr != t.data() + t.size() || ec != std::errc() || !std::isfinite(v)) {
    Fail(Join({key, "='", t, "' is not a finite number (want one in ", range, ")"}));
  } else if (v < lo || v > hi) {
    Fail(Join({key, "=", t, " is outside ", range}));
  } else {
    return v;
  }
  return fallback;
}

std::string ParamReader::Text(const std::string& key, const std::string& fallback) {
  used_.push_back(key);
  auto it = params_.find(key);
  return it == params_.end() ? fallback : it->second;
}

Status ParamReader::Finish() const {
  if (!error_.empty()) return Status::Error("press " + press_ + ": " + error_);
  for (const auto& [k, v] : params_) {
    if (std::find(used_.begin(), used_.end(), k) == used_.end()) {
      std::string known;
      for (const auto& u : used_) known += (known.empty() ? "" : ", ") + u;
      return Status::Error("press " + press_ + ": unknown parameter '" + k + "'" +
                           (known.empty() ? " (it takes none)" : " (known: " + known + ")"));
    }
  }
  return Status::Ok();
}

}  // namespace primekv::press_internal
