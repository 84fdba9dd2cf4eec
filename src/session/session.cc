#include "primekv/session/session.h"

#include <algorithm>
#include <string>

namespace primekv {

namespace {

constexpr std::pair<ScheduleMode, std::string_view> kScheduleModeNames[] = {
    {ScheduleMode::kContext, "context"},
    {ScheduleMode::kMultiTurn, "multiturn"},
    {ScheduleMode::kChunked, "chunked"},
    {ScheduleMode::kDecode, "decode"},
};

}  // namespace

std::optional<ScheduleMode> ParseScheduleMode(std::string_view s) {
  if (s == "multi-turn") return ScheduleMode::kMultiTurn;
  for (const auto& [mode, name] : kScheduleModeNames) {
    if (s == name) return mode;
  }
  return std::nullopt;
}

std::string_view ScheduleModeName(ScheduleMode m) {
  for (const auto& [mode, name] : kScheduleModeNames) {
    if (m == mode) return name;
  }
  return "?";
}

Status CheckPipelinePress(const Press& press) {
  if (press.scorer && press.scorer->Needs().future_queries) {
    return Status::Error("press " + press.name +
                         " reads the true future queries, so it runs only under the fidelity "
                         "protocol (primekv fidelity)");
  }
  return Status::Ok();
}

Status CheckSchedule(const Press& press, const Schedule& schedule) {
  PRIMEKV_RETURN_IF_ERROR(CheckPipelinePress(press));
  const ScheduleMode mode = schedule.mode;
  if (press.scorer && press.scorer->Needs().reconstruction && schedule.ratio > 0 &&
      mode != ScheduleMode::kContext) {
    return Status::Error("press " + press.name +
                         " scores the whole context by a pass that repeats it, so it compresses "
                         "once after the prefill: use --mode context, question or "
                         "first-question, not " +
                         std::string(ScheduleModeName(mode)));
  }
  if (mode == ScheduleMode::kChunked && !press.query_free) {
    return Status::Error(
        "press " + press.name +
        " reads queries, so it cannot compress during chunked prefill; use a query-free press");
  }
  return Status::Ok();
}

}  // namespace primekv
