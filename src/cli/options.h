// Command-line value checks shared by every subcommand. Each check is a CLI11 validator, so a bad
// value is a usage error: main prints "primekv: --option: why" on one line and exits 2.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/gguf/gguf.h"
#include "primekv/kv/kv_cache.h"
#include "primekv/model/model.h"
#include "primekv/util/file_io.h"
#include "primekv/util/status.h"
#include "primekv/util/text.h"

namespace primekv::cli {

// Strict parsers behind the validators (exposed for tests): decimal digits with an optional
// leading '-', nothing else; reals must be finite. Messages quote the text, escaped.
Result<int64_t> ParseInteger(std::string_view text, int64_t lo, int64_t hi);
Result<uint64_t> ParseUnsigned(std::string_view text);
Result<double> ParseReal(std::string_view text);

// An integer in [lo, hi].
CLI::Validator IntegerIn(int64_t lo, int64_t hi);
// A seed: any integer in [0, 2^64 - 1].
CLI::Validator Seed();
// A finite real in [lo, hi] (or (lo, hi) ends when open).
CLI::Validator RealIn(double lo, double hi, bool lo_open = false, bool hi_open = false);
// RealIn for a value stored as float: the bounds hold for the value rounded to float too, so
// "--top-p 1e-50" (0 as a float) is refused with the rest, not after the prefill.
CLI::Validator FloatIn(double lo, double hi, bool lo_open = false, bool hi_open = false);
// Threads: 0 (= all cores) up to MaxThreads().
CLI::Validator Threads();
int MaxThreads();  // 4 x the hardware threads
// One of the given words.
CLI::Validator OneOf(std::initializer_list<std::string_view> words);
// A press list ("a;b:k=v,k2=v2" or "a,b:k=v,k2=v2", see SplitPressList) whose every press exists
// and takes the given parameters; `single` demands exactly one press.
CLI::Validator PressList(bool single);

// Adds --kv-type (f16 | f32) writing into `out`; `out` holds the default.
CLI::Option* AddKvType(CLI::App& cmd, KvDType& out);

// Adds --no-mmap, which sets `out` to WeightMemory::kCopied (primekv/gguf/gguf.h).
CLI::Option* AddNoMmap(CLI::App& cmd, WeightMemory& out);

// Refuses, before tokenizing it, `bytes` of text that cannot fit `ctx_size` tokens however it
// tokenizes (no token covers more than `max_token_bytes`, Tokenizer::MaxTokenBytes()): a 50 MB
// input must not cost minutes and gigabytes only to be refused after. `what` names the input.
Status CheckTextFitsContext(uint64_t bytes, int ctx_size, size_t max_token_bytes,
                            std::string_view what);

// A press or ratio given twice in a flattened --presses / --ratios list (every row would be
// measured twice): the one-line usage message naming the list ("--presses: press X is listed
// twice (also as Y)", presses compared by their canonical text), or "" when there is none.
std::string DuplicateInLists(std::span<const std::string> presses, std::span<const double> ratios);

// --memory-limit SIZE: bytes, or a number with K, M, G or T (powers of 1024, "GiB" and "GB"
// alike); 0 = the machine's memory.
Result<uint64_t> ParseByteSize(std::string_view text);
CLI::Option* AddMemoryLimit(CLI::App& cmd, uint64_t& out);

// The machine's memory: /proc/meminfo's MemTotal, and what is available now (MemAvailable plus
// free swap), each bounded by the cgroup's memory.max (less its usage); 0 where unknown.
struct MachineMemory {
  uint64_t total = 0, available = 0;
};
MachineMemory ReadMachineMemory();

// Bytes of a KV cache holding `tokens` entries in every (layer, KV head), in whole pages.
uint64_t KvCacheBytes(const ModelConfig& config, KvDType dtype, int64_t tokens);

// Refuses in milliseconds a run whose KV cache (`kv_bytes` for `tokens` tokens) and buffers
// cannot fit in --memory-limit (`limit`, 0 = none) or the memory available now, before anything
// is allocated: a context of 2^24 tokens past the model's own used to climb for minutes to "out of
// memory". A lower bound (weights and small buffers are not counted), so it never refuses a run
// that would fit.
Status CheckMemoryFits(int64_t tokens, uint64_t kv_bytes, uint64_t buffer_bytes, uint64_t limit);

// Reads a whole input file, capped at kMaxInputBytes (primekv/util/file_io.h has the messages).
using ::primekv::FileSource;
inline Result<std::string> ReadInputFile(const std::string& path, std::string_view what,
                                         FileSource source = FileSource::kRegular,
                                         uint64_t max_bytes = kMaxInputBytes) {
  return ReadFileCapped(path, what, source, max_bytes);
}

}  // namespace primekv::cli
