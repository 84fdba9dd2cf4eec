#include "primekv/press/budget_profile.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <span>
#include <sstream>

#include "primekv/model/model.h"
#include "primekv/util/file_io.h"
#include "primekv/util/json_read.h"
#include "primekv/util/text.h"

namespace primekv {
namespace {

constexpr int kMaxLayers = 4096;
constexpr int kMaxHeads = 4096;
constexpr size_t kMaxRatios = 1000;

// Shares that spend `budget` over the cells: max(need, w) for the level w that spends it
// (water-filling), or the needs scaled down when they alone exceed it.
std::vector<double> FillAbove(const std::vector<double>& need, double budget) {
  const double total = std::accumulate(need.begin(), need.end(), 0.0);
  std::vector<double> out(need);
  if (total >= budget) {
    for (double& f : out) f *= total > 0 ? budget / total : 0;
    return out;
  }
  std::vector<double> sorted(need);
  std::sort(sorted.begin(), sorted.end());
  // With the i + 1 smallest needs raised to w: (i + 1) w + (sum of the others) = budget.
  double rest = total;
  double w = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    rest -= sorted[i];
    w = (budget - rest) / static_cast<double>(i + 1);
    if (i + 1 == sorted.size() || w <= sorted[i + 1]) break;
  }
  // w < 1: the budget is under one share per cell and every share is at least w.
  for (double& f : out) f = std::max(f, w);
  return out;
}

}  // namespace

BudgetProfile BudgetProfile::NestedBelow(double need_ratio) const {
  const size_t cells = static_cast<size_t>(n_layers) * static_cast<size_t>(n_kv_heads);
  std::vector<double> need(cells);
  for (size_t c = 0; c < cells; ++c)
    need[c] =
        Fraction(need_ratio, static_cast<int>(c) / n_kv_heads, static_cast<int>(c) % n_kv_heads);
  BudgetProfile out = *this;
  out.ratios.clear();
  out.fractions.clear();
  out.spread.clear();
  std::ostringstream nested;
  nested << method << ", nested below " << need_ratio;
  out.method = nested.str();
  auto add = [&](double r, std::span<const double> shares) {
    out.ratios.push_back(r);
    out.fractions.insert(out.fractions.end(), shares.begin(), shares.end());
  };
  for (double r : ratios) {
    if (r < need_ratio) add(r, FillAbove(need, static_cast<double>(cells) * (1 - r)));
  }
  add(need_ratio, need);
  for (size_t i = 0; i < ratios.size(); ++i) {
    if (ratios[i] > need_ratio) add(ratios[i], {fractions.data() + i * cells, cells});
  }
  return out;
}

double BudgetProfile::Fraction(double ratio, int layer, int head) const {
  const size_t n = ratios.size();
  // Outside the measured range the nearest end's shape, scaled to this ratio's total.
  auto scaled = [&](size_t r) { return At(r, layer, head) / (1.0 - ratios[r]) * (1.0 - ratio); };
  if (ratio <= ratios.front()) return std::min(1.0, scaled(0));
  if (ratio >= ratios.back()) return std::min(1.0, scaled(n - 1));
  const size_t hi =
      static_cast<size_t>(std::upper_bound(ratios.begin(), ratios.end(), ratio) - ratios.begin());
  const size_t lo = hi - 1;
  const double t = (ratio - ratios[lo]) / (ratios[hi] - ratios[lo]);
  return (1 - t) * At(lo, layer, head) + t * At(hi, layer, head);
}

int BudgetProfile::Keep(int seen, double ratio, int layer, int head) const {
  const double keep = std::round(seen * Fraction(ratio, layer, head));
  return std::clamp(static_cast<int>(keep), 1, std::max(seen, 1));
}

Status BudgetProfile::Validate() const {
  if (n_layers < 1 || n_layers > kMaxLayers || n_kv_heads < 1 || n_kv_heads > kMaxHeads)
    return Status::Error("budget profile: layers and heads must be positive");
  if (ratios.empty() || ratios.size() > kMaxRatios)
    return Status::Error("budget profile: needs 1 to 1000 ratios");
  for (size_t i = 0; i < ratios.size(); ++i) {
    if (!(ratios[i] > 0 && ratios[i] < 1) || (i > 0 && !(ratios[i] > ratios[i - 1])))
      return Status::Error("budget profile: ratios must ascend strictly inside (0, 1)");
  }
  const size_t cells = static_cast<size_t>(n_layers) * static_cast<size_t>(n_kv_heads);
  if (fractions.size() != ratios.size() * cells)
    return Status::Error("budget profile: fractions must be [ratios][layers][heads]");
  for (size_t r = 0; r < ratios.size(); ++r) {
    double sum = 0;
    for (size_t i = 0; i < cells; ++i) {
      const double f = fractions[r * cells + i];
      if (!(f >= 0 && f <= 1)) return Status::Error("budget profile: a share is not in [0, 1]");
      sum += f;
    }
    // Each ratio's shares spend that ratio's budget (rounding of small heads aside).
    if (std::abs(sum / static_cast<double>(cells) - (1 - ratios[r])) > 0.02)
      return Status::Error("budget profile: the shares at ratio " + std::to_string(ratios[r]) +
                           " average " + std::to_string(sum / static_cast<double>(cells)) +
                           ", not 1 - ratio");
  }
  return Status::Ok();
}

