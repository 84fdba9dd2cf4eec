// A per-model budget profile: the share of its entries each layer's KV head keeps at each
// compression ratio, measured once per model (`primekv calibrate`, from KVzip's one-threshold
// selections over calibration contexts). A press with `profile=FILE` keeps, in head (l, h),
// that share of the tokens seen, and ranks the head's entries with its own scores: KVzip's
// allocation over layers and heads without KVzip's second pass. A profile belongs to the model
// it was measured on (docs/results.md §8).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/util/status.h"

namespace primekv {

class Model;

// A profile file's size limit: a profile of 19 ratios for 128 layers x 64 KV heads, with its
// spread, is under 5 MiB; parsing a larger file costs seconds and gigabytes before it could be
// refused.
inline constexpr uint64_t kMaxBudgetProfileBytes = uint64_t{8} << 20;

// The file format's version ("format_version"): 2 adds model_sha256 and the field itself; a
// file without it is version 1 (same fields otherwise). A newer version is refused: its fields
// may mean what this build cannot tell.
inline constexpr int kBudgetProfileVersion = 2;

struct BudgetProfile {
  std::vector<double> ratios;  // ascending, in (0, 1)
  int n_layers = 0;
  int n_kv_heads = 0;
  std::vector<double> fractions;  // [ratios][layers][heads], each in [0, 1]
  // Standard deviation of each share over the calibration contexts (same shape; empty when not
  // recorded): how much a head's need depends on the input rather than on the weights.
  std::vector<double> spread;
  int contexts = 0;    // calibration contexts it averages
  std::string method;  // what made it ("kvzip")
  // Model::Identity() of the model it was measured on; empty in files written before it was
  // recorded, which are matched on their shape alone.
  std::string model;
  // SHA-256 of the model file it was measured on (the cache key of `primekv calibrate`); empty
  // in version 1 files. Recorded, not matched: another quantization of the same weights shares
  // the profile (`model` is what is matched).
  std::string model_sha256;
  int version = kBudgetProfileVersion;  // of the file it was read from

  double At(size_t r, int layer, int head) const {
    return fractions[(r * static_cast<size_t>(n_layers) + static_cast<size_t>(layer)) *
                         static_cast<size_t>(n_kv_heads) +
                     static_cast<size_t>(head)];
  }
  // The share head (layer, head) keeps at `ratio`: linear between the measured ratios, and
  // (1 - ratio) times the uniform-normalised shape of the nearest end outside them.
  double Fraction(double ratio, int layer, int head) const;
  // Entries head (layer, head) keeps when `seen` tokens were seen at `ratio`: at least one.
  int Keep(int seen, double ratio, int layer, int head) const;
  // This profile nested below `need_ratio` (press parameter nest=): at every measured ratio
  // below it each head keeps max(its share at need_ratio, w), with the one level w that spends
  // that ratio's budget (water-filling; linear between the measured ratios as before). A head's
  // entries are ranked by a fixed score, so a lower ratio then keeps a superset of what
  // need_ratio keeps in every head, and the budget beyond those needs raises the smallest shares
  // first, toward the uniform one, instead of following the calibration's threshold
  // (docs/design.md §3). Ratios at and above need_ratio are unchanged; `spread` is dropped (it
  // no longer applies). need_ratio should lie within the measured ratios (the press checks).
  BudgetProfile NestedBelow(double need_ratio) const;

  // A regular file of at most kMaxBudgetProfileBytes (a FIFO or device is refused unread).
  static Result<BudgetProfile> Load(const std::filesystem::path& path);
  // The JSON text of a profile file; `what` names it in errors.
  static Result<BudgetProfile> Parse(std::string_view text, const std::string& what);
  // Written as WriteFileReplacing does: never through a link, never half a file.
  Status Save(const std::filesystem::path& path) const;
  // The profile applies to `model`: the same layers and KV heads, and, when it records one, the
  // same Model::Identity().
  Status CheckModel(const Model& model) const;
  // Shape and values consistent (every ratio's shares average to about 1 - ratio).
  Status Validate() const;
};

}  // namespace primekv
