// pk_session_* entry points: a conversation as the engine's Conversation runs it, and its
// session files, which `primekv serve --session-dir` reads.
#include <algorithm>
#include <chrono>
#include <string>

#include "capi/capi_internal.h"
#include "primekv/press/profile_locator.h"
#include "primekv/session/pipeline.h"
#include "primekv/session/session_file.h"

namespace primekv::capi {

namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

KvCacheOptions CacheOptions(const pk_session_options& o) {
  KvCacheOptions kv;
  kv.dtype = o.kv_q8 != 0 ? KvDType::kQ8_0 : KvDType::kF16;
  return kv;
}

// A session's context size: ctx_size, or the model's trained context when 0. The limits are
// ResolveContextSize's, checked here first because its messages name the command line's flags
// (--ctx-size, --allow-ctx-overflow), which a C or Python caller does not have.
Result<int> SessionContextSize(const ModelConfig& c, int64_t requested) {
  if (requested > kMaxContextSize) {
    return Status::Error("ctx_size " + std::to_string(requested) + " exceeds the limit of " +
                         std::to_string(kMaxContextSize) + " tokens");
  }
  if (requested == 0 && c.max_context <= 0)
    return Status::Error("the model states no trained context length: set ctx_size");
  if (c.max_context > 0 && requested > c.max_context) {
    return Status::Error("ctx_size " + std::to_string(requested) +
                         " exceeds the model's trained context of " +
                         std::to_string(c.max_context) + " tokens");
  }
  return ResolveContextSize(c, requested, false, nullptr);
}

// Builds a session's compressor and Conversation over `record` (a loaded one, or a new one
// whose press and schedule ratio are set) with the mode `mode_text`.
pk_status MakeSession(pk_model* model, const pk_session_options& o,
                      primekv::ConversationRecord record, const std::string& mode_text,
                      pk_session** out) {
  constexpr const char* kWhere = "pk_session_new";
  const double ratio = record.schedule.ratio;
  PK_REQUIRE(ratio >= 0 && ratio < 1, kWhere, "ratio must be in [0, 1)");
  const auto mode = ParseScheduleMode(mode_text);
  PK_REQUIRE(
      mode.has_value(), kWhere,
      "unknown mode '" + mode_text + "' (a session runs context, chunked, decode or multiturn)");
  PK_REQUIRE(o.chunk >= 1 && o.interval >= 1, kWhere, "chunk and interval must be >= 1");
  PK_REQUIRE(o.n_threads >= 0 && o.n_threads <= 1024, kWhere, "n_threads must be in [0, 1024]");
  PK_REQUIRE(o.ctx_size >= 0, kWhere, "ctx_size must be >= 0");
  PK_REQUIRE(o.kv_q8 == 0 || o.kv_q8 == 1, kWhere, "kv_q8 must be 0 or 1");
  // profile=auto: the profile beside the model's file, else the cached one (the record keeps
  // the file's path, so a saved session names the profile it ran with).
  auto resolved = ResolveAutoProfile(record.press, model->model.path());
  if (!resolved.ok()) return FromStatus(kWhere, resolved.status());
  record.press = std::move(resolved).value();
  auto spec = ParsePressSpec(record.press);
  if (!spec.ok()) return FromStatus(kWhere, spec.status());
  auto made = MakePress(*spec);
  if (!made.ok()) return FromStatus(kWhere, made.status());
  auto ctx = SessionContextSize(model->model.config(), o.ctx_size);
  if (!ctx.ok()) return FromStatus(kWhere, ctx.status());
  const Model& m = ModelForContext(*model, *ctx);

  auto s = std::make_unique<pk_session>();
  s->owner = Retain(model);
  s->ctx_size = *ctx;
  record.schedule = {.ratio = ratio, .mode = *mode, .chunk = o.chunk, .interval = o.interval};
  s->compressor = std::make_unique<Compressor>(m, std::move(made).value());
  if (const Status& fits = s->compressor->CheckModel(); !fits.ok()) return FromStatus(kWhere, fits);
  if (Status st = CheckSchedule(s->compressor->press(), record.schedule); !st.ok())
    return FromStatus(kWhere, st);
  if (Status st = CheckKvDType(CacheOptions(o).dtype, m.config().head_dim); !st.ok())
    return FromStatus(kWhere, st);
  s->pool = std::make_unique<ThreadPool>(o.n_threads);
  s->conv = std::make_unique<Conversation>(m, *s->compressor, *s->pool, std::move(record),
                                           CacheOptions(o));
  *out = s.release();
  return PK_OK;
}

// Tokens a caller hands in: room for them in the context (checked first, so a count longer
// than the caller's array is refused before any id is read), and in the vocabulary.
pk_status CheckFeed(const char* where, const pk_session* s, const int32_t* tokens, size_t n) {
  PK_REQUIRE(tokens != nullptr || n == 0, where, "tokens is NULL");
  PK_REQUIRE(n > 0, where, "no tokens");
  const size_t held = s->conv->tokens().size();
  if (n > static_cast<size_t>(s->ctx_size) - std::min(held, size_t(s->ctx_size)))
    return Fail(PK_ERR_STATE, std::string(where) + ": " + std::to_string(n) + " tokens after " +
                                  std::to_string(held) + " do not fit the context size of " +
                                  std::to_string(s->ctx_size));
  const int vocab = s->owner->model.config().vocab_size;
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return Fail(PK_ERR_ARGUMENT, std::string(where) + ": token " + std::to_string(tokens[i]) +
                                       " at " + std::to_string(i) + " is outside [0, " +
                                       std::to_string(vocab) + ")");
  }
  return PK_OK;
}

