#include "cli/options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <system_error>
#include <thread>

#include "primekv/press/press.h"

namespace primekv::cli {

namespace {

std::string Quoted(std::string_view text) { return "'" + Printable(text, 40) + "'"; }

std::string FormatReal(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// Wraps a Result-returning check as a CLI11 validator (an empty string means valid).
template <typename Fn>
CLI::Validator MakeValidator(Fn fn, std::string description) {
  return CLI::Validator(
      [fn](std::string& text) -> std::string {
        Status s = fn(text);
        return s.ok() ? std::string() : s.message();
      },
      std::move(description));
}

}  // namespace

Result<int64_t> ParseInteger(std::string_view text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    return Status::Error(Quoted(text) + " is not an integer");
  }
  if (ec == std::errc::result_out_of_range || v < lo || v > hi) {
    return Status::Error(Quoted(text) + " is outside [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "]");
  }
  return v;
}

Result<uint64_t> ParseUnsigned(std::string_view text) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  if (!text.empty() && text[0] == '-') {
    return Status::Error(Quoted(text) + " is negative (give 0 to 18446744073709551615)");
  }
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    return Status::Error(Quoted(text) + " is not an integer");
  }
  if (ec == std::errc::result_out_of_range) {
    return Status::Error(Quoted(text) + " is larger than 18446744073709551615");
  }
  return v;
}

Result<double> ParseReal(std::string_view text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ptr != end || ec != std::errc()) {
    return Status::Error(Quoted(text) + " is not a finite number");
  }
  if (!std::isfinite(v)) return Status::Error(Quoted(text) + " is not a finite number");
  return v;
}

CLI::Validator IntegerIn(int64_t lo, int64_t hi) {
  return MakeValidator([lo, hi](const std::string& t) { return ParseInteger(t, lo, hi).status(); },
                       "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

CLI::Validator Seed() {
  return MakeValidator([](const std::string& t) { return ParseUnsigned(t).status(); }, "UINT64");
}

namespace {

CLI::Validator RealValidator(double lo, double hi, bool lo_open, bool hi_open, bool as_float) {
  const std::string range = std::string(lo_open ? "(" : "[") + FormatReal(lo) + ", " +
                            FormatReal(hi) + (hi_open ? ")" : "]");
  return MakeValidator(
      [=](const std::string& t) -> Status {
        auto v = ParseReal(t);
        if (!v.ok()) return v.status();
        const auto outside = [&](double x) {
          return (lo_open ? !(x > lo) : !(x >= lo)) || (hi_open ? !(x < hi) : !(x <= hi));
        };
        if (outside(*v)) return Status::Error(Quoted(t) + " is outside " + range);
        if (as_float) {
          const auto f = static_cast<float>(*v);
          if (!std::isfinite(f) || outside(f)) {
            return Status::Error(Quoted(t) + " is " + FormatReal(f) + " as a float, outside " +
                                 range);
          }
        }
        return Status::Ok();
      },
      "REAL in " + range);
}

}  // namespace

CLI::Validator RealIn(double lo, double hi, bool lo_open, bool hi_open) {
  return RealValidator(lo, hi, lo_open, hi_open, /*as_float=*/false);
}

CLI::Validator FloatIn(double lo, double hi, bool lo_open, bool hi_open) {
  return RealValidator(lo, hi, lo_open, hi_open, /*as_float=*/true);
}

int MaxThreads() {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::min(4u * hw, 4096u));
}

CLI::Validator Threads() {
  return MakeValidator(
      [](const std::string& t) -> Status {
        auto v = ParseInteger(t, 0, std::numeric_limits<int64_t>::max());
        if (!v.ok()) return v.status();
        if (*v > MaxThreads()) {
          return Status::Error(Quoted(t) + " is more than " + std::to_string(MaxThreads()) +
                               " (4 x the hardware threads; 0 means all cores)");
        }
        return Status::Ok();
      },
      "INT in [0, " + std::to_string(MaxThreads()) + "]");
}

CLI::Validator OneOf(std::initializer_list<std::string_view> words) {
  std::vector<std::string> list(words.begin(), words.end());
  std::string joined;
  for (const auto& w : list) joined += (joined.empty() ? "" : " | ") + w;
  return MakeValidator(
      [list, joined](const std::string& t) -> Status {
        for (const auto& w : list)
          if (t == w) return Status::Ok();
        return Status::Error(Quoted(t) + " is not one of " + joined);
      },
      joined);
}

CLI::Validator PressList(bool single) {
  return MakeValidator(
      [single](const std::string& t) -> Status {
        auto items = SplitPressList(t);
        if (!items.ok()) return items.status();
        if (single && items->size() != 1) {
          return Status::Error(Quoted(t) + " lists " + std::to_string(items->size()) +
                               " presses; give one");
        }
        for (const std::string& item : *items) {
          auto spec = ParsePressSpec(item);
          if (!spec.ok()) return spec.status();
          auto press = MakePress(*spec);
          if (!press.ok()) return press.status();
        }
        return Status::Ok();
      },
      single ? "PRESS" : "PRESS[;PRESS...]");
}

CLI::Option* AddKvType(CLI::App& cmd, KvDType& out) {
  auto* opt = cmd.add_option_function<std::string>(
      "--kv-type",
      [&out](const std::string& t) {
        out = t == "f32" ? KvDType::kF32 : (t == "q8_0" ? KvDType::kQ8_0 : KvDType::kF16);
      },
      std::string("KV storage: f16 | f32 | q8_0 (default ") + KvDTypeName(out) +
          "; q8_0: ggml's 8-bit blocks, 53% of f16's bytes, head_dim a multiple of 32)");
  opt->check(OneOf({"f16", "f32", "q8_0"}));
  return opt;
}

CLI::Option* AddNoMmap(CLI::App& cmd, WeightMemory& out) {
  return cmd.add_flag_callback(
      "--no-mmap", [&out] { out = WeightMemory::kCopied; },
      "Read the weights into memory instead of mapping the file: a longer load, and on some "
      "virtual machines a faster decode (docs/performance.md)");
}

Status CheckTextFitsContext(uint64_t bytes, int ctx_size, size_t max_token_bytes,
                            std::string_view what) {
  if (bytes <= static_cast<uint64_t>(ctx_size) * max_token_bytes) return Status::Ok();
  return Status::Error(std::string(what) + ": " + std::to_string(bytes) +
                       " bytes of text cannot fit the context size of " + std::to_string(ctx_size) +
                       " tokens (a token of this vocabulary covers at most " +
                       std::to_string(max_token_bytes) + " bytes)");
}

}  // namespace primekv::cli
