/* PrimeKV's C API: load a GGUF model, run conversations over compressed KV caches, and score a
 * press on caller-owned arrays. Plain C (C11 and C++), opaque handles, no C++ types across the
 * boundary; built as libprimekv_c.so (src/capi/). docs/python.md shows the Python module on it.
 *
 * Errors: every call that can fail returns a pk_status; PK_OK is 0. The message of the last
 * failed call on this thread is pk_last_error() (valid until this thread's next failing call).
 * A null handle or pointer where one is required is PK_ERR_ARGUMENT, never a crash. A handle
 * used after its pk_*_free is undefined behaviour, as with free(): the Python module guards it.
 *
 * Lifetime: a model is reference-counted. pk_model_free drops the caller's reference and every
 * session holds one, so a session stays usable after pk_model_free of its model, and the model
 * is freed with its last session. The caller must not use the pk_model handle after freeing it.
 *
 * Threads: a pk_model may be shared by any number of sessions on any threads. A pk_session takes
 * one call at a time: a call made while another call on the same session is running (on another
 * thread) fails at once with PK_ERR_STATE and leaves the session untouched. pk_session_free must
 * not race a call on the same session. Sessions run their forward passes on threads of their own.
 *
 * Versioning: PK_API_VERSION changes whenever a declaration here changes incompatibly; a
 * program checks pk_api_version() == PK_API_VERSION at start. Structs passed in are
 * initialised with their pk_*_default() functions, so fields added later get defaults. */
#ifndef PRIMEKV_H
#define PRIMEKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PK_API __attribute__((visibility("default")))
#else
#define PK_API
#endif

#define PK_API_VERSION 1

typedef enum pk_status {
  PK_OK = 0,
  PK_ERR_ARGUMENT = 1, /* a null pointer, a bad shape, size or value, a press spec error */
  PK_ERR_IO = 2,       /* a file cannot be read or written, or is damaged */
  PK_ERR_STATE = 3,    /* the call does not fit the session's state (context full, ...) */
  PK_ERR_BUFFER = 4,   /* an output buffer is too small: *needed says how large it must be */
  PK_ERR_INTERNAL = 5  /* out of memory or an engine failure */
} pk_status;

typedef struct pk_model pk_model;
typedef struct pk_session pk_session;

PK_API int pk_api_version(void);
/* The engine's version, e.g. "0.1.0". */
PK_API const char* pk_version(void);
/* The message of this thread's last failed call ("" when none failed). */
PK_API const char* pk_last_error(void);

/* ---- models ---- */

typedef struct pk_model_info {
  const char* arch; /* "llama", "qwen2", ...; valid while the model lives */
  int n_layers, d_model, n_heads, n_kv_heads, head_dim, vocab_size;
  int context_length; /* the trained context */
  int32_t bos, eos;   /* -1 when the model has none */
} pk_model_info;

PK_API pk_status pk_model_load(const char* path, pk_model** out);
PK_API void pk_model_free(pk_model* model);
PK_API pk_status pk_model_get_info(const pk_model* model, pk_model_info* out);

/* Text to token ids, as `primekv generate -p` encodes a prompt (add_bos: a leading BOS). Writes
 * at most `capacity` ids; *n_tokens gets the count (PK_ERR_BUFFER when capacity is short). */
PK_API pk_status pk_tokenize(const pk_model* model, const char* text, size_t text_len, int add_bos,
                             int32_t* tokens, size_t capacity, size_t* n_tokens);
/* Token ids to UTF-8 text, not NUL-terminated; *text_len gets the byte count (PK_ERR_BUFFER
 * when capacity is short: call again with *text_len bytes). */
PK_API pk_status pk_detokenize(const pk_model* model, const int32_t* tokens, size_t n_tokens,
                               char* text, size_t capacity, size_t* text_len);

/* ---- presses ---- */

PK_API size_t pk_press_count(void);
/* The i-th press of the registry ("primekv", "keydiff", ...), NULL past the end; static. */
PK_API const char* pk_press_name(size_t i);
/* 1 when the press scores without queries (it may compress during chunked prefill); 0 for the
 * budget wrapper row "adakv:<press>", which is as query-free as the press it wraps. */
PK_API int pk_press_query_free(size_t i);

/* ---- sessions: one conversation over one KV cache ---- */

typedef struct pk_session_options {
  /* press spec, e.g. "primekv", "snapkv:window=32", "primekv:profile=auto" (the budget profile
   * beside the model file or cached by `primekv calibrate -m MODEL`); NULL = "none" */
  const char* press;
  double ratio;      /* fraction of the cache a compression removes, [0, 1) */
  /* When the session compresses by itself (besides pk_session_compress): "context" (after
   * pk_session_feed_context), "multiturn" (and after each turn back to that budget),
   * "chunked", "decode"; NULL = "context". Any other name is refused (PK_ERR_ARGUMENT), the eval
   * protocols of `primekv generate --mode` ("question", "first-question") included. */
  const char* mode;
  int chunk;     /* chunked: tokens per prefill chunk (default 512) */
  int interval;  /* decode: generated tokens between compressions (default 512) */
  int n_threads; /* forward-pass threads of this session; 0 = all cores */
  int ctx_size;  /* positions the session may use; 0 = the model's trained context */
  int kv_q8;     /* 1: an 8-bit (Q8_0) cache instead of F16; 0 or 1, else PK_ERR_ARGUMENT */
} pk_session_options;

