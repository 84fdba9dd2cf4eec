// A conversation kept by `primekv serve` between turns: the session module's Conversation (its
// record holds the id, tenant, salt, press, ratio, budget, tokens, cache and turn counter), and
// what the session store keeps of it. The session store (session_store.h) owns them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "primekv/session/conversation.h"

namespace primekv::server {

// What one completed turn cost, for the web page's cache view (GET /v1/sessions/{id}/cache).
struct TurnFigures {
  uint64_t turn = 0;  // the conversation's turn counter after it
  int tokens = 0;     // session tokens after the turn
  int prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double prefill_ms = 0, compress_ms = 0, decode_ms = 0;
  size_t bytes_full = 0;  // the cache had nothing been removed: every token in every head
  size_t bytes_kept = 0;  // the live entries after the turn (KvCache::BytesInUse)
};

struct Session {
  std::unique_ptr<Conversation> conv;  // its cache is absent while evicted to the store
  bool busy = false;
  bool claimed = false;    // a request naming it waits for a slot (another one gets 409 at once)
  bool persisted = false;  // the store (file or Redis) holds its last completed turn
  bool load = false;       // known by id only: its tokens and cache are read from the store
  uint64_t last_used = 0;
  // The page pool its cache draws from, as the session store charges it against the budget
  // (once for all the sessions sharing it).
  std::weak_ptr<const void> kv_pool;
  size_t reserved = 0;  // what its running turn reserved (accounted too)
  // The last turns run in this process (not stored: a restored session starts without them).
  std::vector<TurnFigures> turns;
  static constexpr size_t kMaxTurnFigures = 64;

  const ConversationRecord& record() const { return conv->record(); }
};

}  // namespace primekv::server
