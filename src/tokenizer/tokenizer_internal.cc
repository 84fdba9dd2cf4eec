#include "tokenizer/tokenizer_internal.h"

#include "tokenizer/unicode.h"

namespace primekv::tokenizer_internal {

std::array<uint32_t, 256> ByteToCodepoint() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    map[b] = printable ? b : next++;
  }
  return map;
}

std::string ByteLevelChar(uint8_t b) {
  std::string out;
  AppendUtf8(ByteToCodepoint()[b], out);
  return out;
}

std::string ByteTokenText(uint8_t b) {
  constexpr std::string_view kHex = "0123456789ABCDEF";
  std::string out = "<0x";
  out += kHex[b >> 4];
  out += kHex[b & 15];
  out += '>';
  return out;
}

int ParseByteTokenText(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace primekv::tokenizer_internal
