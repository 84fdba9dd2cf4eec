// Text shown in messages that echo user or file input.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace primekv {

// Escapes bytes outside printable ASCII as \xNN and cuts text longer than `max_shown` bytes
// (marked "..."), so a message can never carry terminal control bytes or a megabyte of input.
std::string Printable(std::string_view text, size_t max_shown = 80);

// Text from a file shown whole on a terminal (inspect): valid UTF-8 passes through, but control
// characters (C0, DEL, C1), NUL and bytes of invalid UTF-8 are written \xNN (newline as \n),
// so escape sequences cannot reach the terminal and an embedded NUL is visible.
std::string TerminalSafe(std::string_view text);

}  // namespace primekv
