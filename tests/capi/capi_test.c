/* The C API from C11: a conversation on the reference model (greedy generation, compression,
 * a saved session continued to the same tokens as the live one, timings), the press registry,
 * pk_score against a hand computation, and a table of hostile arguments, each of which must
 * come back as its status with a message, never a crash; the lifetime and threading rules of
 * the header (a session outlives pk_model_free; a second concurrent call on a session is
 * refused with PK_ERR_STATE, never let into the cache), checked from threads.
 * Usage: capi_test MODEL.gguf TMPDIR */
/* POSIX threads, not C11's thrd_create: glibc's thrd_create bypasses ThreadSanitizer's
 * pthread_create interceptor, and the test runs under TSan (scripts/test.sh tsan). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "primekv.h"

static int failures = 0;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              pk_last_error());                                                                \
      ++failures;                                                                              \
    }                                                                                          \
  } while (0)

#define OK(call) CHECK((call) == PK_OK)

enum { kMaxTokens = 24 };

/* A conversation: context, greedy answer kept in the cache, a question, a second answer. */
static void Conversation(pk_model* model, const char* dir) {
  const char* text = "The secret number is 4721. Remember it. The secret number is";
  int32_t ctx[256];
  size_t n_ctx = 0;
  OK(pk_tokenize(model, text, strlen(text), 1, ctx, 256, &n_ctx));
  CHECK(n_ctx > 8 && n_ctx < 256);

  pk_session_options so = pk_session_options_default();
  so.press = "primekv";
  so.ratio = 0.5;
  so.mode = "multiturn";
  so.n_threads = 1;
  pk_session* s = NULL;
  OK(pk_session_new(model, &so, &s));
  OK(pk_session_feed_context(s, ctx, n_ctx));
  int64_t entries = 0;
  pk_model_info info;
  OK(pk_model_get_info(model, &info));
  OK(pk_session_kv_entries(s, &entries));
  /* KVPress's count per head, max(1, floor(n * (1 - ratio))), over layers and KV heads. */
  CHECK(entries == (int64_t)info.n_layers * info.n_kv_heads * (int64_t)(n_ctx / 2));

  pk_generate_options g = pk_generate_options_default();
  g.max_tokens = 8;
  g.feed_last = 1;
  int32_t answer[kMaxTokens];
  size_t n_answer = 0;
  OK(pk_session_generate(s, &g, answer, kMaxTokens, &n_answer));
  CHECK(n_answer >= 1 && n_answer <= 8);
  OK(pk_session_end_turn(s));
  OK(pk_session_save(s, dir, "c11"));

  const char* q = " What is the secret number?";
  int32_t qt[64];
  size_t n_q = 0;
  OK(pk_tokenize(model, q, strlen(q), 0, qt, 64, &n_q));
  OK(pk_session_feed(s, qt, n_q));
  int32_t live[kMaxTokens], restored[kMaxTokens];
  size_t n_live = 0, n_restored = 0;
  g.feed_last = 0;
  OK(pk_session_generate(s, &g, live, kMaxTokens, &n_live));

  char path[4096];
  snprintf(path, sizeof(path), "%s/c11.pkvs", dir);
  pk_session* back = NULL;
  pk_session_options lo = pk_session_options_default();
  lo.n_threads = 1;
  OK(pk_session_load(model, path, &lo, &back));
  if (back != NULL) {
    size_t n_tok = 0;
    OK(pk_session_n_tokens(back, &n_tok));
    CHECK(n_tok == n_ctx + n_answer + 1 || n_tok == n_ctx + n_answer); /* the end token, if fed */
    OK(pk_session_feed(back, qt, n_q));
    OK(pk_session_generate(back, &g, restored, kMaxTokens, &n_restored));
    CHECK(n_restored == n_live && memcmp(live, restored, n_live * sizeof(int32_t)) == 0);
    /* Without feed_last the last token is not in the cache: generating again is refused. */
    CHECK(pk_session_generate(back, &g, restored, kMaxTokens, &n_restored) == PK_ERR_STATE);
    pk_session_free(back);
  }
  pk_timings t;
  OK(pk_session_get_timings(s, &t));
  CHECK(t.compressions >= 1 && t.prefill_tokens == (int64_t)(n_ctx + n_q) && t.decode_ms > 0);
  size_t bytes = 0;
  OK(pk_session_kv_bytes(s, &bytes));
  CHECK(bytes > 0);
  char out[512];
  size_t n_out = 0;
  OK(pk_detokenize(model, live, n_live, out, sizeof(out), &n_out));
  CHECK(pk_detokenize(model, live, n_live, out, 0, &n_out) == (n_out ? PK_ERR_BUFFER : PK_OK));
  pk_session_free(s);
}

