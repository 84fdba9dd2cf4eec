// Pieces of llama.cpp's pre-tokenizer for compare_pieces.py, built against a llama.cpp checkout
// outside this tree. Usage: llamacpp_split TYPE < strings, where TYPE names a case of
// llm_tokenizer_bpe's switch (e.g. LLAMA_VOCAB_PRE_TYPE_FALCON, DEFAULT) and the strings are
// NUL-separated; prints one line per string, each piece's bytes in hex followed by a space.
// llamacpp_split_exprs.inc (written by compare_pieces.py from the checkout's
// src/llama-vocab.cpp) defines kExpressions: type -> the regular expressions llama.cpp applies.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "llamacpp_split_exprs.inc"
#include "unicode.h"

int main(int argc, char** argv) {
  if (argc != 2 || kExpressions.count(argv[1]) == 0) {
    std::fprintf(stderr, "usage: %s TYPE < strings\n", argv[0]);
    return 2;
  }
  const std::vector<std::string>& exprs = kExpressions.at(argv[1]);
  const std::string all((std::istreambuf_iterator<char>(std::cin)),
                        std::istreambuf_iterator<char>());
  for (size_t pos = 0; pos < all.size();) {
    size_t end = all.find('\0', pos);
    if (end == std::string::npos) end = all.size();
    // unicode_regex_split returns each piece in GPT-2's byte-level characters.
    for (const std::string& piece : unicode_regex_split(all.substr(pos, end - pos), exprs)) {
      for (uint32_t cp : unicode_cpts_from_utf8(piece)) {
        std::printf("%02x", unicode_utf8_to_byte(unicode_cpt_to_utf8(cp)));
      }
      std::printf(" ");
    }
    std::printf("\n");
    pos = end + 1;
  }
  return 0;
}
