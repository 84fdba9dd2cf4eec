#pragma once

namespace primekv::cli {

// `primekv --version`: "primekv 0.1.0 (commit 0123456789ab)", generated at build time by
// version_line.cmake so it names the commit the binary was built from.
extern const char* const kVersionLine;

}  // namespace primekv::cli
