// Where a model's budget profile is found, for the press parameter profile=auto: the file
// beside the model (models/X.gguf -> models/X.budget.json), else the cache entry that
// `primekv calibrate -m X.gguf` writes, keyed by the SHA-256 of the model file:
// $XDG_CACHE_HOME/primekv/profiles/<sha256>.budget.json (~/.cache when XDG_CACHE_HOME is unset).
#pragma once

#include <filesystem>
#include <string>

#include "primekv/util/status.h"

namespace primekv {

// The nesting profile=auto chooses when nest= is not given (docs/results.md §8: at 0.9 the
// profile matches the full cache, and nesting below it holds the uniform default at 0.5).
inline constexpr double kAutoProfileNest = 0.9;

std::filesystem::path ProfileBesideModel(const std::filesystem::path& model_file);
// The cache folder (not created here); an error when neither XDG_CACHE_HOME nor HOME is set.
Result<std::filesystem::path> ProfileCacheDir();
// The SHA-256 of a model file, remembered in the cache folder under its path, size and
// modification time (files/<key>.sha256), so a file is read in full once: hashing 800 MB takes
// seconds. A file rewritten in place with the same size within the same mtime tick would keep
// its old hash; calibrate --recalibrate hashes it again.
Result<std::string> ModelFileSha256(const std::filesystem::path& model_file, bool fresh = false);
// The cache entry of a model file.
Result<std::filesystem::path> CachedProfilePath(const std::filesystem::path& model_file);
// The profile beside the model, else the cached one, else an error naming the command that
// makes it.
Result<std::filesystem::path> FindModelProfile(const std::filesystem::path& model_file);

// Whether `press` (one press) asks for profile=auto.
bool UsesAutoProfile(const std::string& press);
// `press` with profile=auto replaced by FindModelProfile's path and, when nest= is absent,
// nest=kAutoProfileNest added (inside a budget wrapper too); any other press text unchanged.
Result<std::string> ResolveAutoProfile(const std::string& press,
                                       const std::filesystem::path& model_file);
// The same with the profile already found (a server finds it once, not per request).
Result<std::string> SubstituteAutoProfile(const std::string& press,
                                          const Result<std::filesystem::path>& profile);

}  // namespace primekv
