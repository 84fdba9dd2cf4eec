// What this process and the machine's CPUs have used, read from Linux (getrusage, /proc):
// `primekv bench` reports the peak RSS against its budget and the CPU steal over each test.
#pragma once

#include <cstdint>
#include <optional>

namespace primekv::cli {

// The most resident memory this process has held, in bytes (getrusage).
double PeakRssBytes();
// VmRSS now, from /proc/self/status (0 where it cannot be read).
double CurrentRssBytes();

// Cumulative CPU time of all CPUs, in clock ticks, and the part of it stolen by the hypervisor.
struct CpuTicks {
  uint64_t steal = 0, total = 0;
};
// The first line of /proc/stat; nullopt where it cannot be read.
std::optional<CpuTicks> ReadCpuTicks();
// Stolen share of the CPU time between two readings; negative when unknown.
double StealShare(const std::optional<CpuTicks>& a, const std::optional<CpuTicks>& b);

}  // namespace primekv::cli
