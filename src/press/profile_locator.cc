#include "primekv/press/profile_locator.h"

#include <cstdlib>
#include <sstream>

#include "primekv/press/press.h"
#include "primekv/util/file_io.h"
#include "primekv/util/sha256.h"

namespace primekv {

std::filesystem::path ProfileBesideModel(const std::filesystem::path& model_file) {
  std::filesystem::path p = model_file;
  p.replace_extension(".budget.json");
  return p;
}

Result<std::filesystem::path> ProfileCacheDir() {
  // Read, never set: the environment is the user's.
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::filesystem::path(xdg) / "primekv" / "profiles";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0')
    return std::filesystem::path(home) / ".cache" / "primekv" / "profiles";
  return Status::Error("budget profile cache: neither XDG_CACHE_HOME nor HOME is set");
}

Result<std::string> ModelFileSha256(const std::filesystem::path& model_file, bool fresh) {
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(model_file, ec);
  const auto size = std::filesystem::file_size(model_file, ec);
  const auto mtime = std::filesystem::last_write_time(model_file, ec);
  auto dir = ProfileCacheDir();
  if (ec || !dir.ok()) return FileSha256Hex(model_file);
  std::ostringstream stat;
  stat << abs.string() << '\0' << size << '\0' << mtime.time_since_epoch().count();
  const std::filesystem::path memo = *dir / "files" / (Sha256Hex(stat.str()) + ".sha256");
  if (!fresh) {
    auto known = ReadFileCapped(memo.string(), "model hash", FileSource::kRegular, 64);
    if (known.ok() && known->size() == 64) return *known;
  }
  PRIMEKV_ASSIGN_OR_RETURN(const std::string hash, FileSha256Hex(model_file));
  std::filesystem::create_directories(memo.parent_path(), ec);
  (void)WriteFileReplacing(memo.string(), hash, "model hash");  // a cache: a failure costs time
  return hash;
}

Result<std::filesystem::path> CachedProfilePath(const std::filesystem::path& model_file) {
  PRIMEKV_ASSIGN_OR_RETURN(const std::filesystem::path dir, ProfileCacheDir());
  PRIMEKV_ASSIGN_OR_RETURN(const std::string hash, ModelFileSha256(model_file));
  return dir / (hash + ".budget.json");
}

Result<std::filesystem::path> FindModelProfile(const std::filesystem::path& model_file) {
  if (model_file.empty())
    return Status::Error("profile=auto: the model was not loaded from a file; give profile=FILE");
  std::error_code ec;
  const std::filesystem::path beside = ProfileBesideModel(model_file);
  if (std::filesystem::is_regular_file(beside, ec)) return beside;
  auto cached = CachedProfilePath(model_file);
  if (cached.ok() && std::filesystem::is_regular_file(*cached, ec)) return *cached;
  return Status::Error("profile=auto: no budget profile for " + model_file.string() +
                       " (looked for " + beside.string() +
                       (cached.ok() ? " and " + cached->string() : std::string()) +
                       "); make one with: primekv calibrate -m " + model_file.string());
}

namespace {

// profile=auto in `press`, whose profile FindModelProfile-like `find` gives.
template <typename Find>
Result<std::string> Substitute(const std::string& press, Find find) {
  if (press.find("auto") == std::string::npos) return press;
  PRIMEKV_ASSIGN_OR_RETURN(PressSpec spec, ParsePressSpec(press));
  PressSpec* scored = &spec;
  PressSpec inner;
  const auto of = spec.params.find("of");
  if (of != spec.params.end()) {
    PRIMEKV_ASSIGN_OR_RETURN(inner, ParsePressSpec(of->second));
    scored = &inner;
  }
  const auto p = scored->params.find("profile");
  if (p == scored->params.end() || p->second != "auto") return press;
  PRIMEKV_ASSIGN_OR_RETURN(const std::filesystem::path found, find());
  p->second = found.string();
  if (!scored->params.contains("nest")) {
    std::ostringstream nest;
    nest << kAutoProfileNest;
    scored->params["nest"] = nest.str();
  }
  if (scored == &inner) of->second = inner.Text();
  return spec.Text();
}

}  // namespace

bool UsesAutoProfile(const std::string& press) {
  bool asked = false;
  (void)Substitute(press, [&asked]() -> Result<std::filesystem::path> {
    asked = true;
    return Status::Error("profile=auto");
  });
  return asked;
}

Result<std::string> ResolveAutoProfile(const std::string& press,
                                       const std::filesystem::path& model_file) {
  return Substitute(press, [&] { return FindModelProfile(model_file); });
}

Result<std::string> SubstituteAutoProfile(const std::string& press,
                                          const Result<std::filesystem::path>& profile) {
  return Substitute(press, [&] { return profile; });
}

}  // namespace primekv