/* KNorm's score is -|k|: checkable by hand. */
static void Score(void) {
  enum { H = 2, N = 5, D = 4 };
  float keys[H * N * D], values[H * N * D], scores[H * N];
  for (int i = 0; i < H * N * D; ++i) {
    keys[i] = (float)((i * 37) % 11) - 5.0f;
    values[i] = (float)((i * 13) % 7) - 3.0f;
  }
  pk_score_input x = pk_score_input_default();
  x.n_heads = 4;
  x.n_kv_heads = H;
  x.head_dim = D;
  x.n = N;
  x.keys = keys;
  x.values = values;
  OK(pk_score("knorm", &x, scores, H * N));
  for (int i = 0; i < H * N; ++i) {
    double sq = 0;
    for (int a = 0; a < D; ++a) sq += (double)keys[i * D + a] * keys[i * D + a];
    CHECK(fabs(scores[i] + sqrt(sq)) < 1e-5);
  }
  /* Hostile inputs to pk_score: each a status and a message. */
  pk_score_input bad = x;
  bad.n = -1;
  CHECK(pk_score("knorm", &bad, scores, H * N) == PK_ERR_ARGUMENT);
  bad = x;
  bad.n_heads = 3; /* not a multiple of n_kv_heads */
  CHECK(pk_score("knorm", &bad, scores, H * N) == PK_ERR_ARGUMENT);
  bad = x;
  bad.head_dim = 3;
  CHECK(pk_score("knorm", &bad, scores, H * N) == PK_ERR_ARGUMENT);
  bad = x;
  bad.keys = NULL;
  CHECK(pk_score("knorm", &bad, scores, H * N) == PK_ERR_ARGUMENT);
  bad = x;
  bad.n = 1 << 30; /* too large, before any product overflows */
  CHECK(pk_score("knorm", &bad, scores, H * N) == PK_ERR_ARGUMENT);
  bad = x;
  bad.n_window = 2; /* a count without its array */
  CHECK(pk_score("knorm", &bad, scores, H * N) == PK_ERR_ARGUMENT);
  CHECK(pk_score("knorm", &x, scores, H * N - 1) == PK_ERR_BUFFER);
  CHECK(pk_score("knorm", &x, NULL, H * N) == PK_ERR_ARGUMENT);
  CHECK(pk_score("snapkv", &x, scores, H * N) == PK_ERR_ARGUMENT);  /* no window queries */
  CHECK(pk_score("primekv", &x, scores, H * N) == PK_ERR_ARGUMENT); /* no W_O */
  CHECK(pk_score("kvzip", &x, scores, H * N) == PK_ERR_ARGUMENT);   /* needs a model run */
  CHECK(pk_score("nosuchpress", &x, scores, H * N) == PK_ERR_ARGUMENT);
  CHECK(pk_score("knorm:bogus=1", &x, scores, H * N) == PK_ERR_ARGUMENT);
  CHECK(pk_score("none", &x, scores, H * N) == PK_ERR_ARGUMENT);
  CHECK(pk_score(NULL, &x, scores, H * N) == PK_ERR_ARGUMENT);
  CHECK(pk_score("knorm", NULL, scores, H * N) == PK_ERR_ARGUMENT);
  CHECK(strlen(pk_last_error()) > 0);
}

