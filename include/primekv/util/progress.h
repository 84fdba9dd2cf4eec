// A one-line progress bar with ETA on stderr, redrawn at most every 200 ms.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace primekv {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, bool enabled = true)
      : label_(std::move(label)),
        total_(total),
        enabled_(enabled),
        start_(Clock::now()),
        last_(start_) {}

  void Update(int64_t done) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (done < total_ && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double frac = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    const double eta = done > 0 ? elapsed * (1.0 - frac) / frac : 0.0;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r%s [%s] %lld/%lld %3.0f%%  %s elapsed, ETA %s   ", label_.c_str(),
                 bar.c_str(), static_cast<long long>(done), static_cast<long long>(total_),
                 100.0 * frac, Format(elapsed).c_str(), Format(eta).c_str());
    if (done >= total_) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static std::string Format(double s) {
    char buf[32];
    const long t = static_cast<long>(s + 0.5);
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    return buf;
  }
  std::string label_;
  int64_t total_;
  bool enabled_;
  Clock::time_point start_, last_;
};

}  // namespace primekv
