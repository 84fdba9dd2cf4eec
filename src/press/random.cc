// RandomPress (kvpress presses/random_press.py): i.i.d. uniform scores, the floor every method
// must beat. Seeded per (seed, layer, head) so runs repeat.
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class RandomScorer : public HeadScorer {
  uint64_t seed_;

 public:
  explicit RandomScorer(ParamReader& r)
      : seed_(static_cast<uint64_t>(r.Integer64("seed", 42, 0, INT64_MAX))) {}

  // SplitMix64 from a state mixed of (seed, layer, head); the top 24 bits give a float.
  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    uint64_t state = seed_ * 0x9E3779B97F4A7C15ull +
                     static_cast<uint64_t>(in.layer) * 0x100000001B3ull +
                     static_cast<uint64_t>(h) * 0xC2B2AE3D27D4EB4Full;
    for (float& x : s) {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      x = static_cast<float>(static_cast<double>((z ^ (z >> 31)) >> 40) * 0x1.0p-24);
    }
  }
};

}  // namespace

ScorerResult MakeRandomScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<RandomScorer>(p, press);
}

}  // namespace primekv::press_internal
