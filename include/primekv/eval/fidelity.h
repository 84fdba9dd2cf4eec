// The fidelity protocol of docs/design.md §6: how far a compressed cache moves the model's
// next-token distributions and attention outputs over a known continuation, against the full
// cache, with an oracle row that picks the same budget using the true future queries. An
// evaluation protocol (src/eval/fidelity.cc), above the presses it measures.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/press/press.h"

namespace primekv {

struct FidelityOptions {
  std::vector<std::string> presses;  // registry names; "oracle" allowed here
  std::vector<double> ratios;
  KvCacheOptions kv;
  // Called after each (context, press, ratio) with done/total.
  std::function<void(int done, int total)> progress;
};

struct FidelityRow {
  std::string press;
  double ratio = 0;
  int contexts = 0;
  double kl = 0;    // mean KL(full || compressed) of next-token distributions over T, nats
  double top1 = 0;  // fraction of positions whose argmax agrees
  std::vector<double> layer_error;  // per layer: mean |o_full - o_comp| / |o_full|
  double mean_layer_error() const;
};

// contexts[i] is prefilled, compressed, then continuations[i] is teacher-forced through both the
// full and the compressed cache. One row per (press, ratio), averaged over contexts.
Result<std::vector<FidelityRow>> MeasureFidelity(const Model& model,
                                                 std::span<const std::vector<Token>> contexts,
                                                 std::span<const std::vector<Token>> continuations,
                                                 const FidelityOptions& options, ThreadPool& pool);

}  // namespace primekv
