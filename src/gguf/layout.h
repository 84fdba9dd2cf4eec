// Format facts shared by the GGUF reader and writer.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "primekv/ggml_type.h"
#include "primekv/status.h"

namespace primekv::gguf_internal {

inline constexpr uint8_t kMagic[4] = {'G', 'G', 'U', 'F'};
inline constexpr int kMaxDims = 4;
inline constexpr const char* kAlignmentKey = "general.alignment";

inline bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b);
std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b);
// `alignment` must be a power of two.
std::optional<uint64_t> AlignUp(uint64_t x, uint64_t alignment);

struct TensorSize {
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
};
// Validates a shape for `type` (1..4 dims, each >= 1, ne[0] a multiple of the block size, element
// and byte counts that fit in int64) and sizes it. Error messages name the problem, not the tensor.
Result<TensorSize> SizeTensor(GgmlType type, std::span<const int64_t> ne);

}  // namespace primekv::gguf_internal
