#include "gguf/layout.h"

#include <limits>
#include <string>

namespace primekv::gguf_internal {

std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<uint64_t> AlignUp(uint64_t x, uint64_t alignment) {
  std::optional<uint64_t> sum = CheckedAdd(x, alignment - 1);
  if (!sum) return std::nullopt;
  return *sum & ~(alignment - 1);
}

Result<TensorSize> SizeTensor(GgmlType type, std::span<const int64_t> ne) {
  std::optional<GgmlTypeInfo> info = TypeInfo(type);
  if (!info) {
    return Status::Error("unknown ggml type id " + std::to_string(static_cast<uint32_t>(type)));
  }
  if (ne.empty() || ne.size() > static_cast<size_t>(kMaxDims)) {
    return Status::Error("n_dims " + std::to_string(ne.size()) + " is outside 1.." +
                         std::to_string(kMaxDims));
  }
  // Signed limits keep n_elements and n_bytes usable as int64 and size_t downstream.
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t n_elements = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] <= 0) {
      return Status::Error("dimension " + std::to_string(d) + " is " + std::to_string(ne[d]) +
                           " (must be positive)");
    }
    std::optional<uint64_t> product = CheckedMul(n_elements, static_cast<uint64_t>(ne[d]));
    if (!product || *product > kMax) return Status::Error("element count overflows int64");
    n_elements = *product;
  }
  const auto block = static_cast<uint64_t>(info->block_size);
  if (static_cast<uint64_t>(ne[0]) % block != 0) {
    return Status::Error("ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " +
                         std::string(info->name) + " block size " + std::to_string(block));
  }
  std::optional<uint64_t> n_bytes = CheckedMul(n_elements / block, info->block_bytes);
  if (!n_bytes || *n_bytes > kMax) return Status::Error("byte size overflows int64");
  return TensorSize{n_elements, *n_bytes};
}

}  // namespace primekv::gguf_internal
