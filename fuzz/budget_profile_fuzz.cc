// libFuzzer target for budget-profile files (a press's profile=FILE): any text must give a
// profile or a Status, and a parsed profile must hold its shape and give every head a keep
// count within the tokens seen.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "primekv/press/budget_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto p = primekv::BudgetProfile::Parse(text, "fuzz");
  if (!p.ok()) {
    primekv::Check(!p.message().empty(), "a failed parse explains itself");
    return 0;
  }
  primekv::Check(p->Validate().ok(), "a parsed profile validates");
  for (double r : {0.0, 0.3, 0.9, 0.999}) {
    for (int l = 0; l < p->n_layers; l += 1 + p->n_layers / 4) {
      for (int h = 0; h < p->n_kv_heads; h += 1 + p->n_kv_heads / 4) {
        const int keep = p->Keep(1000, r, l, h);
        primekv::Check(keep >= 1 && keep <= 1000, "a keep count is within the tokens seen");
      }
    }
  }
  return 0;
}
