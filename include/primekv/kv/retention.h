// Which positions each layer of a KV cache keeps (the role llama.cpp's iswa cache plays): a
// global layer keeps every position, a sliding-window layer only the last `window` ones a query
// can see. The one owner of window arithmetic: what expires as the forward pass goes, whether a
// cut can keep its prefix, what a cache read back from elsewhere no longer holds, and how many
// rows a windowed head can hold while a turn runs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "primekv/kv/kv_cache.h"

namespace primekv {

class KvRetention {
 public:
  // Every layer global.
  KvRetention() = default;
  // layer_windows[l]: layer l's window in positions, 0 for a global layer.
  explicit KvRetention(std::vector<int> layer_windows);

  bool Windowed() const { return windowed_; }
  bool WindowedLayer(int layer) const;
  int Window(int layer) const;

  // The lowest position a query at `query` reads in a layer of this window (0 within the
  // first window).
  static int32_t FirstVisible(int64_t query, int window);

  // Drops the windowed layers' entries no query at cache.NextPosition() or later can see.
  void DropExpired(KvCache& cache) const;
  // Whether every windowed layer still holds what a query at position n reads, so the cache
  // can be cut back to n tokens and continue.
  bool Reaches(const KvCache& cache, int64_t n) const;
  // For a cache made elsewhere (a session file, a store): every position below the first one
  // its windowed layers hold counts as gone (KvCache::ExpiredBelow).
  void NoteHeld(KvCache& cache) const;
  // Per layer, the most entries a head holds while forward passes that drop as they go run:
  // window - 1 + page_tokens in a windowed layer, 0 (no bound) in a global one; empty when no
  // layer is windowed (KvCache::Reserve's layer_rows).
  std::vector<int> TurnRows(int page_tokens) const;
  // A share of `cache` holding its windowed layers only (a rewind point), and the inverse:
  // `cache`'s windowed layers replaced by the point's.
  KvCache WindowedShare(const KvCache& cache) const;
  void RestoreWindowed(KvCache& cache, const KvCache& point) const;

 private:
  std::vector<int> windows_;
  bool windowed_ = false;
};

}  // namespace primekv
