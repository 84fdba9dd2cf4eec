// Factories of the scorers, one per file; registry.cc is the only caller.
#pragma once

#include <memory>

#include "primekv/press/press.h"

namespace primekv::press_internal {

using ScorerResult = Result<std::unique_ptr<Scorer>>;
ScorerResult MakeRandomScorer(const PressParams& p, const std::string& press);
ScorerResult MakeKnormScorer(const PressParams& p, const std::string& press);
ScorerResult MakeStreamingLlmScorer(const PressParams& p, const std::string& press);
ScorerResult MakeKeyDiffScorer(const PressParams& p, const std::string& press);
ScorerResult MakeLagKvScorer(const PressParams& p, const std::string& press);
ScorerResult MakeSnapKvScorer(const PressParams& p,
                              const std::string& press);  // also PyramidKV's scores
ScorerResult MakeTovaScorer(const PressParams& p, const std::string& press);
ScorerResult MakeExpectedAttentionScorer(const PressParams& p, const std::string& press);
ScorerResult MakePrimeKvScorer(const PressParams& p, const std::string& press);
ScorerResult MakeOracleScorer(const PressParams& p, const std::string& press);
ScorerResult MakeCurDkvScorer(const PressParams& p, const std::string& press);
ScorerResult MakeKvzipScorer(const PressParams& p, const std::string& press);
ScorerResult MakeLookbackScorer(const PressParams& p, const std::string& press);

}  // namespace primekv::press_internal
