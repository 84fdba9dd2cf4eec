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
  // The model's own scale and soft-cap (granite, gemma2), so the scores are its attention.
  const ModelConfig& c = in.config;
  Mat<double> p(q.rows, keys.rows);
  const std::span<const int32_t> pos = in.heads[static_cast<size_t>(h)].positions;
  for (int64_t i = 0; i < q.rows; ++i) {
    const int32_t q_pos = in.window_positions[static_cast<size_t>(i)];
    std::span<double> row = p.RowSpan(i);
    for (int64_t j = 0; j < keys.rows; ++j) {
      row[static_cast<size_t>(j)] =
          pos[static_cast<size_t>(j)] > q_pos
              ? -std::numeric_limits<double>::infinity()
              : c.SoftCap(DotF64(q.Row(i), keys.Row(j), keys.cols) * c.QkScale());
    }
    MaskedSoftmax(row);
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

const std::string* ParamReader::Lookup(const std::string& key) {
  used_.push_back(key);
  auto it = params_.find(key);
  return it == params_.end() ? nullptr : &it->second;
}

bool ParamReader::Accept(const std::string& key, const std::string& text, bool parsed,
                         bool in_range, std::string_view kind, const std::string& range) {
  if (!parsed) {
    Fail(Join({key, "='", text, "' is not ", kind, " (want one in ", range, ")"}));
  } else if (!in_range) {
    Fail(Join({key, "=", text, " is outside ", range}));
  }
  return parsed && in_range;
}

int64_t ParamReader::Integer64(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) {
  const std::string* t = Lookup(key);
  if (t == nullptr) {
    resolved_[key] = std::to_string(fallback);
    return fallback;
  }
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(t->data(), t->data() + t->size(), v);
  // Out of int64's range still reads as an integer: it is reported as outside [lo, hi].
  const bool parsed = !t->empty() && ptr == t->data() + t->size() &&
                      (ec == std::errc() || ec == std::errc::result_out_of_range);
  const bool in_range = ec == std::errc() && v >= lo && v <= hi;
  const std::string range = Join({"[", std::to_string(lo), ", ", std::to_string(hi), "]"});
  const int64_t value = Accept(key, *t, parsed, in_range, "an integer", range) ? v : fallback;
  resolved_[key] = std::to_string(value);
  return value;
}

int ParamReader::Integer(const std::string& key, int fallback, int lo, int hi) {
  return static_cast<int>(Integer64(key, fallback, lo, hi));
}

double ParamReader::Real(const std::string& key, double fallback, double lo, double hi) {
  const std::string* t = Lookup(key);
  double value = fallback;
  if (t != nullptr) {
    double v = 0;
    const auto [ptr, ec] = std::from_chars(t->data(), t->data() + t->size(), v);
    const bool parsed =
        !t->empty() && ptr == t->data() + t->size() && ec == std::errc() && std::isfinite(v);
    char range[80];
    std::snprintf(range, sizeof(range), "[%g, %g]", lo, hi);
    if (Accept(key, *t, parsed, v >= lo && v <= hi, "a finite number", range)) value = v;
  }
  // Shortest text that reads back as the same double: "0.5" and "0.50" resolve alike.
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  resolved_[key] = ec == std::errc() ? std::string(buf, end) : std::string("?");
  return value;
}

std::string ParamReader::Text(const std::string& key, const std::string& fallback) {
  const std::string* text = Lookup(key);
  std::string value = text ? *text : fallback;
  resolved_[key] = value;
  return value;
}

size_t ParamReader::ChoiceIndex(const std::string& key, const std::string& fallback,
                                std::span<const std::string_view> names) {
  const std::string word = Text(key, fallback);
  std::string listed;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == word) return i;
    listed.append(i == 0 ? "" : ", ").append(names[i]);
  }
  Fail(Join({key, "='", word, "' (choose ", listed, ")"}));
  return 0;
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
