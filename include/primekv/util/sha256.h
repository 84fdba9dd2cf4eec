// SHA-256 (FIPS 180-4) of bytes and of a file, as lowercase hex: the key of a model's cached
// budget profile. Written here so the core library needs no crypto dependency.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "primekv/util/status.h"

namespace primekv {

std::string Sha256Hex(std::string_view bytes);
// Reads the file in blocks (never all of it at once).
Result<std::string> FileSha256Hex(const std::filesystem::path& path);

}  // namespace primekv
