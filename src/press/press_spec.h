// The press spec grammar's pieces that the registry table shares (press_spec.cc): how user
// text is echoed in messages, and the budget wrapper rows ("adakv:<press>").
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "primekv/press/press.h"

namespace primekv::press_internal {

// User text echoed in messages: printable ASCII only, bounded length.
std::string Shown(std::string_view s);

// The budget wrapper row whose prefix is `name` ("adakv"), if any.
const PressEntry* FindWrapper(std::span<const PressEntry> table, std::string_view name);

// "press W needs an inner press: W:<press>, e.g. W:snapkv".
std::string NeedsInner(std::string_view w);

}  // namespace primekv::press_internal
