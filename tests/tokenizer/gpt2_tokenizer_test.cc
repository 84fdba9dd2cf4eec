// Byte-level BPE ("gpt2") tokenizer on a hand-built vocabulary. Expected ids were worked out by
// hand from the merge ranks in test_vocabs.h: within each pre-token, apply the lowest-ranked
// merge present (leftmost on ties) until none applies.
#include <gtest/gtest.h>

#include <vector>

#include "primekv/tokenizer/tokenizer.h"
#include "test_vocabs.h"
#include "tokenizer/tokenizer_internal.h"

namespace primekv {
namespace {

using testing_tok::HandGpt2;
using V = std::vector<Token>;

Tokenizer HandGpt2Tokenizer(TokenizerSpec spec = HandGpt2::Spec()) {
  auto t = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.message();
  return std::move(t).value();
}

TEST(Gpt2Tokenizer, ByteMap) {
  const auto map = tokenizer_internal::ByteToCodepoint();
  EXPECT_EQ(map['A'], static_cast<uint32_t>('A'));
  EXPECT_EQ(map['!'], static_cast<uint32_t>('!'));
  EXPECT_EQ(map['~'], static_cast<uint32_t>('~'));
  EXPECT_EQ(map[0x00], 0x100u);
  EXPECT_EQ(map[' '], 0x120u);   // Ġ
  EXPECT_EQ(map['\n'], 0x10Au);  // Ċ
  EXPECT_EQ(map[0x7F], 0x121u);
  EXPECT_EQ(map[0xA0], 0x142u);
  EXPECT_EQ(map[0xA1], 0xA1u);
  EXPECT_EQ(map[0xAD], 0x143u);
  EXPECT_EQ(map[0xFF], 0xFFu);
  std::vector<bool> seen(0x200, false);
  for (uint32_t cp : map) {
    ASSERT_LT(cp, 0x200u);
    EXPECT_FALSE(seen[cp]) << cp;
    seen[cp] = true;
  }
}

TEST(Gpt2Tokenizer, HandComputedMerges) {
  const Tokenizer tok = HandGpt2Tokenizer();
  using H = HandGpt2;
  struct Case {
    const char* text;
    V ids;
  };
  const Case cases[] = {
      // Ġ t (rank 0), h e (1), Ġt he (2).
      {" the", {H::kGthe}},
      // "the": h e merges; "t he" is no merge.
      {"the", {'t', H::kHe}},
      // Llama 3 ignores merges when the whole pre-token is a token: " bell" is Ġbell at once.
      // (Plain BPE would give Ġ + bell; see IgnoreMergesOnlyForLlama3.)
      {" bell", {H::kGbell}},
      {"the bell", {'t', H::kHe, H::kGbell}},
      // h e (1) fires before l l (3), so e ll (4) never can: he ll o.
      {"hello", {H::kHe, H::kLl, 'o'}},
      {"bell", {H::kBell}},
      // Equal ranks: the leftmost o o first.
      {"ooo", {H::kOo, 'o'}},
      {"oooo", {H::kOo, H::kOo}},
      // Llama-3 pre-tokenizer splits digits in threes: 123 | 456.
      {"123456", {H::k123, '4', '5', '6'}},
      {"1212", {H::k12, '1', '2'}},
      // é = C3 A9: Ã © (13) first, then a f (14), c af (15), caf Ã© (16).
      {"caf\xC3\xA9", {H::kCafe}},
      {"\xC3\xA9t\xC3\xA9", {H::kEacute, 't', H::kEacute}},
      // Newlines: one pre-token, merged by Ċ Ċ.
      {"\n\n", {H::kNlNl}},
      {"hello\n\nthe", {H::kHe, H::kLl, 'o', H::kNlNl, 't', H::kHe}},
      // "  x": the pre-tokenizer leaves " " and " x", so Ġ Ġ cannot merge; at the end it can.
      {"  x", {' ', ' ', 'x'}},
      {"x  ", {'x', H::kGG}},
      // Bytes that are not valid UTF-8 are still single byte tokens.
      {"\xFF\x80", {0xFF, 0x80}},
      // Special texts are plain text without parse_special (Llama-3 splits <| eot _id |>).
      {"<|eot_id|>", {'<', '|', 'e', 'o', 't', '_', 'i', 'd', '|', '>'}},
      {"", {}},
      {"t", {'t'}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(tok.Encode(c.text, /*add_bos=*/false), c.ids) << "text: " << c.text;
  }
}

TEST(Gpt2Tokenizer, PreTokenizerChoiceMatters) {
  const Tokenizer gpt2 = HandGpt2Tokenizer(HandGpt2::Spec("gpt2"));
  const Tokenizer llama3 = HandGpt2Tokenizer(HandGpt2::Spec("llama-bpe"));
  const Tokenizer qwen2 = HandGpt2Tokenizer(HandGpt2::Spec("qwen2"));
  using H = HandGpt2;
  // GPT-2: one pre-token "4123" -> 4 12 3 -> 4 123. Llama 3: "412" | "3" -> 4 12 | 3.
  // Qwen2: every digit alone.
  EXPECT_EQ(gpt2.Encode("4123", false), (V{'4', H::k123}));
  EXPECT_EQ(llama3.Encode("4123", false), (V{'4', H::k12, '3'}));
  EXPECT_EQ(qwen2.Encode("4123", false), (V{'4', '1', '2', '3'}));
  // GPT-2: \s+(?!\S) splits "\n\n" before "x" into "\n" | "\n"; Llama 3 keeps "\n\n" whole.
  EXPECT_EQ(gpt2.Encode("\n\nx", false), (V{'\n', '\n', 'x'}));
  EXPECT_EQ(llama3.Encode("\n\nx", false), (V{H::kNlNl, 'x'}));
  // GPT-2 keeps " 12" together (Ġ 12); Llama 3 splits the space off; ids agree here.
  EXPECT_EQ(gpt2.Encode(" 12", false), (V{' ', H::k12}));
  EXPECT_EQ(llama3.Encode(" 12", false), (V{' ', H::k12}));
}

TEST(Gpt2Tokenizer, IgnoreMergesOnlyForLlama3) {
  using H = HandGpt2;
  // Plain BPE on " bell": l l (3) before e ll (4), then b ell (5) before Ġ b (6), so Ġ + bell and
  // never Ġbell (Ġ bell is no merge).
  for (const char* pre : {"qwen2", "gpt2", "smaug-bpe", "dbrx", "chatglm-bpe", "stablelm2"}) {
    EXPECT_EQ(HandGpt2Tokenizer(HandGpt2::Spec(pre)).Encode(" bell", false), (V{' ', H::kBell}))
        << pre;
  }
  for (const char* pre : {"llama3", "llama-bpe", "llama-v3", "falcon3", "tekken"}) {
    EXPECT_EQ(HandGpt2Tokenizer(HandGpt2::Spec(pre)).Encode(" bell", false), (V{H::kGbell})) << pre;
    // Not a whole token: BPE as usual.
    EXPECT_EQ(HandGpt2Tokenizer(HandGpt2::Spec(pre)).Encode(" bells", false),
              (V{' ', H::kBell, 's'}))
        << pre;
  }
}

TEST(Gpt2Tokenizer, SpecialTokensAndBos) {
  const Tokenizer tok = HandGpt2Tokenizer();
  using H = HandGpt2;
  EXPECT_EQ(tok.Encode("the", true), (V{H::kBos, 't', H::kHe}));
  EXPECT_EQ(tok.Encode("<|eot_id|>hi<tool>", false, true), (V{H::kEot, 'h', 'i', H::kTool}));
  EXPECT_EQ(tok.Encode("a<|begin_of_text|><|end_of_text|>", true, true),
            (V{H::kBos, 'a', H::kBos, H::kEos}));
  // A partial special is text.
  EXPECT_EQ(tok.Encode("<|eot_id", false, true).size(), 8u);  // <| eot _id
  EXPECT_TRUE(tok.IsEndOfGeneration(H::kEot));
  EXPECT_TRUE(tok.IsEndOfGeneration(H::kEos));
  EXPECT_FALSE(tok.IsEndOfGeneration(H::kBos));
  EXPECT_FALSE(tok.IsEndOfGeneration(-1));
  EXPECT_FALSE(tok.IsEndOfGeneration('a'));
}

TEST(Gpt2Tokenizer, Decode) {
  const Tokenizer tok = HandGpt2Tokenizer();
  using H = HandGpt2;
  EXPECT_EQ(tok.Decode(V{H::kBos, H::kGthe, ' ', H::kBell, H::kEot}), " the bell");
  EXPECT_EQ(tok.Decode(V{H::kGbell}), " bell");
  EXPECT_EQ(tok.Decode(V{H::kCafe, H::kNlNl}), "caf\xC3\xA9\n\n");
  EXPECT_EQ(tok.Decode(V{0xE4, 0xB8, 0xAD}), "\xE4\xB8\xAD");  // bytes assemble into 中
  EXPECT_EQ(tok.Decode(V{H::kTool}), "<tool>");
  EXPECT_EQ(tok.TokenToPiece(H::kGthe), " the");
  EXPECT_EQ(tok.TokenToPiece(H::kEot), "");
  EXPECT_EQ(tok.TokenToPiece(0x00), std::string(1, '\0'));
}

TEST(Gpt2Tokenizer, MissingMergePartsAreSkipped) {
  TokenizerSpec spec = HandGpt2::Spec();
  spec.merges.push_back("zz qq");  // neither side is a token: ignored
  const Tokenizer tok = HandGpt2Tokenizer(spec);
  EXPECT_EQ(tok.Encode(" the", false), (V{HandGpt2::kGthe}));
}

TEST(Gpt2Tokenizer, LongRunsAreFast) {
  const Tokenizer tok = HandGpt2Tokenizer();
  const std::string spaces(100000, ' ');
  const std::string letters(100000, 'o');
  EXPECT_EQ(tok.Decode(tok.Encode(spaces + "x", false)), spaces + "x");
  const V ids = tok.Encode(letters, false);
  EXPECT_EQ(ids.size(), 50000u);
  EXPECT_EQ(tok.Decode(ids), letters);
}

}  // namespace
}  // namespace primekv
