// Builds a GGUF file from a JSON manifest plus a raw float32 blob, through our own writer.
// This is how models trained by tools/train/ (PyTorch) become GGUF.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "primekv/gguf.h"
#include "primekv/quant.h"

namespace primekv::cli {

namespace {

using nlohmann::json;

Result<GgufValue> Scalar(const std::string& type, const json& v) {
  GgufValue out;
  try {
    if (type == "string") return GgufValue::String(v.get<std::string>());
    if (type == "bool") return GgufValue::Bool(v.get<bool>());
    if (type == "float32") return GgufValue::Float32(v.get<float>());
    if (type == "float64") {
      out.type = GgufType::kFloat64;
      out.f = v.get<double>();
      return out;
    }
    struct IntType {
      const char* name;
      GgufType type;
      bool is_signed;
    };
    static constexpr IntType kInts[] = {
        {"uint8", GgufType::kUint8, false},   {"int8", GgufType::kInt8, true},
        {"uint16", GgufType::kUint16, false}, {"int16", GgufType::kInt16, true},
        {"uint32", GgufType::kUint32, false}, {"int32", GgufType::kInt32, true},
        {"uint64", GgufType::kUint64, false}, {"int64", GgufType::kInt64, true}};
    for (const auto& it : kInts) {
      if (type != it.name) continue;
      out.type = it.type;
      if (it.is_signed) {
        out.i = v.get<int64_t>();
      } else {
        out.u = v.get<uint64_t>();
      }
      return out;
    }
  } catch (const json::exception& e) {
    return Status::Error("value does not match type '" + type + "': " + e.what());
  }
  return Status::Error("unknown value type '" + type + "'");
}

Result<GgufValue> Value(const std::string& type, const json& v) {
  if (type.rfind("array[", 0) == 0 && type.back() == ']') {
    const std::string elem = type.substr(6, type.size() - 7);
    if (!v.is_array()) return Status::Error("type '" + type + "' needs a JSON array");
    GgufValue out;
    out.type = GgufType::kArray;
    auto probe = Scalar(elem, elem == "string" ? json("") : elem == "bool" ? json(false) : json(0));
    if (!probe.ok()) return probe.status();
    out.array_type = probe->type;
    out.array.reserve(v.size());
    for (const auto& e : v) {
      auto x = Scalar(elem, e);
      if (!x.ok()) return x.status();
      out.array.push_back(std::move(x).value());
    }
    return out;
  }
  return Scalar(type, v);
}

int RunConvert(const std::string& manifest_path, const std::string& out_path,
               const std::string& type_name) {
  auto type = ParseGgmlType(type_name);
  if (!type || !TypeInfo(*type)->computable) return Fail("unsupported --type '" + type_name + "'");
  std::ifstream in(manifest_path);
  if (!in) return Fail("cannot read manifest '" + manifest_path + "'");
  json m;
  try {
    m = json::parse(in);
  } catch (const json::exception& e) {
    return Fail(manifest_path + ": invalid JSON: " + e.what());
  }
  const auto dir = std::filesystem::path(manifest_path).parent_path();
  const std::string data_name = m.value("data", "tensors.bin");
  std::ifstream blob(dir / data_name, std::ios::binary);
  if (!blob) return Fail("cannot read tensor data '" + (dir / data_name).string() + "'");
  blob.seekg(0, std::ios::end);
  const auto blob_size = static_cast<uint64_t>(blob.tellg());

  GgufWriter w;
  try {
    for (const auto& kv : m.at("metadata")) {
      auto v = Value(kv.at("type").get<std::string>(), kv.at("value"));
      if (!v.ok())
        return Fail(manifest_path + ": key '" + kv.at("key").get<std::string>() +
                    "': " + v.message());
      w.Add(kv.at("key").get<std::string>(), std::move(v).value());
    }
    for (const auto& t : m.at("tensors")) {
      const std::string name = t.at("name").get<std::string>();
      if (t.value("dtype", "F32") != "F32")
        return Fail(name + ": only F32 input data is supported");
      std::vector<int64_t> ne = t.at("ne").get<std::vector<int64_t>>();
      uint64_t n = 1;
      for (int64_t d : ne) {
        if (d <= 0 || n > (uint64_t{1} << 40) / static_cast<uint64_t>(d))
          return Fail(name + ": bad shape");
        n *= static_cast<uint64_t>(d);
      }
      const uint64_t offset = t.at("offset").get<uint64_t>();
      if (offset > blob_size || n * 4 > blob_size - offset)
        return Fail(name + ": data past end of " + data_name);
      std::vector<float> f(n);
      blob.seekg(static_cast<std::streamoff>(offset));
      blob.read(reinterpret_cast<char*>(f.data()), static_cast<std::streamsize>(n * 4));
      // Matrices take the requested type when their rows fit its blocks; vectors stay F32.
      GgmlType tt = GgmlType::kF32;
      if (ne.size() >= 2 && ne[0] % TypeInfo(*type)->block_size == 0) tt = *type;
      const int64_t rows = static_cast<int64_t>(n) / ne[0];
      const size_t rb = quant::RowBytes(tt, ne[0]);
      std::vector<uint8_t> bytes(rb * static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        quant::QuantizeRow(tt, f.data() + r * ne[0], bytes.data() + rb * static_cast<size_t>(r),
                           ne[0]);
      }
      if (Status s = w.AddTensor(name, tt, ne, std::move(bytes)); !s.ok()) return Fail(s.message());
    }
  } catch (const json::exception& e) {
    return Fail(manifest_path + ": malformed manifest: " + e.what());
  }
  if (Status s = w.WriteFile(out_path); !s.ok()) return Fail(s.message());
  std::fprintf(stderr, "wrote %s\n", out_path.c_str());
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
  cmd->add_option("--type", *type, "Matrix type: F32 | F16 | BF16 | Q8_0 | Q4_0")
      ->capture_default_str();
  cmd->callback(
      [&run, manifest, out, type] { run = [=] { return RunConvert(*manifest, *out, *type); }; });
}

}  // namespace primekv::cli
