// `primekv convert`'s input: a JSON manifest listing GGUF metadata and F32 tensors stored in a
// raw little-endian blob (tools/train writes both). Parsing checks everything the GGUF writer and
// reader need, so convert never aborts and never writes a file its own reader rejects.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/gguf/gguf.h"
#include "primekv/util/status.h"

namespace primekv::cli {

struct ManifestTensor {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] fastest, 1..4 dims, each >= 1
  uint64_t offset = 0;      // byte offset of the first float in the blob
  uint64_t n_elements = 0;
};

struct Manifest {
  std::string data_file = "tensors.bin";  // relative to the manifest's folder
  std::vector<GgufKv> metadata;
  std::vector<ManifestTensor> tensors;
};

// Largest tensor convert accepts, in elements.
inline constexpr uint64_t kManifestMaxElements = uint64_t{1} << 34;
// general.alignment above this is refused (the padding would be absurd).
inline constexpr uint64_t kManifestMaxAlignment = uint64_t{1} << 16;

// Errors start with `name` and say which entry and field is wrong.
Result<Manifest> ParseManifest(std::string_view json_text, const std::string& name);

// Fills `out` with the floats at byte `offset` of the blob (the range is checked beforehand).
using BlobReader = std::function<Status(uint64_t offset, std::span<float> out)>;
// Converts matrices whose rows fit `type`'s blocks to `type` (vectors stay F32) and returns a
// writer that passes Validate(); the tensors' bytes are made from `read` (copied into the
// writer, so what it captures must outlive it) when the writer writes. Refuses a type that no
// matrix can take; `note`, when given, names the matrices that stay F32.
Result<GgufWriter> BuildGguf(const Manifest& manifest, GgmlType type, uint64_t blob_bytes,
                             const BlobReader& read, std::string* note = nullptr);

}  // namespace primekv::cli