pk_status Feed(const char* where, pk_session* s, const int32_t* tokens, size_t n, bool context) {
  const SessionUse use(s);
  if (pk_status u = use.Check(where); u != PK_OK) return u;
  if (pk_status c = CheckFeed(where, s, tokens, n); c != PK_OK) return c;
  const std::span<const Token> ids(tokens, n);
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = context ? s->conv->PrefillContext(ids) : s->conv->Prefill(ids);
  s->timings.prefill_ms += MsSince(t0);
  s->timings.prefill_tokens += static_cast<int64_t>(n);
  // A failed forward pass may have left part of the tokens in the cache: the session is unusable
  // for continuing, but its cache stays consistent with what it reports.
  if (!st.ok()) return FromStatus(where, st, PK_ERR_INTERNAL);
  s->has_logits = true;
  return PK_OK;
}

Result<SamplerOptions> Sampling(const pk_generate_options& g) {
  SamplerOptions so{g.temperature, g.top_k, g.top_p, g.seed};
  PRIMEKV_RETURN_IF_ERROR(ValidateSamplerOptions(so));
  return so;
}

pk_status Generate(pk_session* s, const pk_generate_options& g, int32_t* out, size_t capacity,
                   size_t* n_out) {
  constexpr const char* kWhere = "pk_session_generate";
  PK_REQUIRE(g.max_tokens >= 0, kWhere, "max_tokens must be >= 0");
  PK_REQUIRE(out != nullptr || capacity == 0, kWhere, "tokens is NULL");
  // At most the free context can be generated, so the buffer needs only that much.
  const auto room =
      static_cast<int64_t>(s->ctx_size) - static_cast<int64_t>(s->conv->tokens().size());
  const int64_t most = std::min<int64_t>(g.max_tokens, std::max<int64_t>(room, 0));
  if (capacity < static_cast<size_t>(most))
    return Fail(PK_ERR_BUFFER, std::string(kWhere) + ": a buffer of " + std::to_string(capacity) +
                                   " cannot hold the " + std::to_string(most) +
                                   " tokens max_tokens allows in the free context");
  if (!s->has_logits)
    return Fail(PK_ERR_STATE, std::string(kWhere) + ": feed at least one token first");
  auto sampler = Sampling(g);
  if (!sampler.ok()) return FromStatus(kWhere, sampler.status());
  if (g.max_tokens > 0 && room <= 0)
    return Fail(PK_ERR_STATE, std::string(kWhere) + ": the context of " +
                                  std::to_string(s->ctx_size) + " positions is full");
  s->conv->BeginAnswer();
  DecodeOptions d;
  d.max_new_tokens = static_cast<int>(std::min<int64_t>(g.max_tokens, room));
  d.sampler = *sampler;
  d.feed_last = g.feed_last != 0;
  d.reserve = d.max_new_tokens;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = s->conv->Decode(d);
  s->timings.decode_ms += MsSince(t0);
  // Without feed_last the last sampled token is not in the cache, so there is nothing to sample
  // from until the caller feeds it.
  if (!d.feed_last && d.max_new_tokens > 0) s->has_logits = false;
  if (!r.ok()) return FromStatus(kWhere, r.status(), PK_ERR_INTERNAL);
  s->timings.decode_tokens += static_cast<int64_t>(r->tokens.size());
  std::copy(r->tokens.begin(), r->tokens.end(), out);
  *n_out = r->tokens.size();
  return PK_OK;
}

}  // namespace

}  // namespace primekv::capi