/* Null handles, bad options and bad tokens: statuses with messages. */
static void Hostile(pk_model* model, const char* dir) {
  pk_model* m = NULL;
  CHECK(pk_model_load("/nonexistent.gguf", &m) == PK_ERR_IO && m == NULL);
  CHECK(strstr(pk_last_error(), "nonexistent") != NULL);
  CHECK(pk_model_load(NULL, &m) == PK_ERR_ARGUMENT);
  CHECK(pk_model_load(dir, NULL) == PK_ERR_ARGUMENT);
  size_t n = 0;
  int32_t ids[4];
  CHECK(pk_tokenize(NULL, "a", 1, 1, ids, 4, &n) == PK_ERR_ARGUMENT);
  CHECK(pk_tokenize(model, "hello world, hello world", 24, 1, ids, 2, &n) == PK_ERR_BUFFER &&
        n > 2);
  CHECK(pk_tokenize(model, NULL, 5, 1, ids, 4, &n) == PK_ERR_ARGUMENT);
  const int32_t bad_ids[2] = {1, 1 << 30};
  char text[16];
  CHECK(pk_detokenize(model, bad_ids, 2, text, 16, &n) == PK_ERR_ARGUMENT);

  pk_session* s = NULL;
  pk_session_options so = pk_session_options_default();
  so.press = "nosuchpress";
  CHECK(pk_session_new(model, &so, &s) == PK_ERR_ARGUMENT && s == NULL);
  so.press = "primekv";
  so.ratio = 1.0;
  CHECK(pk_session_new(model, &so, &s) == PK_ERR_ARGUMENT);
  so.ratio = 0.5;
  so.mode = "sideways";
  CHECK(pk_session_new(model, &so, &s) == PK_ERR_ARGUMENT);
  /* An eval protocol, not a schedule a session runs: refused, never run as "context". */
  so.mode = "question";
  CHECK(pk_session_new(model, &so, &s) == PK_ERR_ARGUMENT && s == NULL);
  CHECK(strstr(pk_last_error(), "question") != NULL);
  so.mode = "chunked";
  so.press = "snapkv"; /* reads queries: cannot compress between chunks */
  CHECK(pk_session_new(model, &so, &s) == PK_ERR_ARGUMENT);
  so.press = "oracle"; /* reads the true future: evaluation only */
  so.mode = "context";
  CHECK(pk_session_new(model, &so, &s) == PK_ERR_ARGUMENT);
  CHECK(pk_session_new(NULL, NULL, &s) == PK_ERR_ARGUMENT);
  so = pk_session_options_default();
  so.kv_q8 = 2;
  CHECK(pk_session_new(model, &so, &s) == PK_ERR_ARGUMENT && s == NULL);
  CHECK(pk_session_new(model, NULL, NULL) == PK_ERR_ARGUMENT);

  so = pk_session_options_default();
  so.n_threads = 1;
  so.ctx_size = 16;
  OK(pk_session_new(model, &so, &s));
  if (s == NULL) return;
  pk_generate_options g = pk_generate_options_default();
  int32_t out[32];
  /* The buffer must hold min(max_tokens 128, free context 16). */
  CHECK(pk_session_generate(s, &g, out, 8, &n) == PK_ERR_BUFFER);
  CHECK(pk_session_generate(s, &g, out, 16, &n) == PK_ERR_STATE); /* nothing fed */
  g.max_tokens = 4;
  CHECK(pk_session_generate(s, &g, out, 32, &n) == PK_ERR_STATE); /* nothing fed */
  const int32_t oov[2] = {1, -7};
  CHECK(pk_session_feed(s, oov, 2) == PK_ERR_ARGUMENT);
  CHECK(pk_session_feed(s, NULL, 3) == PK_ERR_ARGUMENT);
  CHECK(pk_session_feed(s, oov, 0) == PK_ERR_ARGUMENT);
  int32_t many[17];
  for (int i = 0; i < 17; ++i) many[i] = 5;
  CHECK(pk_session_feed(s, many, 17) == PK_ERR_STATE); /* past ctx_size 16 */
  /* A count far past the caller's 17 ids: refused by the context check before any id is read
   * (the ids past the array would otherwise be read, and most would fail the vocabulary). */
  CHECK(pk_session_feed(s, many, 1u << 20) == PK_ERR_STATE);
  OK(pk_session_feed(s, many, 16));
  CHECK(pk_session_generate(s, &g, out, 32, &n) == PK_ERR_STATE); /* the context is full */
  g.temperature = -1;
  CHECK(pk_session_generate(s, &g, out, 32, &n) == PK_ERR_ARGUMENT);
  CHECK(pk_session_compress(s, 1.5) == PK_ERR_ARGUMENT);
  CHECK(pk_session_save(s, dir, "../escape") == PK_ERR_ARGUMENT);
  CHECK(pk_session_save(s, "/nonexistent-dir", "ok") == PK_ERR_IO);
  CHECK(pk_session_save(s, "", "x") == PK_ERR_ARGUMENT); /* not "/x.pkvs" */
  CHECK(pk_session_save(NULL, dir, "ok") == PK_ERR_ARGUMENT);
  CHECK(pk_session_feed(NULL, many, 1) == PK_ERR_ARGUMENT);
  CHECK(pk_session_generate(NULL, &g, out, 32, &n) == PK_ERR_ARGUMENT);
  CHECK(pk_session_kv_bytes(NULL, &n) == PK_ERR_ARGUMENT);
  pk_session_free(s);
  pk_session_free(NULL);
  pk_model_free(NULL);

  /* A damaged session file is refused. */
  char path[4096];
  snprintf(path, sizeof(path), "%s/damaged.pkvs", dir);
  FILE* f = fopen(path, "wb");
  if (f != NULL) {
    fputs("PKVSESS1 and then garbage", f);
    fclose(f);
  }
  CHECK(pk_session_load(model, path, NULL, &s) == PK_ERR_IO && s == NULL);
  CHECK(pk_session_load(model, "/nonexistent.pkvs", NULL, &s) == PK_ERR_IO);
}

