// llama.cpp's tokenizer test vectors, shipped beside a vocabulary GGUF: GGUF.inp holds strings
// each followed by "\n__ggml_vocab_test__\n"; GGUF.out one line of space-separated ids per string
// (no BOS).
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "primekv/tokenizer/tokenizer.h"

namespace primekv {

struct LlamaCppVectors {
  std::vector<std::string> texts;
  std::vector<std::vector<Token>> ids;
};

inline LlamaCppVectors ReadLlamaCppVectors(const std::filesystem::path& gguf) {
  LlamaCppVectors v;
  std::ifstream in_file(gguf.string() + ".inp", std::ios::binary);
  const std::string inp((std::istreambuf_iterator<char>(in_file)),
                        std::istreambuf_iterator<char>());
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0;;) {
    const size_t end = inp.find(sep, pos);
    if (end == std::string::npos) break;
    v.texts.push_back(inp.substr(pos, end - pos));
    pos = end + sep.size();
  }
  std::ifstream out(gguf.string() + ".out");
  for (std::string line; std::getline(out, line);) {
    std::istringstream ls(line);
    std::vector<Token> ids;
    for (Token t; ls >> t;) ids.push_back(t);
    v.ids.push_back(ids);
  }
  return v;
}

}  // namespace primekv
