// Pieces shared by the tokenizer sources (not part of the public API).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace primekv::tokenizer_internal {

// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible space.
inline constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

// GPT-2's byte-to-character map: printable Latin-1 bytes stand for themselves, the other 68 take
// U+0100 onwards in byte order, so every byte becomes a visible, non-space character.
std::array<uint32_t, 256> ByteToCodepoint();
// UTF-8 text of ByteToCodepoint()[b].
std::string ByteLevelChar(uint8_t b);

// "<0xAB>" for byte b (SentencePiece byte-fallback token text).
std::string ByteTokenText(uint8_t b);
// Parses "<0xAB>" (hex digits of either case); -1 when `text` is not a byte token.
int ParseByteTokenText(std::string_view text);

}  // namespace primekv::tokenizer_internal
