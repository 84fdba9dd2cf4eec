/* A program built against an installed PrimeKV, as a user builds one: with pkg-config
 * (cc consumer.c $(pkg-config --cflags --libs primekv)) or CMake's find_package (this folder's
 * CMakeLists.txt). It asks the demo document's question of the installed default model from a
 * PrimeKV-compressed cache (a quarter removed) and prints the answer, which
 * scripts/install_check.sh checks.
 * Usage: consumer MODEL.gguf CONTEXT.txt */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <primekv.h>

static const char kQuestion[] =
    "\nWhat is the special magic number for silver-lantern?\n"
    "The special magic number for silver-lantern is";

static int Fail(const char* what) {
  fprintf(stderr, "consumer: %s: %s\n", what, pk_last_error());
  return 1;
}

/* The whole file, NUL-terminated, with room for the question after it. */
static char* ReadPrompt(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  char* text = NULL;
  size_t n = 0, cap = 0, got = 0;
  do {
    if (n + 4096 + sizeof(kQuestion) > cap) {
      cap = 2 * cap + 4096 + sizeof(kQuestion);
      char* grown = realloc(text, cap);
      if (!grown) break;
      text = grown;
    }
    got = fread(text + n, 1, 4096, f);
    n += got;
  } while (got > 0);
  fclose(f);
  if (!text || n + sizeof(kQuestion) > cap) {
    free(text);
    return NULL;
  }
  memcpy(text + n, kQuestion, sizeof(kQuestion));
  *len = n + sizeof(kQuestion) - 1;
  return text;
}

static int Answer(pk_model* model, const char* prompt, size_t prompt_len) {
  size_t n = 0;
  if (pk_tokenize(model, prompt, prompt_len, 1, NULL, 0, &n) != PK_ERR_BUFFER) {
    return Fail("tokenize");
  }
  int32_t* ids = malloc(n * sizeof(int32_t));
  pk_session_options so = pk_session_options_default();
  so.press = "primekv";
  so.ratio = 0.25;
  pk_session* s = NULL;
  int32_t out[12];
  size_t n_out = 0, text_len = 0;
  char text[256];
  pk_generate_options g = pk_generate_options_default();
  g.max_tokens = 12;
  int rc = 1;
  if (!ids || pk_tokenize(model, prompt, prompt_len, 1, ids, n, &n) != PK_OK) {
    rc = Fail("tokenize");
  } else if (pk_session_new(model, &so, &s) != PK_OK || pk_session_feed_context(s, ids, n) != PK_OK) {
    rc = Fail("prefill");
  } else if (pk_session_generate(s, &g, out, 12, &n_out) != PK_OK ||
             pk_detokenize(model, out, n_out, text, sizeof(text) - 1, &text_len) != PK_OK) {
    rc = Fail("generate");
  } else {
    text[text_len] = '\0';
    text[strcspn(text, "\n")] = '\0'; /* the answer's line; the model goes on after it */
    size_t kv = 0;
    pk_session_kv_bytes(s, &kv);
    printf("primekv %s, %zu context tokens, KV cache %zu bytes: the number is%s\n", pk_version(),
           n, kv, text);
    rc = 0;
  }
  pk_session_free(s);
  free(ids);
  return rc;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: consumer MODEL.gguf CONTEXT.txt\n");
    return 2;
  }
  if (pk_api_version() != PK_API_VERSION) {
    fprintf(stderr, "consumer: library API %d, header %d\n", pk_api_version(), PK_API_VERSION);
    return 1;
  }
  size_t len = 0;
  char* prompt = ReadPrompt(argv[2], &len);
  if (!prompt) {
    fprintf(stderr, "consumer: cannot read %s\n", argv[2]);
    return 1;
  }
  pk_model* model = NULL;
  int rc = pk_model_load(argv[1], &model) == PK_OK ? Answer(model, prompt, len)
                                                   : Fail(argv[1]);
  pk_model_free(model);
  free(prompt);
  return rc;
}
