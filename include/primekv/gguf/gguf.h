// GGUF container: a bounds-checked, memory-mapped reader and a writer.
//
// File layout (versions 2 and 3, little endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | n_dims x u64 ne | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32) | tensor data (offsets relative to here)
// A string is u64 length + bytes (no terminator). An array value is u32 element type + u64 count
// + elements. ne[0] is the fastest-varying dimension.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "primekv/util/dtype.h"
#include "primekv/util/status.h"

namespace primekv {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view GgufTypeName(GgufType t);

// One metadata value. Scalars live in the field matching their type family; arrays hold their
// elements (which may themselves be arrays) in `array`.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  GgufType array_type = GgufType::kUint8;  // element type when type == kArray
  uint64_t u = 0;                          // kUint8/16/32/64, kBool (0/1)
  int64_t i = 0;                           // kInt8/16/32/64
  double f = 0;                            // kFloat32/64
  std::string s;                           // kString
  std::vector<GgufValue> array;            // kArray

  static GgufValue Uint32(uint32_t v);
  static GgufValue Int32(int32_t v);
  static GgufValue Uint64(uint64_t v);
  static GgufValue Float32(float v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  static GgufValue StringArray(const std::vector<std::string>& v);
  static GgufValue Float32Array(const std::vector<float>& v);
  static GgufValue Int32Array(const std::vector<int32_t>& v);
  static GgufValue Uint8(uint8_t v);
  static GgufValue Int8(int8_t v);
  static GgufValue Uint16(uint16_t v);
  static GgufValue Int16(int16_t v);
  static GgufValue Int64(int64_t v);
  static GgufValue Float64(double v);
  // Any element type, including kArray (nested arrays); every element must have that type.
  static GgufValue Array(GgufType element_type, std::vector<GgufValue> elements);

  bool operator==(const GgufValue&) const = default;
};

// Reader limits: longer strings, deeper arrays or bigger counts are reported as corrupt.
inline constexpr uint64_t kGgufMaxStringLength = uint64_t{1} << 30;
inline constexpr int kGgufMaxArrayDepth = 8;
// All metadata array elements of one file together (each is held as a GgufValue in memory).
inline constexpr uint64_t kGgufMaxMetadataElements = uint64_t{1} << 22;
inline constexpr uint32_t kGgufDefaultAlignment = 32;
// The metadata key that sets the data alignment (a u32 power of two), and the most dimensions a
// tensor may have.
inline constexpr const char* kGgufAlignmentKey = "general.alignment";
inline constexpr int kGgufMaxDims = 4;

struct GgufKv {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] fastest
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // relative to the data section, checked against alignment
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
};

// How GgufFile::Open holds a file's bytes. kMapped: a read-only private mapping, paged in on
// demand and shared with the page cache. kCopied: read once into anonymous memory (llama.cpp's
// --no-mmap); the load costs a read of the whole file, and on some virtual machines decode
// streams such memory faster than file pages (docs/performance.md).
enum class WeightMemory { kMapped, kCopied };

class GgufFile {
 public:
  // Opens `path` held as `memory` says; every count, size and offset is checked against the file.
  static Result<GgufFile> Open(const std::filesystem::path& path,
                               WeightMemory memory = WeightMemory::kMapped);
  // Parses bytes owned by the caller, who keeps them alive as long as the GgufFile (fuzzing,
  // tests). Same checks and messages as Open.
  static Result<GgufFile> FromMemory(std::span<const uint8_t> bytes, std::string display_name);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& display_name() const;
  uint32_t version() const;
  uint64_t alignment() const;
  // Absolute byte offset of the tensor data section: the end of the tensor infos rounded up to
  // alignment(). Only a file without tensors may end before it (trailing padding is optional).
  uint64_t data_offset() const;
  uint64_t file_size() const;

  const std::vector<GgufKv>& metadata() const;
  // Frees the parsed metadata (metadata() is empty and every getter finds nothing after it);
  // the tensor table and data stay. A 128k-token vocabulary's arrays are ~34 MB of GgufValues,
  // which a loaded model has copied into its tokenizer.
  void ReleaseMetadata();
  const GgufValue* Find(std::string_view key) const;
  // Typed getters: nullopt when the key is absent or holds another type. Integer getters accept
  // any integer type whose value fits; float getters accept f32 and f64.
  std::optional<int64_t> GetInt(std::string_view key) const;
  std::optional<double> GetFloat(std::string_view key) const;
  std::optional<bool> GetBool(std::string_view key) const;
  std::optional<std::string> GetString(std::string_view key) const;
  std::optional<std::vector<std::string>> GetStringArray(std::string_view key) const;
  std::optional<std::vector<float>> GetFloatArray(std::string_view key) const;
  std::optional<std::vector<int64_t>> GetIntArray(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const;
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The tensor's bytes inside the mapping (already bounds-checked at open).
  std::span<const uint8_t> TensorData(const GgufTensorInfo& info) const;

 private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class GgufWriter {
 public:
  void SetVersion(uint32_t version);      // 2 or 3 (default 3)
  void SetAlignment(uint32_t alignment);  // power of two; also written as general.alignment
  // Replaces an existing key. A u32 power-of-two "general.alignment" acts like SetAlignment; any
  // other value for that key is written verbatim (tests use this to build invalid files).
  void Add(std::string key, GgufValue value);
  // `data` must hold exactly the bytes of `ne` elements of `type`.
  Status AddTensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                   std::vector<uint8_t> data);
  // A tensor whose bytes are produced when the file is written, one tensor at a time, so a
  // writer of many large tensors never holds them all (convert). `fill` receives a span of
  // exactly the tensor's size.
  using TensorFill = std::function<Status(std::span<uint8_t> out)>;
  Status AddTensorSource(std::string name, GgmlType type, std::vector<int64_t> ne, TensorFill fill);
  // The whole file in memory (tests, fuzzing); a failing TensorFill is a programmer error here.
  std::vector<uint8_t> Serialize() const;
  // What the reader would reject in the metadata (empty or overlong keys, a general.alignment
  // that is not a u32 power of two, non-finite floats, overlong strings, deep arrays).
  Status Validate() const;
  // Validates, then writes through a temporary file renamed over `path`; refuses to replace
  // anything but a regular file.
  Status WriteFile(const std::filesystem::path& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;  // empty when `fill` makes the bytes
    uint64_t n_bytes = 0;
    TensorFill fill;
  };
  Status CheckNewTensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne,
                        uint64_t* n_bytes) const;
  uint32_t version_ = 3;
  uint32_t alignment_ = 32;
  bool alignment_written_ = false;
  std::vector<GgufKv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace primekv
