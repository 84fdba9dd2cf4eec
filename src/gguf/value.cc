#include <string>
#include <utility>
#include <vector>

#include "gguf/layout.h"
#include "primekv/gguf/gguf.h"

namespace primekv {

std::string_view GgufTypeName(GgufType t) {
  const gguf_internal::ValueTypeInfo* info = gguf_internal::ValueType(t);
  return info != nullptr ? info->name : "unknown";
}

namespace {

GgufValue Unsigned(GgufType type, uint64_t v) {
  GgufValue value;
  value.type = type;
  value.u = v;
  return value;
}

GgufValue Signed(GgufType type, int64_t v) {
  GgufValue value;
  value.type = type;
  value.i = v;
  return value;
}

GgufValue Floating(GgufType type, double v) {
  GgufValue value;
  value.type = type;
  value.f = v;
  return value;
}

template <typename T, typename Make>
GgufValue MakeArray(GgufType element_type, const std::vector<T>& v, Make make) {
  std::vector<GgufValue> elements;
  elements.reserve(v.size());
  for (const T& x : v) elements.push_back(make(x));
  return GgufValue::Array(element_type, std::move(elements));
}

}  // namespace

GgufValue GgufValue::Uint8(uint8_t v) { return Unsigned(GgufType::kUint8, v); }
GgufValue GgufValue::Uint16(uint16_t v) { return Unsigned(GgufType::kUint16, v); }
GgufValue GgufValue::Uint32(uint32_t v) { return Unsigned(GgufType::kUint32, v); }
GgufValue GgufValue::Uint64(uint64_t v) { return Unsigned(GgufType::kUint64, v); }
GgufValue GgufValue::Bool(bool v) { return Unsigned(GgufType::kBool, v ? 1 : 0); }
GgufValue GgufValue::Int8(int8_t v) { return Signed(GgufType::kInt8, v); }
GgufValue GgufValue::Int16(int16_t v) { return Signed(GgufType::kInt16, v); }
GgufValue GgufValue::Int32(int32_t v) { return Signed(GgufType::kInt32, v); }
GgufValue GgufValue::Int64(int64_t v) { return Signed(GgufType::kInt64, v); }
GgufValue GgufValue::Float32(float v) { return Floating(GgufType::kFloat32, v); }
GgufValue GgufValue::Float64(double v) { return Floating(GgufType::kFloat64, v); }

GgufValue GgufValue::String(std::string v) {
  GgufValue value;
  value.type = GgufType::kString;
  value.s = std::move(v);
  return value;
}

GgufValue GgufValue::Array(GgufType element_type, std::vector<GgufValue> elements) {
  for (const GgufValue& e : elements) {
    Check(e.type == element_type, "GgufValue::Array: element type differs from the array type");
  }
  GgufValue value;
  value.type = GgufType::kArray;
  value.array_type = element_type;
  value.array = std::move(elements);
  return value;
}

GgufValue GgufValue::StringArray(const std::vector<std::string>& v) {
  return MakeArray(GgufType::kString, v, [](const std::string& x) { return String(x); });
}

GgufValue GgufValue::Float32Array(const std::vector<float>& v) {
  return MakeArray(GgufType::kFloat32, v, [](float x) { return Float32(x); });
}

GgufValue GgufValue::Int32Array(const std::vector<int32_t>& v) {
  return MakeArray(GgufType::kInt32, v, [](int32_t x) { return Int32(x); });
}

}  // namespace primekv
