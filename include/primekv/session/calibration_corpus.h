// The built-in calibration corpus of `primekv calibrate` (no task file): contexts written from
// the model's own tokenizer, so any model can be calibrated without data. What KVzip's
// allocation needs from a context is entries that some head must look up to repeat it
// (docs/design.md §3): the corpus mixes key-value facts that are asked for again later, spans
// repeated verbatim, lists and a prose-like filler of word pieces, none of them predictable
// from their neighbours.
#pragma once

#include <cstdint>
#include <vector>

#include "primekv/tokenizer/tokenizer.h"
#include "primekv/util/status.h"

namespace primekv {

struct CorpusOptions {
  int contexts = 32;
  // Token lengths, BOS included: spread evenly from min_length to max_length.
  int min_length = 512;
  int max_length = 1024;
  uint64_t seed = 68;
};

// Deterministic for a tokenizer and options. Refused when the vocabulary has too few
// word-like pieces (fewer than 64) to write from.
Result<std::vector<std::vector<Token>>> BuiltInCalibrationCorpus(const Tokenizer& tokenizer,
                                                                 const CorpusOptions& options);

}  // namespace primekv
