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

// Length of the valid UTF-8 sequence starting at text[i] (shortest form, no surrogates, at most
// U+10FFFF), or 0 when the bytes there are not one.
size_t Utf8SequenceLength(std::string_view text, size_t i);

}  // namespace primekv
