// Reference tokenizer for make_reference.py, built against a llama.cpp checkout outside this
// tree (never part of the project's build). Usage: llamacpp_tokenize VOCAB.gguf [special] <
// corpus, where the corpus is NUL-separated UTF-8 strings; prints "add_bos 0|1" (whether the
// vocabulary asks for BOS), then one line of space-separated token ids per string (no BOS/EOS;
// special-token text parsed only with "special"), or "ERROR <message>" when the vocabulary does not
// load.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "llama.h"

static void Quiet(ggml_log_level, const char*, void*) {}

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s VOCAB.gguf [special] < corpus\n", argv[0]);
    return 2;
  }
  const bool special = argc == 3 && std::string(argv[2]) == "special";
  llama_log_set(Quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) {
    std::printf("ERROR load failed\n");
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  std::printf("add_bos %d\n", llama_vocab_get_add_bos(vocab) ? 1 : 0);
  const std::string all((std::istreambuf_iterator<char>(std::cin)),
                        std::istreambuf_iterator<char>());
  size_t pos = 0;
  std::vector<llama_token> ids;
  while (pos < all.size()) {
    size_t end = all.find('\0', pos);
    if (end == std::string::npos) end = all.size();
    const std::string text = all.substr(pos, end - pos);
    pos = end + 1;
    ids.assign(text.size() + 16, 0);
    int n = llama_tokenize(vocab, text.data(), static_cast<int>(text.size()), ids.data(),
                           static_cast<int>(ids.size()), false, special);
    if (n < 0) {
      ids.assign(static_cast<size_t>(-n), 0);
      n = llama_tokenize(vocab, text.data(), static_cast<int>(text.size()), ids.data(),
                         static_cast<int>(ids.size()), false, special);
    }
    for (int i = 0; i < n; ++i) std::printf(i ? " %d" : "%d", ids[static_cast<size_t>(i)]);
    std::printf("\n");
  }
  llama_model_free(model);
  return 0;
}
