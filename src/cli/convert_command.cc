// Builds a GGUF file from a JSON manifest plus a raw float32 blob, through our own writer.
// This is how models trained by tools/train/ (PyTorch) become GGUF.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/manifest.h"
#include "cli/options.h"
#include "primekv/gguf/gguf.h"
#include "primekv/quant/quant.h"

namespace primekv::cli {

namespace {

int RunConvert(const std::string& manifest_path, const std::string& out_path, GgmlType type) {
  auto text = ReadInputFile(manifest_path, "manifest");
  if (!text.ok()) return Fail(text.message());
  auto manifest = ParseManifest(*text, manifest_path);
  if (!manifest.ok()) return Fail(manifest.message());
  const auto blob_path = std::filesystem::path(manifest_path).parent_path() / manifest->data_file;
  const std::string blob_name = blob_path.string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(blob_path, ec))
    return Fail("cannot read tensor data '" + Printable(blob_name, 200) + "': not a regular file");
  std::ifstream blob(blob_path, std::ios::binary);
  if (!blob) return Fail("cannot read tensor data '" + Printable(blob_name, 200) + "'");
  blob.seekg(0, std::ios::end);
  const auto blob_size = static_cast<uint64_t>(blob.tellg());
  auto read = [&](uint64_t offset, std::span<float> out) -> Status {
    blob.seekg(static_cast<std::streamoff>(offset));
    blob.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size_bytes()));
    if (!blob) return Status::Error("error reading " + blob_name);
    return Status::Ok();
  };
  std::string note;
  auto writer = BuildGguf(*manifest, type, blob_size, read, &note);
  if (!writer.ok()) return Fail(manifest_path + ": " + writer.message());
  if (!note.empty()) std::fprintf(stderr, "primekv: note: %s\n", note.c_str());
  if (Status s = writer->WriteFile(out_path); !s.ok()) return Fail(s.message());
  std::fprintf(stderr, "wrote %s\n", Printable(out_path, 200).c_str());
  return 0;
}

}  // namespace

void AddConvert(CLI::App& app, Runner& run) {
  auto manifest = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto type = std::make_shared<std::string>("F32");
  auto* cmd =
      app.add_subcommand("convert", "Write GGUF from a JSON manifest and raw float32 tensors");
  cmd->add_option("--manifest", *manifest, "manifest.json (see tools/train)")->required();
  cmd->add_option("-o,--output", *out, "Output GGUF")->required();
  cmd->add_option("--type", *type,
                  "Matrix type: F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | IQ4_NL | "
                  "Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_XS")
      ->capture_default_str();
  cmd->callback([&run, manifest, out, type] {
    run = [=] {
      auto t = ParseGgmlType(*type);
      if (!t || !TypeInfo(*t)->computable)
        return Fail("--type: unsupported type '" + Printable(*type) + "' (see --help)");
      return RunConvert(*manifest, *out, *t);
    };
  });
}

}  // namespace primekv::cli
