#include "press/scorer_util.h"

#include <charconv>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <string_view>

namespace primekv::press_internal {

void ProtectFirst(std::vector<float>& s, int count) {
  std::vector<int32_t> rows(static_cast<size_t>(std::min(std::ssize(s), int64_t{count})));
  std::iota(rows.begin(), rows.end(), 0);
  Protect(s, rows);
}

Mat<double> WindowAttention(const LayerInput& in, int query_head, int h) {
  const MatView<const float> q = in.QueryHead(in.window_queries, query_head);
  const MatView<const float> keys = in.Keys(h);
  const double scale = 1.0 / std::sqrt(static_cast<double>(in.head_dim()));
  Mat<double> p(q.rows, keys.rows);
  for (int64_t i = 0; i < q.rows; ++i) {
    CausalAttention(q.Row(i), keys, in.heads[static_cast<size_t>(h)].positions,
                    in.window_positions[static_cast<size_t>(i)], scale, p.RowSpan(i));
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

std::vector<double> CosineToMeanKey(MatView<const float> keys) {
  const int64_t n = keys.rows, d = keys.cols;
  std::vector<double> anchor(static_cast<size_t>(d), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    const float* k = keys.Row(j);
    const double inv = 1.0 / std::max(Norm(k, d), 1e-12);
    for (int64_t c = 0; c < d; ++c) anchor[static_cast<size_t>(c)] += k[c] * inv;
  }
  double an = 0;
  for (double a : anchor) an += a * a;
  an = std::max(std::sqrt(an), 1e-12);
  std::vector<double> cosine(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const float* k = keys.Row(j);
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += k[c] * anchor[static_cast<size_t>(c)];
    cosine[static_cast<size_t>(j)] = dot / (std::max(Norm(k, d), 1e-12) * an);
  }
  return cosine;
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
