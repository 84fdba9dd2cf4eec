// libFuzzer target for make-model --hf-tokenizer's reader: any bytes as tokenizer.json (and,
// after a NUL byte, as tokenizer_config.json) must give a spec or a Status, never a crash. A spec
// it returns must build a tokenizer whose Encode accounts for its input: no token consumes more
// than MaxTokenBytes() bytes, and a text is never dropped to nothing (but for the bytes a
// byte-level vocabulary has no token for, which are dropped as llama.cpp drops them).
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
    // A byte-level vocabulary may lack a byte (llama.cpp loads one and drops that byte, and so
    // do we): the bytes to account for are those that encode on their own.
    size_t covered = 0;
    for (size_t i = 0; i < text.size(); ++i)
      covered += !tok->Encode(text.substr(i, 1), /*add_bos=*/false, /*parse_special=*/false).empty();
    Check(covered == 0 || !ids.empty(), "a text with an encodable byte encodes to tokens");
    Check(ids.size() * tok->MaxTokenBytes() >= covered, "MaxTokenBytes bounds a token");
  }
  return 0;
}