/* A session used after pk_model_free of its model: the session's reference keeps the model. */
static void Lifetime(const char* path) {
  pk_model* m = NULL;
  OK(pk_model_load(path, &m));
  if (m == NULL) return;
  pk_session_options so = pk_session_options_default();
  so.n_threads = 1;
  pk_session* s = NULL;
  OK(pk_session_new(m, &so, &s));
  pk_model_free(m);
  if (s == NULL) return;
  const int32_t ids[8] = {1, 5, 6, 7, 8, 9, 10, 11};
  OK(pk_session_feed(s, ids, 8));
  pk_generate_options g = pk_generate_options_default();
  g.max_tokens = 2;
  int32_t out[2];
  size_t n = 0;
  OK(pk_session_generate(s, &g, out, 2, &n));
  CHECK(n <= 2);
  pk_session_free(s); /* the model goes with its last session (ASan: no leak, no reuse) */
}

/* Two threads feeding one session at once: every call either succeeds whole or is refused
 * with PK_ERR_STATE, and the cache holds exactly the tokens of the calls that succeeded. One
 * thread feeds short pieces until the other's long piece is in, so the two overlap and some call
 * must have been refused. */
enum { kLongFeed = 400, kPerFeed = 4, kMaxShort = 200 };
typedef struct {
  pk_session* s;
  atomic_int ok, busy, other, started, long_done;
} Shared;

