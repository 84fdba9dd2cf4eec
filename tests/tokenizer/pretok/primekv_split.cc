// Pieces of this engine's pre-tokenizer for compare_pieces.py (linked against the built
// primekv_tokenizer library; not part of the project's build). Usage: primekv_split NAME <
// strings, NAME a tokenizer.ggml.pre name, strings NUL-separated; prints one line per string,
// each piece's bytes in hex followed by a space.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "tokenizer/pretokenizer.h"

int main(int argc, char** argv) {
  if (argc != 2 || !primekv::PreTokenizerFromName(argv[1]).ok()) {
    std::fprintf(stderr, "usage: %s NAME < strings\n", argv[0]);
    return 2;
  }
  const primekv::PreTokenizerKind kind = primekv::PreTokenizerFromName(argv[1]).value();
  const std::string all((std::istreambuf_iterator<char>(std::cin)),
                        std::istreambuf_iterator<char>());
  for (size_t pos = 0; pos < all.size();) {
    size_t end = all.find('\0', pos);
    if (end == std::string::npos) end = all.size();
    for (std::string_view piece :
         primekv::PreTokenize(kind, std::string_view(all).substr(pos, end - pos))) {
      for (unsigned char c : piece) std::printf("%02x", c);
      std::printf(" ");
    }
    std::printf("\n");
    pos = end + 1;
  }
  return 0;
}