using primekv::capi::Fail;
using primekv::capi::FromStatus;
using primekv::capi::Guard;

extern "C" {

pk_session_options pk_session_options_default(void) {
  return {.press = nullptr,
          .ratio = 0.0,
          .mode = nullptr,
          .chunk = 512,
          .interval = 512,
          .n_threads = 0,
          .ctx_size = 0,
          .kv_q8 = 0};
}

pk_generate_options pk_generate_options_default(void) {
  return {
      .max_tokens = 128, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0, .feed_last = 0};
}

pk_status pk_session_new(pk_model* model, const pk_session_options* options, pk_session** out) {
  return Guard("pk_session_new", [&] {
    PK_REQUIRE(out != nullptr, "pk_session_new", "out is NULL");
    *out = nullptr;
    PK_REQUIRE(model != nullptr, "pk_session_new", "model is NULL");
    const pk_session_options o = options != nullptr ? *options : pk_session_options_default();
    primekv::ConversationRecord record;
    record.press = o.press != nullptr ? o.press : "none";
    record.schedule.ratio = o.ratio;
    return primekv::capi::MakeSession(model, o, std::move(record),
                                      o.mode != nullptr ? o.mode : "context", out);
  });
}

void pk_session_free(pk_session* session) { delete session; }

pk_status pk_session_feed(pk_session* s, const int32_t* tokens, size_t n) {
  return Guard("pk_session_feed",
               [&] { return primekv::capi::Feed("pk_session_feed", s, tokens, n, false); });
}

pk_status pk_session_feed_context(pk_session* s, const int32_t* tokens, size_t n) {
  return Guard("pk_session_feed_context",
               [&] { return primekv::capi::Feed("pk_session_feed_context", s, tokens, n, true); });
}

pk_status pk_session_compress(pk_session* s, double ratio) {
  return Guard("pk_session_compress", [&] {
    const primekv::capi::SessionUse use(s);
    if (pk_status u = use.Check("pk_session_compress"); u != PK_OK) return u;
    if (ratio < 0) ratio = s->conv->schedule().ratio;
    PK_REQUIRE(ratio < 1, "pk_session_compress", "ratio must be in [0, 1)");
    return FromStatus("pk_session_compress", s->conv->CompressNow(ratio), PK_ERR_STATE);
  });
}

pk_status pk_session_generate(pk_session* s, const pk_generate_options* options, int32_t* tokens,
                              size_t capacity, size_t* n_out) {
  return Guard("pk_session_generate", [&] {
    const primekv::capi::SessionUse use(s);
    if (pk_status u = use.Check("pk_session_generate"); u != PK_OK) return u;
    PK_REQUIRE(n_out != nullptr, "pk_session_generate", "n_out is NULL");
    *n_out = 0;
    const pk_generate_options g = options != nullptr ? *options : pk_generate_options_default();
    return primekv::capi::Generate(s, g, tokens, capacity, n_out);
  });
}

pk_status pk_session_end_turn(pk_session* s) {
  return Guard("pk_session_end_turn", [&] {
    const primekv::capi::SessionUse use(s);
    if (pk_status u = use.Check("pk_session_end_turn"); u != PK_OK) return u;
    return FromStatus("pk_session_end_turn", s->conv->EndTurn(), PK_ERR_STATE);
  });
}

pk_status pk_session_n_tokens(const pk_session* s, size_t* out) {
  const primekv::capi::SessionUse use(s);
  if (pk_status u = use.Check("pk_session_n_tokens"); u != PK_OK) return u;
  PK_REQUIRE(out != nullptr, "pk_session_n_tokens", "NULL argument");
  *out = s->conv->tokens().size();
  return PK_OK;
}

pk_status pk_session_tokens(const pk_session* s, int32_t* tokens, size_t capacity, size_t* n) {
  const primekv::capi::SessionUse use(s);
  if (pk_status u = use.Check("pk_session_tokens"); u != PK_OK) return u;
  PK_REQUIRE(n != nullptr, "pk_session_tokens", "NULL argument");
  PK_REQUIRE(tokens != nullptr || capacity == 0, "pk_session_tokens", "tokens is NULL");
  const std::vector<primekv::Token>& held = s->conv->tokens();
  *n = held.size();
  if (held.size() > capacity)
    return Fail(PK_ERR_BUFFER, "pk_session_tokens: " + std::to_string(held.size()) +
                                   " tokens do not fit a buffer of " + std::to_string(capacity));
  std::copy(held.begin(), held.end(), tokens);
  return PK_OK;
}

pk_status pk_session_kv_bytes(const pk_session* s, size_t* out) {
  const primekv::capi::SessionUse use(s);
  if (pk_status u = use.Check("pk_session_kv_bytes"); u != PK_OK) return u;
  PK_REQUIRE(out != nullptr, "pk_session_kv_bytes", "NULL argument");
  *out = s->conv->cache().BytesInUse();
  return PK_OK;
}

pk_status pk_session_kv_entries(const pk_session* s, int64_t* out) {
  const primekv::capi::SessionUse use(s);
  if (pk_status u = use.Check("pk_session_kv_entries"); u != PK_OK) return u;
  PK_REQUIRE(out != nullptr, "pk_session_kv_entries", "NULL argument");
  *out = s->conv->cache().TotalEntries();
  return PK_OK;
}

pk_status pk_session_get_timings(const pk_session* s, pk_timings* out) {
  const primekv::capi::SessionUse use(s);
  if (pk_status u = use.Check("pk_session_get_timings"); u != PK_OK) return u;
  PK_REQUIRE(out != nullptr, "pk_session_get_timings", "NULL argument");
  *out = s->timings;
  out->score_ms = s->conv->stats().score_ms;
  out->compressions = s->conv->stats().compressions;
  return PK_OK;
}

pk_status pk_session_save(const pk_session* s, const char* dir, const char* id) {
  return Guard("pk_session_save", [&] {
    const primekv::capi::SessionUse use(s);
    if (pk_status u = use.Check("pk_session_save"); u != PK_OK) return u;
    PK_REQUIRE(dir != nullptr && id != nullptr, "pk_session_save", "NULL argument");
    PK_REQUIRE(*dir != '\0', "pk_session_save",
               "dir is empty (use \".\" for the current directory)");
    PK_REQUIRE(primekv::ValidSessionId(id), "pk_session_save",
               "id must be 1 to 64 characters of [A-Za-z0-9_-]");
    // The id names the file only: the session keeps the one it had (if any) for a later save.
    const primekv::Status st = s->conv->SaveAs(dir, id);
    return FromStatus("pk_session_save", st, PK_ERR_IO);
  });
}

pk_status pk_session_load(pk_model* model, const char* path, const pk_session_options* options,
                          pk_session** out) {
  return Guard("pk_session_load", [&] {
    PK_REQUIRE(out != nullptr, "pk_session_load", "out is NULL");
    *out = nullptr;
    PK_REQUIRE(model != nullptr && path != nullptr, "pk_session_load", "NULL argument");
    const pk_session_options o = options != nullptr ? *options : pk_session_options_default();
    PK_REQUIRE(o.kv_q8 == 0 || o.kv_q8 == 1, "pk_session_load", "kv_q8 must be 0 or 1");
    primekv::ImageExtent extent;
    auto record = primekv::ReadSessionFile(path, model->model, primekv::capi::CacheOptions(o),
                                           false, &extent);
    if (!record.ok()) return Fail(PK_ERR_IO, "pk_session_load: " + record.message());
    const std::string mode(primekv::ScheduleModeName(record->schedule.mode));
    pk_session* s = nullptr;
    const pk_status made =
        primekv::capi::MakeSession(model, o, std::move(record).value(), mode, &s);
    if (made != PK_OK) return made;
    // A later save to the same file appends its turns (session/session_file.h).
    if (extent.stored == s->conv->cache().dtype())
      s->conv->SetStored(primekv::DescribeStored(s->conv->record(), path, extent));
    if (s->conv->tokens().size() > static_cast<size_t>(s->ctx_size)) {
      pk_session_free(s);
      return Fail(PK_ERR_STATE, "pk_session_load: the session's tokens exceed the context size");
    }
    *out = s;
    return PK_OK;
  });
}

}  // extern "C"
