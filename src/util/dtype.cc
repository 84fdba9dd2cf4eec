#include "primekv/util/dtype.h"

#include <cstdint>

namespace primekv {
namespace {

char ToUpper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ToUpper(a[i]) != ToUpper(b[i])) return false;
  }
  return true;
}

}  // namespace

std::optional<GgmlType> ParseGgmlType(std::string_view name) {
  for (const GgmlTypeEntry& entry : kGgmlTypes) {
    if (EqualsIgnoreCase(entry.info.name, name)) return entry.id;
  }
  return std::nullopt;
}

std::string ComputableTypeNames() {
  std::string names;
  for (const GgmlTypeEntry& entry : kGgmlTypes) {
    if (!entry.info.computable) continue;
    if (!names.empty()) names += ", ";
    names += entry.info.name;
  }
  return names;
}

}  // namespace primekv