typedef struct pk_generate_options {
  int max_tokens;    /* default 128 */
  float temperature; /* 0 = greedy (default) */
  int top_k;         /* 0 = off */
  float top_p;       /* 1 = off */
  uint64_t seed;     /* default 0 */
  int feed_last;     /* 1: the last token enters the cache too (a next turn follows) */
} pk_generate_options;

typedef struct pk_timings {
  double prefill_ms, decode_ms, score_ms;
  int64_t prefill_tokens, decode_tokens;
  int compressions;
} pk_timings;

PK_API pk_session_options pk_session_options_default(void);
PK_API pk_generate_options pk_generate_options_default(void);

PK_API pk_status pk_session_new(pk_model* model, const pk_session_options* options,
                                pk_session** out);
PK_API void pk_session_free(pk_session* session);

/* Runs tokens through the model into the cache; no compression. n_tokens is checked against
 * the free context before any id is read. */
PK_API pk_status pk_session_feed(pk_session* session, const int32_t* tokens, size_t n_tokens);
/* The conversation's context: prefilled and compressed by the session's mode (in chunks for
 * "chunked"), which sets the multi-turn budget. A server's first turn does this. */
PK_API pk_status pk_session_feed_context(pk_session* session, const int32_t* tokens,
                                         size_t n_tokens);
/* Compresses the whole cache now by the session's press and `ratio` ([0, 1); a negative value
 * means the session's ratio). */
PK_API pk_status pk_session_compress(pk_session* session, double ratio);
/* Samples up to max_tokens from the last fed token's distribution, feeding each back, never
 * past the context size. `capacity` must hold min(max_tokens, free context) ids (else
 * PK_ERR_BUFFER); *n_out gets the count of generated ids (end token excluded). */
PK_API pk_status pk_session_generate(pk_session* session, const pk_generate_options* options,
                                     int32_t* tokens, size_t capacity, size_t* n_out);
/* After a turn: a "multiturn" session over its budget compresses back to it. */
PK_API pk_status pk_session_end_turn(pk_session* session);

/* Tokens in the conversation so far (fed and generated-and-fed). */
PK_API pk_status pk_session_n_tokens(const pk_session* session, size_t* out);
/* Copies the conversation's tokens; as pk_tokenize for capacity. */
PK_API pk_status pk_session_tokens(const pk_session* session, int32_t* tokens, size_t capacity,
                                   size_t* n_tokens);
/* Bytes the KV cache holds now. */
PK_API pk_status pk_session_kv_bytes(const pk_session* session, size_t* out);
/* Entries the cache keeps, summed over layers and KV heads. */
PK_API pk_status pk_session_kv_entries(const pk_session* session, int64_t* out);
PK_API pk_status pk_session_get_timings(const pk_session* session, pk_timings* out);

/* Writes `dir/<id>.pkvs` (dir must exist and not be ""; "." is the current directory) in the format
 * of `primekv serve --session-dir`: a server with that directory continues the conversation by its
 * id. A new session is written without a tenant (a server without API keys serves it); a loaded one
 * keeps the tenant and cache_salt it had. */
PK_API pk_status pk_session_save(const pk_session* session, const char* dir, const char* id);
/* Opens a session file (written by pk_session_save or by a server); press,
 * ratio, mode and budget come from the file, threads and context size from `options` (NULL =
 * defaults). */
PK_API pk_status pk_session_load(pk_model* model, const char* path,
                                 const pk_session_options* options, pk_session** out);

/* ---- scoring a press on a caller's arrays (no model) ---- */

/* One layer, row-major float32 / int32. Optional arrays are NULL with count 0. */
typedef struct pk_score_input {
  int n_heads, n_kv_heads, head_dim;
  int n;                           /* entries per KV head */
  const float* keys;               /* [n_kv_heads, n, head_dim], after RoPE */
  const float* values;             /* [n_kv_heads, n, head_dim] */
  const int32_t* positions;        /* [n], ascending; NULL = 0 .. n-1 */
  int32_t next_position;           /* position of the next token; < 0 = n */
  float rope_base;                 /* 0 = 10000 */
  int rope_half;                   /* 1: NeoX order (pairs i, i + d/2) */
  int layer, n_layers;             /* 0, 0 = one layer */
  const float* window_queries;     /* [n_window, n_heads * head_dim], after RoPE */
  const int32_t* window_positions; /* [n_window] */
  int n_window;
  const float* wo;                  /* W_O [d_model, n_heads * head_dim] */
  int d_model;                      /* 0 = n_heads * head_dim */
  const float* context_queries;     /* [n_context, n_heads * head_dim], before RoPE */
  const int32_t* context_positions; /* [n_context] */
  int n_context;
  const float* future_queries; /* [n_future, n_heads * head_dim], after RoPE (oracle) */
  int n_future;
} pk_score_input;

PK_API pk_score_input pk_score_input_default(void);
/* Scores [n_kv_heads * n] (higher = keep) of press spec `press`, as the engine's compressor
 * would score this layer. capacity must be at least n_kv_heads * n. Every press but KVzip
 * (whose scores come from a second pass of the model) can be scored so; a press whose input is
 * missing (SnapKV without window queries, PrimeKV without W_O) is PK_ERR_ARGUMENT. */
PK_API pk_status pk_score(const char* press, const pk_score_input* input, float* scores,
                          size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* PRIMEKV_H */
