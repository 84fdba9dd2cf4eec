// A turn: one request run on its session, holding a slot, the session and its memory
// reservation until destroyed (turn.cc).
#pragma once

#include <functional>
#include <string>

#include "primekv/tokenizer/tokenizer.h"
#include "primekv/util/status.h"
#include "server/stored_session.h"
#include "server/turn_request.h"

namespace primekv::server {

class DecodeBatcher;  // server/decode_batcher.h
class SessionStore;   // server/session_store.h
class Metrics;        // server/server_metrics.h

// What a turn uses, handed to it by the engine: the tokenizer (the answer's text), the decode
// batcher (its steps), the store (persisting the session), the metrics, and what gives back
// the slot, the session and the memory when the turn is destroyed (ok, modified).
struct TurnParts {
  const Tokenizer& tokenizer;
  DecodeBatcher& batcher;
  SessionStore& store;
  Metrics& metrics;
  std::function<void(Session*, bool ok, bool modified)> finish;
};

// A request that holds a slot, its session (busy) and its memory reservation until destroyed.
class Turn {
 public:
  Turn(TurnParts parts, Session* session, TurnRequest request, int keep);
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;
  ~Turn();
  const std::string& session_id() const;
  // Runs prefill and decode; `sink` (optional) receives text as it is generated, `alive`
  // (optional) says whether a non-streaming client is still there.
  Result<TurnOutcome> Run(const TextSink& sink, const AliveCheck& alive = nullptr);

 private:
  struct State;  // one Run's working state (engine.cc)
  Status Prefill(State& st);
  Status Decode(State& st, const TextSink& sink, const AliveCheck& alive);
  // Emits what is ready of st.out.text (held back while it could start a stop string).
  void Emit(State& st, const TextSink& sink, bool all);
  bool AppendText(State& st, Token next);
  Status EndTurn(State& st);
  void Record(const State& st, double compress_ms);

  TurnParts parts_;
  Session* session_;
  TurnRequest req_;
  int keep_;               // session tokens kept (the rest of the prompt is prefilled)
  bool ran_ = false;       // Run completed
  bool modified_ = false;  // Run changed the session (if it then failed, the state is suspect)
};

}  // namespace primekv::server
