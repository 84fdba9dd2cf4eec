// One request of `primekv serve` as a turn of the session's Conversation
// (session/conversation.h): prefill, the decode loop with stop strings and streaming, and what
// the turn leaves in the store.
#include "server/turn.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "server/common.h"
#include "server/decode_batcher.h"
#include "server/server_metrics.h"
#include "server/session_store.h"

namespace primekv::server {

namespace {

// Length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
size_t Utf8SafeLength(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

}  // namespace

Turn::Turn(TurnParts parts, Session* session, TurnRequest request, int keep)
    : parts_(std::move(parts)), session_(session), req_(std::move(request)), keep_(keep) {}

Turn::~Turn() { parts_.finish(session_, ran_, modified_); }

const std::string& Turn::session_id() const { return session_->record().id; }

struct Turn::State {
  TurnOutcome out;
  int compressions = 0;  // the conversation's count when the turn began
  double prefill_s = 0, decode_s = 0;
  size_t emitted = 0;  // bytes of out.text sent to the sink
  bool client_gone = false;
};

Status Turn::Prefill(State& st) {
  Conversation& conv = *session_->conv;
  modified_ = true;
  // Cut the cache where the request departs from the session, then prefill the rest. A
  // conversation cut to nothing (or reset: a sliding-window layer had freed what the cut
  // needed) starts over, so its prompt is a first turn's.
  keep_ = static_cast<int>(conv.TruncateTo(static_cast<size_t>(keep_)));
  const bool first_turn = conv.tokens().empty();
  const std::span<const Token> fresh =
      std::span<const Token>(req_.prompt).subspan(static_cast<size_t>(keep_));
  st.out.prefilled_tokens = static_cast<int>(fresh.size());
  const auto t0 = std::chrono::steady_clock::now();
  const double compress_ms = conv.stats().compress_ms;
  // The first turn's prompt is the conversation's context: the schedule compresses after it.
  if (Status r = first_turn ? conv.PrefillContext(fresh) : conv.Prefill(fresh); !r.ok()) return r;
  // Decode steps run in the engine's batches, with their own buffers.
  conv.ReleaseWorkspace();
  conv.BeginAnswer();
  st.prefill_s = SecondsSince(t0);
  st.out.prefill_ms = st.prefill_s * 1e3 - (conv.stats().compress_ms - compress_ms);
  return Status::Ok();
}

void Turn::Emit(State& st, const TextSink& sink, bool all) {
  if (!sink || st.client_gone) return;
  size_t hold = 0;  // bytes held back while they could start a stop string
  for (const auto& stop : req_.stop) hold = std::max(hold, stop.size() - 1);
  size_t ready = Utf8SafeLength(st.out.text);
  ready = all ? st.out.text.size() : (ready > hold ? ready - hold : 0);
  if (ready > st.emitted) {
    st.client_gone = !sink(st.out.text.substr(st.emitted, ready - st.emitted));
    st.emitted = ready;
  }
}

// The answer's text so far, cut at the first stop string; true when one was found.
bool Turn::AppendText(State& st, Token next) {
  TurnOutcome& out = st.out;
  out.tokens.push_back(next);
  out.text = parts_.tokenizer.Decode(out.tokens, false);
  bool stop_hit = false;
  for (const auto& stop : req_.stop) {
    const size_t at = out.text.find(stop);
    if (at != std::string::npos) {
      out.text.resize(at);
      stop_hit = true;
    }
  }
  return stop_hit;
}

Status Turn::Decode(State& st, const TextSink& sink, const AliveCheck& alive) {
  Conversation& conv = *session_->conv;
  const auto t0 = std::chrono::steady_clock::now();
  bool stop_hit = false;
  DecodeOptions d;
  d.max_new_tokens = req_.max_tokens;
  d.sampler = req_.sampler;
  d.feed_last = true;  // the answer (its end token included) stays in the cache for the next turn
  d.reserve = req_.max_tokens;
  d.on_token = [&](Token next) {
    stop_hit = AppendText(st, next);
    Emit(st, sink, stop_hit);
    return !stop_hit && !st.client_gone;
  };
  d.keep_going = [&] {
    if (alive && !alive()) st.client_gone = true;
    return !st.client_gone;
  };
  // Each token runs in the engine's batched forward pass with the other decoding turns'.
  const auto feed = [&](Token next) {
    PRIMEKV_RETURN_IF_ERROR(parts_.batcher.Step(
        {.token = next, .cache = &conv.cache(), .tap = &conv.capture(), .drop_expired = true},
        conv.logits()));
    st.out.appended.push_back(next);
    return Status::Ok();
  };
  PRIMEKV_ASSIGN_OR_RETURN(const DecodeResult decoded, conv.Decode(d, feed));
  st.out.finish_reason = st.client_gone                       ? "cancelled"
                         : decoded.stopped_at_end || stop_hit ? "stop"
                                                              : "length";
  if (sink && !st.client_gone && st.out.text.size() > st.emitted)
    sink(st.out.text.substr(st.emitted));
  st.decode_s = SecondsSince(t0);
  return Status::Ok();
}

Status Turn::EndTurn(State& st) {
  Session& s = *session_;
  Conversation& conv = *s.conv;
  PRIMEKV_RETURN_IF_ERROR(conv.EndTurn());  // (counts the turn)
  // Compression returns pages to the cache's pool; a copy gives the memory back. A pool shared
  // with other sessions keeps them for those sessions' growth (a copy would duplicate pages).
  KvCache& cache = conv.cache();
  if (cache.PoolUsers() == 1 &&
      cache.BytesAllocated() > 2 * cache.BytesReserved() + (size_t{1} << 20)) {
    cache = cache.Clone();
  }
  // The logits and forward buffers are a turn's: an idle conversation holds its cache only.
  conv.ReleaseBuffers();
  // After every turn. A failed save is logged, counted and said in the answer
  // (`X-PrimeKV-Saved: false`): the turn is answered all the same, and lives in memory only.
  if (parts_.store.backend()) {
    const Status r = parts_.store.Persist(s);
    if (!r.ok()) std::fprintf(stderr, "primekv serve: %s\n", r.message().c_str());
    st.out.saved = r.ok() && !s.load;  // (load: another replica stored a newer turn first)
  }
  return Status::Ok();
}

// The turn's figures in the session's history, for the cache view.
void Turn::Record(const State& st, double compress_ms) {
  Session& s = *session_;
  const KvCache& cache = s.conv->cache();
  const auto n_tokens = s.conv->tokens().size();
  const TurnOutcome& out = st.out;
  if (s.turns.size() == Session::kMaxTurnFigures) s.turns.erase(s.turns.begin());
  s.turns.push_back(
      {.turn = s.record().turn,
       .tokens = static_cast<int>(n_tokens),
       .prompt_tokens = out.prompt_tokens,
       .cached_tokens = out.cached_tokens,
       .completion_tokens = static_cast<int>(out.tokens.size()),
       .prefill_ms = out.prefill_ms,
       .compress_ms = compress_ms,
       .decode_ms = out.decode_ms,
       .bytes_full = n_tokens * static_cast<size_t>(cache.n_layers() * cache.n_kv_heads()) *
                     cache.BytesPerEntry(),
       .bytes_kept = cache.BytesInUse()});
}

Result<TurnOutcome> Turn::Run(const TextSink& sink, const AliveCheck& alive) {
  Session& s = *session_;
  State st;
  st.compressions = s.conv->stats().compressions;
  const double compress_ms = s.conv->stats().compress_ms;
  st.out.session_id = s.record().id;
  st.out.prompt_tokens = static_cast<int>(req_.prompt.size());
  if (Status r = Prefill(st); !r.ok()) return r;
  st.out.cached_tokens = keep_;  // after the cut, which may have started the session over
  {
    parts_.batcher.Enter();
    const Status r = Decode(st, sink, alive);
    parts_.batcher.Leave();
    if (!r.ok()) return r;
  }
  st.out.decode_ms = st.decode_s * 1e3;
  if (Status r = EndTurn(st); !r.ok()) return r;
  st.out.compress_ms = s.conv->stats().compress_ms - compress_ms;
  Record(st, st.out.compress_ms);
  ran_ = true;
  const TurnOutcome& out = st.out;
  parts_.metrics.AddTurn(
      {.prompt_tokens = static_cast<uint64_t>(out.prompt_tokens),
       .cached_tokens = static_cast<uint64_t>(out.cached_tokens),
       .prefill_tokens = static_cast<uint64_t>(out.prefilled_tokens),
       .completion_tokens = out.tokens.size(),
       .prefill_seconds = st.prefill_s,
       .decode_seconds = st.decode_s,
       .compressions = static_cast<uint64_t>(s.conv->stats().compressions - st.compressions),
       .cancelled = st.client_gone ? 1u : 0u,
       .not_saved = out.saved && !*out.saved ? 1u : 0u});
  return std::move(st.out);
}

}  // namespace primekv::server
