// A conversation kept by `primekv serve` between turns: the session module's Conversation (its
// record holds the id, tenant, salt, press, ratio, budget, tokens, cache and turn counter), and
// what the session store keeps of it. The session store (session_store.h) owns them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "primekv/session/conversation.h"

namespace primekv::server {

struct Session {
  std::unique_ptr<Conversation> conv;  // its cache is absent while evicted to the store
  bool busy = false;
  bool claimed = false;    // a request naming it waits for a slot (another one gets 409 at once)
  bool persisted = false;  // the store (file or Redis) holds its last completed turn
  bool load = false;       // known by id only: its tokens and cache are read from the store
  uint64_t last_used = 0;
  size_t bytes = 0;     // accounted against the budget
  size_t reserved = 0;  // what its running turn reserved (accounted too)

  ConversationRecord& record() { return conv->record(); }
  const ConversationRecord& record() const { return conv->record(); }
};

}  // namespace primekv::server
