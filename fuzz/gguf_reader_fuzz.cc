// libFuzzer target for the GGUF reader: any input must either parse or fail with a Status that
// names the file; a parsed file must be self-consistent and survive a writer round trip.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "primekv/gguf/gguf.h"

namespace primekv {
namespace {

constexpr const char* kName = "fuzz.gguf";

void ExerciseGetters(const GgufFile& f, const GgufKv& kv) {
  Check(f.Find(kv.key) == &kv.value, "Find returns the entry");
  const GgufType t = kv.value.type;
  const bool is_int = t == GgufType::kUint8 || t == GgufType::kInt8 || t == GgufType::kUint16 ||
                      t == GgufType::kInt16 || t == GgufType::kUint32 || t == GgufType::kInt32 ||
                      t == GgufType::kUint64 || t == GgufType::kInt64;
  if (f.GetInt(kv.key).has_value()) Check(is_int, "GetInt only for integers");
  if (f.GetFloat(kv.key).has_value()) {
    Check(t == GgufType::kFloat32 || t == GgufType::kFloat64, "GetFloat only for floats");
  }
  Check(f.GetBool(kv.key).has_value() == (t == GgufType::kBool), "GetBool iff bool");
  Check(f.GetString(kv.key).has_value() == (t == GgufType::kString), "GetString iff string");
  const bool is_array = t == GgufType::kArray;
  if (auto v = f.GetStringArray(kv.key)) {
    Check(is_array && v->size() == kv.value.array.size(), "GetStringArray size");
  }
  if (auto v = f.GetFloatArray(kv.key)) {
    Check(is_array && v->size() == kv.value.array.size(), "GetFloatArray size");
  }
  if (auto v = f.GetIntArray(kv.key)) {
    Check(is_array && v->size() == kv.value.array.size(), "GetIntArray size");
  }
  (void)GgufTypeName(t);
}

void CheckParsed(const GgufFile& f, const uint8_t* data, size_t size) {
  Check(f.version() == 2 || f.version() == 3, "version");
  const uint64_t a = f.alignment();
  Check(a != 0 && (a & (a - 1)) == 0, "alignment is a power of two");
  Check(f.data_offset() % a == 0, "data offset aligned");
  Check(f.file_size() == size, "file size");
  for (const GgufKv& kv : f.metadata()) ExerciseGetters(f, kv);
  (void)f.Find("general.architecture");
  (void)f.GetInt("general.alignment");

  uint32_t checksum = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    Check(f.FindTensor(t.name) == &t, "FindTensor returns the entry");
    std::optional<GgmlTypeInfo> info = TypeInfo(t.type);
    Check(info.has_value(), "known type");
    Check(t.ne.size() >= 1 && t.ne.size() <= 4, "n_dims");
    Check(t.offset % a == 0, "tensor offset aligned");
    std::span<const uint8_t> bytes = f.TensorData(t);
    Check(bytes.size() == t.n_bytes, "TensorData size");
    Check(bytes.data() >= data && bytes.data() + bytes.size() <= data + size, "inside input");
    // Touch the first and last byte so ASan checks the range really is readable.
    if (!bytes.empty()) checksum += bytes.front() + bytes.back();
  }
  (void)checksum;
}

// Re-serializing what was read must give a file that reads back to the same thing; serializing
// that again must be byte-identical (NaN-safe, unlike comparing values).
void CheckRoundTrip(const GgufFile& f) {
  uint64_t total = 0;
  for (const GgufTensorInfo& t : f.tensors()) total += t.n_bytes;
  // Keep iterations fast: the writer pads the data section to the alignment, and a legal
  // power-of-two alignment of 2 GiB makes a 2 GiB file.
  if (total > (uint64_t{1} << 24) || f.alignment() > (uint64_t{1} << 24)) return;

  GgufWriter w;
  w.SetVersion(f.version());
  for (const GgufKv& kv : f.metadata()) w.Add(kv.key, kv.value);
  for (const GgufTensorInfo& t : f.tensors()) {
    std::span<const uint8_t> bytes = f.TensorData(t);
    Status s = w.AddTensor(t.name, t.type, t.ne, std::vector<uint8_t>(bytes.begin(), bytes.end()));
    Check(s.ok(), "writer accepts what the reader accepted");
  }
  const std::vector<uint8_t> once = w.Serialize();
  Result<GgufFile> again = GgufFile::FromMemory(once, kName);
  Check(again.ok(), "writer output parses");
  Check(again->metadata().size() == f.metadata().size(), "same metadata count");
  Check(again->tensors().size() == f.tensors().size(), "same tensor count");
  Check(again->alignment() == f.alignment(), "same alignment");
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensorInfo& x = f.tensors()[i];
    const GgufTensorInfo& y = again->tensors()[i];
    Check(x.name == y.name && x.ne == y.ne && x.type == y.type && x.n_bytes == y.n_bytes,
          "same tensor info");
  }
  GgufWriter w2;
  w2.SetVersion(again->version());
  for (const GgufKv& kv : again->metadata()) w2.Add(kv.key, kv.value);
  for (const GgufTensorInfo& t : again->tensors()) {
    std::span<const uint8_t> bytes = again->TensorData(t);
    Check(w2.AddTensor(t.name, t.type, t.ne, std::vector<uint8_t>(bytes.begin(), bytes.end())).ok(),
          "second AddTensor");
  }
  Check(w2.Serialize() == once, "serialization is idempotent");
}

}  // namespace
}  // namespace primekv

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using primekv::Check;
  primekv::Result<primekv::GgufFile> r =
      primekv::GgufFile::FromMemory({data, size}, primekv::kName);
  if (!r.ok()) {
    Check(r.message().rfind(std::string(primekv::kName) + ": ", 0) == 0, "error names the file");
    return 0;
  }
  primekv::CheckParsed(*r, data, size);
  primekv::CheckRoundTrip(*r);
  return 0;
}
