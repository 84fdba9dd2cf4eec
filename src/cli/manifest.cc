#include "cli/manifest.h"

#include <bit>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/options.h"
#include "primekv/quant/quant.h"
#include "primekv/util/json_read.h"

namespace primekv::cli {

namespace {

using nlohmann::json;

constexpr size_t kMaxNameBytes = 1 << 16;

std::string Kind(const json& v) { return v.type_name(); }

// An integer of any JSON spelling that holds one exactly ("3", not "3.0" or "2.7").
Result<GgufValue> Integer(const json& v, GgufType type, int64_t lo, uint64_t hi, bool is_signed) {
  if (!v.is_number_integer())
    return Status::Error("want an integer, got " + Kind(v) + " " + Printable(v.dump(), 40));
  GgufValue out;
  out.type = type;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > hi || (lo > 0 && u < static_cast<uint64_t>(lo)))
      return Status::Error(v.dump() + " is outside [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
    if (is_signed) {
      out.i = static_cast<int64_t>(u);
    } else {
      out.u = u;
    }
    return out;
  }
  const int64_t i = v.get<int64_t>();
  if (i < lo)
    return Status::Error(v.dump() + " is outside [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "]");
  if (is_signed) {
    out.i = i;
  } else {
    out.u = static_cast<uint64_t>(i);
  }
  return out;
}

Result<GgufValue> Scalar(const std::string& type, const json& v) {
  if (type == "string") {
    if (!v.is_string()) return Status::Error("want a string, got " + Kind(v));
    if (v.get_ref<const std::string&>().size() > kGgufMaxStringLength)
      return Status::Error("string longer than " + std::to_string(kGgufMaxStringLength) + " bytes");
    return GgufValue::String(v.get<std::string>());
  }
  if (type == "bool") {
    if (!v.is_boolean()) return Status::Error("want true or false, got " + Kind(v));
    return GgufValue::Bool(v.get<bool>());
  }
  if (type == "float32" || type == "float64") {
    if (!v.is_number()) return Status::Error("want a number, got " + Kind(v));
    const double d = v.get<double>();
    if (!std::isfinite(d)) return Status::Error(v.dump() + " is not finite");
    if (type == "float32") {
      if (std::fabs(d) > std::numeric_limits<float>::max())
        return Status::Error(v.dump() + " overflows float32 (largest 3.4028235e38)");
      return GgufValue::Float32(static_cast<float>(d));
    }
    return GgufValue::Float64(d);
  }
  struct IntType {
    const char* name;
    GgufType type;
    int64_t lo;
    uint64_t hi;
    bool is_signed;
  };
  static constexpr IntType kInts[] = {
      {"uint8", GgufType::kUint8, 0, 255, false},
      {"int8", GgufType::kInt8, -128, 127, true},
      {"uint16", GgufType::kUint16, 0, 65535, false},
      {"int16", GgufType::kInt16, -32768, 32767, true},
      {"uint32", GgufType::kUint32, 0, 4294967295u, false},
      {"int32", GgufType::kInt32, std::numeric_limits<int32_t>::min(),
       std::numeric_limits<int32_t>::max(), true},
      {"uint64", GgufType::kUint64, 0, std::numeric_limits<uint64_t>::max(), false},
      {"int64", GgufType::kInt64, std::numeric_limits<int64_t>::min(),
       std::numeric_limits<int64_t>::max(), true}};
  for (const auto& it : kInts) {
    if (type == it.name) return Integer(v, it.type, it.lo, it.hi, it.is_signed);
  }
  return Status::Error(
      "unknown value type '" + Printable(type) +
      "' (string, bool, float32, float64, [u]int8/16/32/64, or array[one of those])");
}

Result<GgufValue> Value(const std::string& type, const json& v) {
  if (type.rfind("array[", 0) == 0 && type.back() == ']') {
    const std::string elem = type.substr(6, type.size() - 7);
    if (!v.is_array()) return Status::Error("type '" + Printable(type) + "' needs a JSON array");
    // The element type's tag, checked even for an empty array.
    auto probe = Scalar(elem, elem == "string" ? json("") : elem == "bool" ? json(false) : json(0));
    if (!probe.ok()) return probe.status();
    std::vector<GgufValue> elements;
    elements.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      auto x = Scalar(elem, v[i]);
      if (!x.ok()) return Status::Error("element " + std::to_string(i) + ": " + x.message());
      elements.push_back(std::move(x).value());
    }
    return GgufValue::Array(probe->type, std::move(elements));
  }
  return Scalar(type, v);
}

