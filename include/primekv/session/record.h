// A conversation's state as one value: what a session file or a store holds of it
// (session/session_file.h), and what a Conversation (session/conversation.h) owns.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "primekv/kv/kv_cache.h"
#include "primekv/session/session.h"

namespace primekv {

// A conversation's state: what a session file holds.
struct ConversationRecord {
  std::string id{};             // a session file's name; 1 to 64 of [A-Za-z0-9_-] (ValidSessionId)
  std::string tenant{};         // the server's API-key tenant, empty without keys
  std::string cache_salt{};     // the server's isolation field: prefixes are shared only within it
  std::string press{};          // press spec text
  Schedule schedule{};          // a file keeps its ratio and mode
  int budget = 0;               // entries per head after each turn (multi-turn), 0 = none yet
  int last_prompt_len = 0;      // tokens before the last answer
  uint64_t turn = 0;            // completed turns: a shared store keeps only the newest
  std::vector<Token> tokens{};  // every token whose K/V went into the cache, in order
  std::optional<KvCache> cache{};  // absent while evicted, or when only the header was read
};

}  // namespace primekv
