#include "primekv/model/sampler.h"

#include <algorithm>
#include <cmath>

namespace primekv {

Token Argmax(std::span<const float> logits) {
  Token best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<Token>(i);
  }
  return best;
}

Status ValidateSamplerOptions(const SamplerOptions& o) {
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    return Status::Error("sampler: temperature must be finite and >= 0");
  if (o.top_k < 0) return Status::Error("sampler: top_k must be >= 0");
  if (!(o.top_p > 0 && o.top_p <= 1)) return Status::Error("sampler: top_p must be in (0, 1]");
  return Status::Ok();
}

Sampler::Sampler(SamplerOptions options)
    : options_(options), options_status_(ValidateSamplerOptions(options)), rng_(options.seed) {}

Result<Token> Sampler::Sample(std::span<const float> logits) {
  if (!options_status_.ok()) return options_status_;
  if (logits.empty()) return Status::Error("sampler: no logits");
  for (const float x : logits) {
    if (!std::isfinite(x)) {
      return Status::Error(
          "the model produced non-finite logits (NaN or infinity): its weights or activations "
          "overflow; refusing to sample");
    }
  }
  if (options_.temperature <= 0) return Argmax(logits);
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    candidates_.emplace_back(logits[i], static_cast<Token>(i));
  }
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t k = candidates_.size();
  if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < k) {
    k = static_cast<size_t>(options_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(k),
                      candidates_.end(), by_logit);
    candidates_.resize(k);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  // Softmax at temperature over the survivors, then the nucleus.
  const float mx = candidates_.front().first;
  double total = 0;
  for (auto& c : candidates_) {
    c.first = static_cast<float>(std::exp((c.first - mx) / options_.temperature));
    total += c.first;
  }
  size_t keep = candidates_.size();
  if (options_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cum += candidates_[i].first / total;
      if (cum >= options_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += candidates_[i].first;
  std::uniform_real_distribution<double> u(0.0, mass);
  double r = u(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= candidates_[i].first;
    if (r <= 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace primekv