Result<std::string> Name(const json& entry, const char* field, const std::string& where) {
  auto it = entry.find(field);
  if (it == entry.end()) return Status::Error(where + ": missing \"" + field + "\"");
  if (!it->is_string())
    return Status::Error(where + ": \"" + field + "\" must be a string, not " + Kind(*it));
  const std::string& s = it->get_ref<const std::string&>();
  if (s.empty()) return Status::Error(where + ": \"" + field + "\" is empty");
  if (s.size() > kMaxNameBytes)
    return Status::Error(where + ": \"" + field + "\" is longer than " +
                         std::to_string(kMaxNameBytes) + " bytes");
  return s;
}

// Each element of the array `list` (named `list_name` in messages) is an object with a unique
// name in its `name_field`; `parse(element, name, at)` reads the rest, `at` being
// "<what> '<name>'" for its messages.
template <typename Parse>
Status ForEachNamed(const json& list, const std::string& list_name, const char* name_field,
                    const std::string& what, Parse parse) {
  if (!list.is_array()) {
    return Status::Error("\"" + list_name + "\" must be an array, not " + Kind(list));
  }
  std::set<std::string> seen;
  for (size_t k = 0; k < list.size(); ++k) {
    const json& e = list[k];
    const std::string where = list_name + "[" + std::to_string(k) + "]";
    if (!e.is_object()) return Status::Error(where + " must be an object, not " + Kind(e));
    PRIMEKV_ASSIGN_OR_RETURN(std::string name, Name(e, name_field, where));
    const std::string at = what + " '" + Printable(name) + "'";
    if (!seen.insert(name).second) return Status::Error(at + " appears twice");
    PRIMEKV_RETURN_IF_ERROR(parse(e, std::move(name), at));
  }
  return Status::Ok();
}

Status ParseMetadata(const json& list, Manifest& m) {
  return ForEachNamed(list, "metadata", "key", "key",
                      [&](const json& kv, std::string key, const std::string& at) -> Status {
                        PRIMEKV_ASSIGN_OR_RETURN(const std::string type, Name(kv, "type", at));
                        auto value = kv.find("value");
                        if (value == kv.end()) return Status::Error(at + ": missing \"value\"");
                        auto v = Value(type, *value);
                        if (!v.ok()) return Status::Error(at + ": " + v.message());
                        if (key == kGgufAlignmentKey &&
                            (v->type != GgufType::kUint32 || !std::has_single_bit(v->u) ||
                             v->u > kManifestMaxAlignment)) {
                          return Status::Error(at + ": must be a uint32 power of two up to " +
                                               std::to_string(kManifestMaxAlignment));
                        }
                        m.metadata.push_back(GgufKv{std::move(key), std::move(v).value()});
                        return Status::Ok();
                      });
}

// "ne" of a tensor: 1 to kMaxDims dimensions >= 1, at most kManifestMaxElements in all.
Status ParseShape(const json& e, const std::string& at, ManifestTensor& out) {
  auto ne = e.find("ne");
  if (ne == e.end() || !ne->is_array() || ne->empty() || ne->size() > kGgufMaxDims)
    return Status::Error(at + ": \"ne\" must be an array of 1 to " + std::to_string(kGgufMaxDims) +
                         " dimensions");
  uint64_t n = 1;
  for (const json& d : *ne) {
    auto dim = Integer(d, GgufType::kInt64, 1, kManifestMaxElements, true);
    if (!dim.ok())
      return Status::Error(at + ": dimension " + Printable(d.dump(), 40) +
                           " must be an integer >= 1");
    n *= static_cast<uint64_t>(dim->i);
    if (n > kManifestMaxElements)
      return Status::Error(at + ": more than " + std::to_string(kManifestMaxElements) +
                           " elements");
    out.ne.push_back(dim->i);
  }
  out.n_elements = n;
  return Status::Ok();
}

Status ParseTensors(const json& list, Manifest& m) {
  return ForEachNamed(
      list, "tensors", "name", "tensor",
      [&](const json& e, std::string name, const std::string& at) -> Status {
        ManifestTensor out;
        out.name = std::move(name);
        if (auto dt = e.find("dtype"); dt != e.end() && !(dt->is_string() && *dt == "F32"))
          return Status::Error(at + ": only F32 input data is supported (dtype " +
                               Printable(dt->dump(), 40) + ")");
        PRIMEKV_RETURN_IF_ERROR(ParseShape(e, at, out));
        auto off = e.find("offset");
        if (off == e.end()) return Status::Error(at + ": missing \"offset\"");
        auto offset =
            Integer(*off, GgufType::kUint64, 0, std::numeric_limits<uint64_t>::max(), false);
        if (!offset.ok()) return Status::Error(at + ": \"offset\": " + offset.message());
        out.offset = offset->u;
        m.tensors.push_back(std::move(out));
        return Status::Ok();
      });
}

}  // namespace

