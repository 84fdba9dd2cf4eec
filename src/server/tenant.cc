// Who may see a session: session ids from the kernel's random source, and API keys as tenants.
#include "server/tenant.h"

#include <openssl/evp.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "server/common.h"

namespace primekv::server {
namespace {

std::string Hex(const unsigned char* bytes, size_t n) {
  std::string out;
  char two[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(two, sizeof(two), "%02x", bytes[i]);
    out += two;
  }
  return out;
}

// Equal strings, in time that depends on their lengths only.
bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  return diff == 0;
}

}  // namespace

Result<std::string> RandomSessionId() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Error(std::string("no random session id: ") + std::strerror(errno));
    }
    got += static_cast<size_t>(n);
  }
  return "s" + Hex(bytes, sizeof(bytes));
}

std::string TenantId(const std::string& api_key) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(api_key.data(), api_key.size(), digest, &len, EVP_sha256(), nullptr);
  return "t" + Hex(digest, std::min<unsigned int>(len, 16));
}

std::optional<std::string> TenantOfAuthorization(const std::string& header,
                                                 const std::vector<std::string>& keys) {
  if (keys.empty()) return std::string();
  // RFC 9110: the scheme is case-insensitive; one or more spaces follow it.
  constexpr std::string_view kScheme = "bearer";
  if (header.size() <= kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return std::nullopt;
  size_t at = kScheme.size();
  if (header[at] != ' ') return std::nullopt;
  while (at < header.size() && header[at] == ' ') ++at;
  const std::string token = header.substr(at);
  std::optional<std::string> tenant;
  for (const std::string& key : keys)  // every key is compared: the time does not say which
    if (ConstantTimeEqual(token, key) && !tenant) tenant = TenantId(key);
  return tenant;
}

}  // namespace primekv::server
