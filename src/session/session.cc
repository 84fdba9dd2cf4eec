#include "primekv/session/session.h"

#include <algorithm>
#include <string>

namespace primekv {

namespace {

struct ModeName {
  CompressionMode mode;
  std::string_view name;
  ScheduleMode schedule;  // what the conversation runs under it
  bool schedules;         // whether the mode is one of a conversation's own schedules
};

constexpr ModeName kModes[] = {
    {CompressionMode::kContext, "context", ScheduleMode::kContext, true},
    {CompressionMode::kQuestion, "question", ScheduleMode::kContext, false},
    {CompressionMode::kMultiTurn, "multiturn", ScheduleMode::kMultiTurn, true},
    {CompressionMode::kChunked, "chunked", ScheduleMode::kChunked, true},
    {CompressionMode::kDecode, "decode", ScheduleMode::kDecode, true},
    {CompressionMode::kFirstQuestion, "first-question", ScheduleMode::kContext, false},
};

const ModeName* Named(std::string_view s) {
  if (s == "multi-turn") s = "multiturn";
  for (const ModeName& m : kModes)
    if (s == m.name) return &m;
  return nullptr;
}

}  // namespace

std::optional<CompressionMode> ParseCompressionMode(std::string_view s) {
  const ModeName* m = Named(s);
  return m ? std::optional(m->mode) : std::nullopt;
}

std::string_view CompressionModeName(CompressionMode mode) {
  for (const ModeName& m : kModes)
    if (m.mode == mode) return m.name;
  return "?";
}

ScheduleMode ScheduleModeOf(CompressionMode mode) {
  for (const ModeName& m : kModes)
    if (m.mode == mode) return m.schedule;
  return ScheduleMode::kContext;
}

std::optional<ScheduleMode> ParseScheduleMode(std::string_view s) {
  const ModeName* m = Named(s);
  return m && m->schedules ? std::optional(m->schedule) : std::nullopt;
}

std::string_view ScheduleModeName(ScheduleMode mode) {
  for (const ModeName& m : kModes)
    if (m.schedules && m.schedule == mode) return m.name;
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
