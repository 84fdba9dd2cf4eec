// How `primekv bench` brings a KV cache to a depth before it times decoding: with synthetic
// rows or a real prefill, compressed by a Conversation (session/conversation.h) under its
// schedule: once at the end (context) or after every chunk by its chunk rule (chunked;
// docs/design.md §4).
#pragma once

#include <cstddef>
#include <functional>
#include <random>

#include "primekv/model/model.h"
#include "primekv/press/compressor.h"
#include "primekv/session/session.h"

namespace primekv::cli {

enum class FillSource {
  kSynthetic,  // N(0, 1) rows appended to every layer: the decode step reads the same bytes
  kPrefill,    // real forward passes over random tokens
};

struct DepthFillOptions {
  FillSource source = FillSource::kSynthetic;
  // kContext (the whole depth, then one compression to the ratio) or kChunked (after each chunk
  // every head over KeepCount(so far) is cut); ubatch is the prefill micro-batch (a chunk
  // larger than it is prefilled in micro-batches).
  Schedule schedule{.ubatch = 512};
};

struct DepthFillStats {
  double kept_fraction = 1.0;    // entries left / entries filled
  size_t kv_bytes_peak = 0;      // largest BytesInUse() seen, before any compression
  size_t kv_allocated_peak = 0;  // largest BytesAllocated() seen (pool pages, free ones too)
  size_t workspace_peak = 0;     // largest forward buffers (a piece's activations) seen
  int compressions = 0;
  double score_ms = 0;  // scoring and selection of every compression
};

// Fills `cache` (cleared first) with `depth` entries per head and compresses them with
// `compressor` as the options say (nothing is compressed when the press is "none" or the ratio
// is 0). `after_chunk(tokens so far, the cache)` runs after each chunk and its compression, so tests
// can watch the cache. Chunked mode needs a query-free press: nothing captures queries here.
Status FillDepth(const Model& model, const Compressor& compressor, const DepthFillOptions& options,
                 int depth, KvCache& cache, ThreadPool& pool, ForwardWorkspace& ws,
                 std::mt19937_64& rng, DepthFillStats* stats = nullptr,
                 const std::function<void(int, const KvCache&)>& after_chunk = {});

}  // namespace primekv::cli
