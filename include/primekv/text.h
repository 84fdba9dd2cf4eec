// Text shown in messages that echo user or file input.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace primekv {

// Escapes bytes outside printable ASCII as \xNN and cuts text longer than `max_shown` bytes
// (marked "..."), so a message can never carry terminal control bytes or a megabyte of input.
std::string Printable(std::string_view text, size_t max_shown = 80);

}  // namespace primekv
