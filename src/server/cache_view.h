// The body of GET /v1/sessions/{id}/cache: which entries of a session's KV cache compression
// kept, per layer and KV head, as run lengths over token positions, with each token's text and
// the cache's bytes (docs/server.md, The web page). Bounded: a 32K-token session at ratio 0.9
// stays under 256 KB (cache_view_test).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "primekv/tokenizer/tokenizer.h"
#include "server/session_store.h"

namespace primekv::server {

// Each token's text, so that their concatenation is valid UTF-8: a piece that ends inside a
// character (byte tokens) hands its bytes to the token that completes it; bytes that no
// character can hold become U+FFFD.
std::vector<std::string> TokenTexts(const Tokenizer& tokenizer, std::span<const Token> tokens);

// The kept mask of one head over positions [0, n_tokens) as alternating run lengths: removed,
// kept, removed, kept, ... (the first run may be 0; a trailing removed run is left out).
std::vector<int> KeptRuns(std::span<const int32_t> positions, int n_tokens);

// The endpoint's JSON (compact, no spaces). Lists of small numbers (each head's run lengths,
// each token's text length in UTF-16 code units) are strings of base64url digits, 5 bits each,
// lowest first, a digit of 32 or more ('g' onwards) saying that another follows: "B" is 1,
// "hB" is 33 (docs/server.md).
std::string CacheViewJson(const SessionStore::CacheSnapshot& snap, const Tokenizer& tokenizer);

}  // namespace primekv::server
