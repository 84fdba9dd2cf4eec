// A conversation kept by `primekv serve` between turns (primekv::Session is the schedule and
// decode loop a turn runs on it). The session store (session_store.h) owns them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "primekv/kv/kv_cache.h"
#include "primekv/press/compressor.h"
#include "primekv/tokenizer/tokenizer.h"

namespace primekv::server {

struct Session {
  std::string id;
  std::string tenant;
  std::string cache_salt;
  std::string press;
  double ratio = 0;
  int budget = 0;
  int last_prompt_len = 0;
  std::vector<Token> tokens;       // every token whose K/V went into the cache, in order
  std::unique_ptr<KvCache> cache;  // null while evicted to disk
  std::unique_ptr<PressCapture> capture;
  uint64_t turn = 0;  // completed turns (the store's compare-and-set counter)
  bool busy = false;
  bool claimed = false;    // a request naming it waits for a slot (another one gets 409 at once)
  bool persisted = false;  // the store (file or Redis) holds its last completed turn
  bool load = false;       // known by id only: its tokens and cache are read from the store
  uint64_t last_used = 0;
  size_t bytes = 0;     // accounted against the budget
  size_t reserved = 0;  // what its running turn reserved (accounted too)
};

}  // namespace primekv::server