Result<BudgetProfile> BudgetProfile::Load(const std::filesystem::path& path) {
  PRIMEKV_ASSIGN_OR_RETURN(const std::string text,
                           ReadFileCapped(path.string(), "budget profile", FileSource::kRegular,
                                          kMaxBudgetProfileBytes));
  return Parse(text, "budget profile '" + path.string() + "'");
}

Status BudgetProfile::CheckModel(const Model& m) const {
  const ModelConfig& c = m.config();
  if (n_layers != c.n_layers || n_kv_heads != c.n_kv_heads)
    return Status::Error("budget profile: it is for " + std::to_string(n_layers) + " layers x " +
                         std::to_string(n_kv_heads) + " KV heads, the model has " +
                         std::to_string(c.n_layers) + " x " + std::to_string(c.n_kv_heads));
  if (model.empty()) return Status::Ok();
  const std::string id = m.Identity();
  if (model != id)
    return Status::Error("budget profile: it was measured on another model (" +
                         Printable(model, 80) + "), not this one (" + id +
                         "); run primekv calibrate on this model");
  return Status::Ok();
}

Result<BudgetProfile> BudgetProfile::Parse(std::string_view text, const std::string& what) {
  PRIMEKV_ASSIGN_OR_RETURN(const nlohmann::json j, ParseJson(text, what));
  BudgetProfile p;
  try {
    if (!j.is_object() || j.value("format", "") != "primekv-budget-profile")
      return Status::Error(what + ": not a primekv-budget-profile file");
    // Counts are range-checked as JSON integers: a float such as 1e80 must not reach an int.
    const JsonNode root(j, what);
    PRIMEKV_ASSIGN_OR_RETURN(const JsonNode layers, root.Field("n_layers"));
    PRIMEKV_ASSIGN_OR_RETURN(p.n_layers, layers.Integer(1, kMaxLayers));
    PRIMEKV_ASSIGN_OR_RETURN(const JsonNode heads, root.Field("n_kv_heads"));
    PRIMEKV_ASSIGN_OR_RETURN(p.n_kv_heads, heads.Integer(1, kMaxHeads));
    PRIMEKV_ASSIGN_OR_RETURN(p.contexts, root.IntegerOr("contexts", 0, 0, INT32_MAX));
    PRIMEKV_ASSIGN_OR_RETURN(p.method, root.StringOr("method", ""));
    PRIMEKV_ASSIGN_OR_RETURN(p.model, root.StringOr("model", ""));
    PRIMEKV_ASSIGN_OR_RETURN(p.model_sha256, root.StringOr("model_sha256", ""));
    PRIMEKV_ASSIGN_OR_RETURN(p.version, root.IntegerOr("format_version", 1, 1, INT32_MAX));
    if (p.version > kBudgetProfileVersion)
      return Status::Error(what + ": format_version " + std::to_string(p.version) +
                           " is newer than this build reads (1 to " +
                           std::to_string(kBudgetProfileVersion) + "); update primekv or run " +
                           "primekv calibrate again");
    p.ratios = j.at("ratios").get<std::vector<double>>();
    if (p.ratios.size() > kMaxRatios) return Status::Error(what + ": at most 1000 ratios");
    const size_t cells =
        p.ratios.size() * static_cast<size_t>(p.n_layers) * static_cast<size_t>(p.n_kv_heads);
    for (const auto& by_ratio : j.at("fractions")) {
      for (const auto& by_layer : by_ratio) {
        for (const auto& f : by_layer) {
          if (p.fractions.size() >= cells)
            return Status::Error(what + ": fractions must be [ratios][layers][heads]");
          p.fractions.push_back(f.get<double>());
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(what + ": " + e.what());
  }
  const Status ok = p.Validate();
  if (!ok.ok()) return Status::Error(what + ": " + ok.message());
  return p;
}

Status BudgetProfile::Save(const std::filesystem::path& path) const {
  PRIMEKV_RETURN_IF_ERROR(Validate());
  nlohmann::json j;
  j["format"] = "primekv-budget-profile";
  j["format_version"] = kBudgetProfileVersion;
  j["method"] = method;
  if (!model.empty()) j["model"] = model;
  if (!model_sha256.empty()) j["model_sha256"] = model_sha256;
  j["contexts"] = contexts;
  j["n_layers"] = n_layers;
  j["n_kv_heads"] = n_kv_heads;
  j["ratios"] = ratios;
  // [ratios][layers][heads] nested as in the file, rounded to 1e-6.
  auto nested = [&](const std::vector<double>& flat) {
    nlohmann::json by_ratio = nlohmann::json::array();
    size_t i = 0;
    for (size_t r = 0; r < ratios.size(); ++r) {
      nlohmann::json by_layer = nlohmann::json::array();
      for (int l = 0; l < n_layers; ++l) {
        nlohmann::json heads = nlohmann::json::array();
        for (int h = 0; h < n_kv_heads; ++h) heads.push_back(std::round(flat[i++] * 1e6) / 1e6);
        by_layer.push_back(heads);
      }
      by_ratio.push_back(by_layer);
    }
    return by_ratio;
  };
  j["fractions"] = nested(fractions);
  if (spread.size() == fractions.size()) j["spread"] = nested(spread);
  return WriteFileReplacing(path.string(), j.dump(1) + "\n", "budget profile");
}

}  // namespace primekv
