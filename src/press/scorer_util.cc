#include "press/scorer_util.h"

#include <limits>

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

double ParamReader::Number(const std::string& key, double fallback) {
  used_.push_back(key);
  auto it = params_.find(key);
  if (it == params_.end()) return fallback;
  try {
    size_t used = 0;
    const double v = std::stod(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  if (error_.empty()) error_ = "parameter " + key + "='" + it->second + "' is not a number";
  return fallback;
}

std::string ParamReader::Text(const std::string& key, const std::string& fallback) {
  used_.push_back(key);
  auto it = params_.find(key);
  return it == params_.end() ? fallback : it->second;
}

Status ParamReader::Finish(const std::string& press) const {
  if (!error_.empty()) return Status::Error("press " + press + ": " + error_);
  for (const auto& [k, v] : params_) {
    if (std::find(used_.begin(), used_.end(), k) == used_.end()) {
      std::string known;
      for (const auto& u : used_) known += (known.empty() ? "" : ", ") + u;
      return Status::Error("press " + press + ": unknown parameter '" + k + "'" +
                           (known.empty() ? " (it takes none)" : " (known: " + known + ")"));
    }
  }
  return Status::Ok();
}

}  // namespace primekv::press_internal
