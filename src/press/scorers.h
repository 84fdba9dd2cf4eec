// Factories of the scorers, one per file; registry.cc is the only caller.
#pragma once

#include <memory>

#include "primekv/press.h"

namespace primekv::press_internal {

using ScorerResult = Result<std::unique_ptr<Scorer>>;
ScorerResult MakeRandomScorer(const PressParams& p);
ScorerResult MakeKnormScorer(const PressParams& p);
ScorerResult MakeStreamingLlmScorer(const PressParams& p);
ScorerResult MakeKeyDiffScorer(const PressParams& p);
ScorerResult MakeLagKvScorer(const PressParams& p);
ScorerResult MakeSnapKvScorer(const PressParams& p);  // also PyramidKV's scores
ScorerResult MakeTovaScorer(const PressParams& p);
ScorerResult MakeExpectedAttentionScorer(const PressParams& p);
ScorerResult MakePrimeKvScorer(const PressParams& p);
ScorerResult MakeOracleScorer(const PressParams& p);
ScorerResult MakeCurDkvScorer(const PressParams& p);

}  // namespace primekv::press_internal
