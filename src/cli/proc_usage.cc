#include "cli/proc_usage.h"

#include <sys/resource.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace primekv::cli {

double PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;  // Linux reports KiB
}

double CurrentRssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) * 1024.0;
  }
  return 0;
}

std::optional<CpuTicks> ReadCpuTicks() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  // user nice system idle iowait irq softirq steal (guest time is counted in user already).
  uint64_t v[8] = {};
  if (!(f >> cpu) || cpu != "cpu") return std::nullopt;
  for (uint64_t& x : v) {
    if (!(f >> x)) return std::nullopt;
  }
  CpuTicks t;
  t.steal = v[7];
  for (uint64_t x : v) t.total += x;
  return t;
}

double StealShare(const std::optional<CpuTicks>& a, const std::optional<CpuTicks>& b) {
  if (!a || !b || b->total <= a->total) return -1;
  return static_cast<double>(b->steal - a->steal) / static_cast<double>(b->total - a->total);
}

}  // namespace primekv::cli
