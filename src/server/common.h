// Small helpers the server's parts share: time, token prefixes, session ids, peer liveness.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "primekv/tokenizer/tokenizer.h"
#include "primekv/util/status.h"

namespace primekv::server {

double SecondsSince(std::chrono::steady_clock::time_point t0);
// How many leading tokens two sequences share.
size_t CommonPrefix(const std::vector<Token>& a, const std::vector<Token>& b);

// A fresh session id: "s" and 128 bits from the kernel's random source in hex.
Result<std::string> RandomSessionId();

// False once the peer of socket `fd` has closed its end or the connection failed; never blocks.
bool PeerConnected(int fd);

}  // namespace primekv::server
