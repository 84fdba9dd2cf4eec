// libFuzzer target for make-model --hf-tokenizer's reader: any bytes as tokenizer.json (and,
// after a NUL byte, as tokenizer_config.json) must give a spec or a Status, never a crash. A spec
// it returns must build a tokenizer whose Encode accounts for its input: no token consumes more
// than MaxTokenBytes() bytes, and a text is never dropped to nothing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "primekv/util/status.h"
#include "primekv/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace primekv;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view tokenizer_json = input.substr(0, nul);
  const std::string_view config_json = nul == std::string_view::npos
                                           ? std::string_view(R"({"eos_token": "<|eot_id|>"})")
                                           : input.substr(nul + 1);
  auto spec = TokenizerSpecFromHfJson(tokenizer_json, config_json, /*vocab_size=*/0);
  if (!spec.ok()) return 0;
  Check(!spec->tokens.empty(), "an imported spec has tokens");
  auto tok = Tokenizer::Create(std::move(spec).value());
  Check(tok.ok(), "an imported spec builds a tokenizer");
  for (std::string_view text : {std::string_view("Hello world <|eot_id|> aaaZ"),
                                std::string_view("\xFF\xE2\x96\x81 x\n")}) {
    const std::vector<Token> ids = tok->Encode(text, /*add_bos=*/false, /*parse_special=*/true);
    Check(!ids.empty(), "a non-empty text encodes to tokens");
    Check(ids.size() * tok->MaxTokenBytes() >= text.size(), "MaxTokenBytes bounds a token");
  }
  return 0;
}