static void SleepUs(long us) {
  const struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static pk_status CountedFeed(Shared* sh, const int32_t* ids, size_t n) {
  const pk_status st = pk_session_feed(sh->s, ids, n);
  if (st == PK_ERR_STATE && strstr(pk_last_error(), "in use") != NULL) {
    atomic_fetch_add(&sh->busy, 1);
  } else if (st != PK_OK) {
    atomic_fetch_add(&sh->other, 1);
  }
  size_t count = 0;
  const pk_status r = pk_session_n_tokens(sh->s, &count); /* a reader races the writers too */
  if (r != PK_OK && r != PK_ERR_STATE) atomic_fetch_add(&sh->other, 1);
  return st;
}

static void* ShortFeeder(void* arg) {
  Shared* sh = (Shared*)arg;
  const int32_t ids[kPerFeed] = {5, 6, 7, 8};
  while (!atomic_load(&sh->long_done) && atomic_load(&sh->ok) < kMaxShort &&
         atomic_load(&sh->other) == 0) {
    if (CountedFeed(sh, ids, kPerFeed) == PK_OK) atomic_fetch_add(&sh->ok, 1);
    atomic_store(&sh->started, 1);
    SleepUs(500); /* room between short feeds for the long one to get in */
  }
  return NULL;
}

static void* LongFeeder(void* arg) {
  Shared* sh = (Shared*)arg;
  static int32_t ids[kLongFeed];
  for (int i = 0; i < kLongFeed; ++i) ids[i] = 5 + i % 50;
  for (int i = 0; i < 6000 && !atomic_load(&sh->started); ++i) SleepUs(10000);
  for (int i = 0; i < 100000; ++i) {
    if (CountedFeed(sh, ids, kLongFeed) == PK_OK) break;
    if (atomic_load(&sh->other) != 0) break;
  }
  atomic_store(&sh->long_done, 1);
  return NULL;
}

static void Threads(pk_model* model) {
  pk_session_options so = pk_session_options_default();
  so.n_threads = 1;
  so.ctx_size = kLongFeed + kMaxShort * kPerFeed + 8;
  Shared sh = {.s = NULL};
  atomic_init(&sh.ok, 0);
  atomic_init(&sh.busy, 0);
  atomic_init(&sh.other, 0);
  atomic_init(&sh.started, 0);
  atomic_init(&sh.long_done, 0);
  OK(pk_session_new(model, &so, &sh.s));
  if (sh.s == NULL) return;
  pthread_t t[2];
  int started = 0;
  void* (*const feeders[2])(void*) = {ShortFeeder, LongFeeder};
  for (int i = 0; i < 2; ++i) started += pthread_create(&t[started], NULL, feeders[i], &sh) == 0;
  for (int i = 0; i < started; ++i) pthread_join(t[i], NULL);
  CHECK(started == 2);
  size_t n = 0;
  OK(pk_session_n_tokens(sh.s, &n));
  const int ok = atomic_load(&sh.ok), busy = atomic_load(&sh.busy);
  CHECK(atomic_load(&sh.other) == 0);
  CHECK(busy > 0);                               /* the threads overlapped: a refusal happened */
  CHECK(n == (size_t)ok * kPerFeed + kLongFeed); /* no torn or lost feed */
  int64_t entries = 0;
  pk_model_info info;
  OK(pk_model_get_info(model, &info));
  OK(pk_session_kv_entries(sh.s, &entries));
  CHECK(entries == (int64_t)n * info.n_layers * info.n_kv_heads);
  printf(
      "capi_c11: threads: the long feed in, %d short feeds succeeded, %d calls refused as busy\n",
      ok, busy);
  pk_session_free(sh.s);
}

/* profile=auto: the profile beside the model file (MODEL.budget.json), nested below 0.9. The
 * session keeps what the same press with that file named keeps, and not the uniform count
 * (the profile's heads keep unequal shares). */
static int64_t ContextEntries(pk_model* model, const char* press, const int32_t* ids, size_t n) {
  pk_session_options so = pk_session_options_default();
  so.press = press;
  so.ratio = 0.75;
  so.mode = "context";
  so.n_threads = 1;
  pk_session* s = NULL;
  int64_t entries = -1;
  if (pk_session_new(model, &so, &s) != PK_OK) return -1;
  if (pk_session_feed_context(s, ids, n) == PK_OK) pk_session_kv_entries(s, &entries);
  pk_session_free(s);
  return entries;
}

static void AutoProfile(pk_model* model, const char* model_path) {
  char text[4096] = "";
  for (int i = 0; i < 40; ++i) {
    char line[64];
    snprintf(line, sizeof(line), "The code of room %d is %d. ", i, 1000 + 37 * i);
    strcat(text, line);
  }
  int32_t ids[2048];
  size_t n = 0;
  OK(pk_tokenize(model, text, strlen(text), 1, ids, 2048, &n));
  char named[600];
  const size_t stem = strlen(model_path) - strlen(".gguf");
  CHECK(stem < 500);
  snprintf(named, sizeof(named), "primekv:profile=%.*s.budget.json,nest=0.9", (int)stem,
           model_path);
  pk_model_info info;
  OK(pk_model_get_info(model, &info));
  const int64_t got = ContextEntries(model, "primekv:profile=auto", ids, n);
  const int64_t want = ContextEntries(model, named, ids, n);
  CHECK(got > 0 && got == want);
  CHECK(got != (int64_t)info.n_layers * info.n_kv_heads * (int64_t)(n / 4));
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL.gguf TMPDIR\n", argv[0]);
    return 2;
  }
  CHECK(pk_api_version() == PK_API_VERSION);
  CHECK(strlen(pk_version()) > 0);
  CHECK(pk_press_count() > 10 && strcmp(pk_press_name(1), "primekv") == 0);
  CHECK(pk_press_name(pk_press_count()) == NULL);
  pk_model* model = NULL;
  OK(pk_model_load(argv[1], &model));
  if (model == NULL) return 1;
  Conversation(model, argv[2]);
  Score();
  Hostile(model, argv[2]);
  Lifetime(argv[1]);
  Threads(model);
  AutoProfile(model, argv[1]);
  pk_model_free(model);
  if (failures > 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("capi_c11: all checks passed\n");
  return 0;
}
