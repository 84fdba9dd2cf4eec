// libFuzzer target for convert's manifest reader: any JSON text must either be refused with a
// Status or give a GGUF file that our own reader opens, with the same metadata and tensors.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cli/manifest.h"
#include "primekv/gguf/gguf.h"

namespace {

// A small blob of distinct finite floats stands in for tensors.bin.
constexpr uint64_t kBlobFloats = 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace primekv;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto manifest = cli::ParseManifest(text, "fuzz.json");
  if (!manifest.ok()) {
    Check(!manifest.message().empty(), "a refused manifest explains itself");
    return 0;
  }
  std::vector<float> blob(kBlobFloats);
  for (uint64_t i = 0; i < kBlobFloats; ++i) blob[i] = static_cast<float>(i % 97) * 0.25f - 12.0f;
  auto read = [&](uint64_t offset, std::span<float> out) -> Status {
    std::memcpy(out.data(), reinterpret_cast<const uint8_t*>(blob.data()) + offset,
                out.size_bytes());
    return Status::Ok();
  };
  for (GgmlType type : {GgmlType::kF32, GgmlType::kQ8_0}) {
    auto writer = cli::BuildGguf(*manifest, type, kBlobFloats * 4, read);
    if (!writer.ok()) {
      Check(!writer.message().empty(), "a refused build explains itself");
      continue;
    }
    const std::vector<uint8_t> bytes = writer->Serialize();
    auto file = GgufFile::FromMemory(bytes, "fuzz.gguf");
    if (!file.ok()) {
      std::fprintf(stderr, "reader rejects the writer's file: %s\n", file.message().c_str());
      Check(false, "the reader opens every file convert writes");
    }
    Check(file->tensors().size() == manifest->tensors.size(), "every tensor written");
    for (const GgufKv& kv : manifest->metadata) {
      const GgufValue* v = file->Find(kv.key);
      Check(v != nullptr && *v == kv.value, "metadata round-trips");
    }
  }
  return 0;
}
