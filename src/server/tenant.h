// Tenants: the name an API key goes by, and the tenant of a request's Authorization header.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace primekv::server {

// A tenant's name for an API key: the first 128 bits of its SHA-256 in hex, so session files
// and logs never hold the key itself.
std::string TenantId(const std::string& api_key);
// The tenant of an Authorization header ("Bearer KEY", the scheme in any case) among `keys`
// (each compared in constant time), or nullopt when it names none.
std::optional<std::string> TenantOfAuthorization(const std::string& header,
                                                 const std::vector<std::string>& keys);

}  // namespace primekv::server
