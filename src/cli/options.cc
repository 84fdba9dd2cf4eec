#include "cli/options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <system_error>
#include <thread>

#include "primekv/press/profile_locator.h"
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
          // profile=auto is found from the model, once it is loaded.
          if (UsesAutoProfile(item)) continue;
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

std::string DuplicateInLists(std::span<const std::string> presses, std::span<const double> ratios) {
  std::map<std::string, std::string> canonical;  // canonical text -> as given
  for (const std::string& press : presses) {
    auto spec = ParsePressSpec(press);
    const std::string text = spec.ok() ? spec->Text() : press;
    if (const auto [it, fresh] = canonical.emplace(text, press); !fresh) {
      return "--presses: press " + press + " is listed twice" +
             (it->second != press ? " (also as " + it->second + ")" : "");
    }
  }
  for (size_t i = 0; i < ratios.size(); ++i) {
    for (size_t k = 0; k < i; ++k) {
      if (ratios[k] == ratios[i]) {
        char buf[40];
        std::snprintf(buf, sizeof(buf), "%.17g", ratios[i]);
        return std::string("--ratios: ") + buf + " is listed twice";
      }
    }
  }
  return "";
}

Result<uint64_t> ParseByteSize(std::string_view text) {
  const auto not_a_size = [&] {
    return Status::Error(Quoted(text) + " is not a size (bytes, or a number with K, M, G or T)");
  };
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ptr == text.data() || (ec != std::errc() && ec != std::errc::result_out_of_range))
    return not_a_size();
  std::string_view unit(ptr, static_cast<size_t>(end - ptr));
  int shift = 0;
  if (!unit.empty()) {
    constexpr std::string_view kUnits = "KMGT";
    const size_t at =
        kUnits.find(static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0]))));
    if (at == std::string_view::npos) return not_a_size();
    shift = 10 * static_cast<int>(at + 1);
    unit.remove_prefix(1);
    if (unit != "" && unit != "B" && unit != "iB") return not_a_size();
  }
  if (ec == std::errc::result_out_of_range || v > (std::numeric_limits<uint64_t>::max() >> shift))
    return Status::Error(Quoted(text) + " is larger than 2^64 bytes");
  return v << shift;
}

CLI::Option* AddMemoryLimit(CLI::App& cmd, uint64_t& out) {
  auto* opt = cmd.add_option_function<std::string>(
      "--memory-limit", [&out](const std::string& t) { out = ParseByteSize(t).value(); },
      "Refuse up front a run whose KV cache and buffers need more than SIZE bytes (K, M, G, T "
      "suffixes; default: the machine's memory)");
  opt->check(MakeValidator([](const std::string& t) { return ParseByteSize(t).status(); }, "SIZE"));
  return opt;
}

MachineMemory ReadMachineMemory() {
  MachineMemory m;
  uint64_t available = 0, swap_free = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    const auto field = [&](std::string_view key, uint64_t& out) {
      if (line.rfind(key, 0) == 0)
        out = std::strtoull(line.c_str() + key.size(), nullptr, 10) * 1024;
    };
    field("MemTotal:", m.total);  // kB
    field("MemAvailable:", available);
    field("SwapFree:", swap_free);
  }
  m.available = available + swap_free;
  // cgroup v2's limit of this process's group ("max" when there is none) and its usage.
  std::ifstream max_file("/sys/fs/cgroup/memory.max"),
      current_file("/sys/fs/cgroup/memory.current");
  std::string max, current;
  if (max_file >> max && max != "max") {
    const auto limit = ParseUnsigned(max);
    const auto used = current_file >> current ? ParseUnsigned(current) : Result<uint64_t>(0);
    if (limit.ok() && *limit > 0) {
      m.total = m.total == 0 ? *limit : std::min(m.total, *limit);
      const uint64_t left = used.ok() && *used < *limit ? *limit - *used : 0;
      m.available = m.available == 0 ? left : std::min(m.available, left);
    }
  }
  if (m.total != 0 && m.available > m.total) m.available = m.total;
  return m;
}

uint64_t KvCacheBytes(const ModelConfig& config, KvDType dtype, int64_t tokens) {
  const KvCacheOptions options;
  const auto page = static_cast<uint64_t>(options.page_tokens);
  const uint64_t pages = (static_cast<uint64_t>(std::max<int64_t>(tokens, 0)) + page - 1) / page;
  const uint64_t entry = 2 * KvRowBytes(dtype, config.head_dim) + sizeof(int32_t);
  return pages * page * entry * static_cast<uint64_t>(config.n_layers) *
         static_cast<uint64_t>(config.n_kv_heads);
}

namespace {

std::string Gigabytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

}  // namespace

Status CheckMemoryFits(int64_t tokens, uint64_t kv_bytes, uint64_t buffer_bytes, uint64_t limit) {
  const MachineMemory machine = limit == 0 ? ReadMachineMemory() : MachineMemory{};
  const uint64_t cap = limit != 0 ? limit : machine.available;
  const uint64_t need = kv_bytes + buffer_bytes;
  if (cap == 0 || need <= cap) return Status::Ok();
  const std::string what = buffer_bytes == 0
                               ? "the KV cache of " + std::to_string(tokens) +
                                     " tokens needs at least " + Gigabytes(need)
                               : "the KV cache of " + std::to_string(tokens) + " tokens (" +
                                     Gigabytes(kv_bytes) + ") and buffers (" +
                                     Gigabytes(buffer_bytes) + ") need at least " + Gigabytes(need);
  const std::string than = limit != 0 ? "--memory-limit " + Gigabytes(limit)
                                      : "the " + Gigabytes(machine.available) +
                                            " of memory available (of " + Gigabytes(machine.total) +
                                            " on this machine)";
  return Status::Error(what + ", more than " + than +
                       "; use a smaller context (-c) or fewer tokens" +
                       (limit != 0 ? ", or raise --memory-limit" : ""));
}

}  // namespace primekv::cli