Result<Manifest> ParseManifest(std::string_view json_text, const std::string& name) {
  PRIMEKV_ASSIGN_OR_RETURN(const json root, ParseJson(json_text, name));
  if (!root.is_object())
    return Status::Error(name + ": the manifest must be a JSON object, not " + Kind(root));
  Manifest m;
  if (auto d = root.find("data"); d != root.end()) {
    if (!d->is_string() || d->get_ref<const std::string&>().empty() ||
        d->get_ref<const std::string&>().find('\0') != std::string::npos)
      return Status::Error(name + ": \"data\" must be a file name, not " +
                           Printable(d->dump(), 40));
    m.data_file = d->get<std::string>();
  }
  for (const char* field : {"metadata", "tensors"}) {
    if (!root.contains(field)) return Status::Error(name + ": missing \"" + field + "\"");
  }
  if (Status s = ParseMetadata(root["metadata"], m); !s.ok())
    return Status::Error(name + ": " + s.message());
  if (Status s = ParseTensors(root["tensors"], m); !s.ok())
    return Status::Error(name + ": " + s.message());
  return m;
}

Result<GgufWriter> BuildGguf(const Manifest& manifest, GgmlType type, uint64_t blob_bytes,
                             const BlobReader& read, std::string* note) {
  GgufWriter w;
  for (const GgufKv& kv : manifest.metadata) w.Add(kv.key, kv.value);
  const auto info = TypeInfo(type);
  if (!info || !info->computable) return Status::Error("unsupported tensor type");
  int matrices = 0;
  std::vector<std::string> kept_f32;  // matrices whose rows do not fit the type's blocks
  for (const ManifestTensor& t : manifest.tensors) {
    const std::string at = "tensor '" + Printable(t.name) + "'";
    if (t.offset > blob_bytes || t.n_elements > (blob_bytes - t.offset) / 4) {
      return Status::Error(at + ": " + std::to_string(t.n_elements) + " floats at byte " +
                           std::to_string(t.offset) + " run past the end of " +
                           Printable(manifest.data_file) + " (" + std::to_string(blob_bytes) +
                           " bytes)");
    }
    // Checked here, one tensor in memory at a time; the bytes are made again while the file is
    // written, so the output is never held whole.
    {
      std::vector<float> f(t.n_elements);
      if (Status s = read(t.offset, f); !s.ok()) return s;
      for (float x : f) {
        if (!std::isfinite(x)) return Status::Error(at + ": data holds NaN or infinity");
      }
    }
    // Matrices take the requested type when their rows fit its blocks; vectors stay F32.
    GgmlType tt = GgmlType::kF32;
    if (t.ne.size() >= 2) {
      ++matrices;
      if (t.ne[0] % info->block_size == 0) {
        tt = type;
      } else {
        kept_f32.push_back(Printable(t.name) + " (rows of " + std::to_string(t.ne[0]) + ")");
      }
    }
    const int64_t cols = t.ne[0];
    const int64_t rows = static_cast<int64_t>(t.n_elements) / cols;
    const size_t rb = quant::RowBytes(tt, cols);
    auto fill = [read, offset = t.offset, n = t.n_elements, tt, cols, rows,
                 rb](std::span<uint8_t> out) -> Status {
      std::vector<float> f(n);
      PRIMEKV_RETURN_IF_ERROR(read(offset, f));
      for (int64_t r = 0; r < rows; ++r) {
        quant::QuantizeRow(tt, f.data() + r * cols, out.data() + rb * static_cast<size_t>(r), cols);
      }
      return Status::Ok();
    };
    if (Status s = w.AddTensorSource(t.name, tt, t.ne, std::move(fill)); !s.ok()) return s;
  }
  const std::string type_name(info->name);
  if (type != GgmlType::kF32 && matrices > 0 && static_cast<int>(kept_f32.size()) == matrices) {
    return Status::Error("--type " + type_name + ": no matrix has rows that fit its " +
                         std::to_string(info->block_size) + "-value blocks (" + kept_f32[0] +
                         "); choose a type with smaller blocks (Q8_0, F16) or F32");
  }
  if (note != nullptr && !kept_f32.empty()) {
    *note = std::to_string(kept_f32.size()) + " of " + std::to_string(matrices) +
            " matrices stay F32, their rows do not fit " + type_name + "'s " +
            std::to_string(info->block_size) + "-value blocks: " + kept_f32[0] +
            (kept_f32.size() > 1 ? ", ..." : "");
  }
  if (Status s = w.Validate(); !s.ok()) return s;
  return w;
}

}  // namespace primekv::cli
