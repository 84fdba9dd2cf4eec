#!/usr/bin/python3
"""Checks the Python encoder against encodings worked out by hand, and the fast (chunked,
cached) encoder against the whole-string algorithm.  Run:
    /usr/bin/python3 tools/train/test_tokenizer_encode.py
"""

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
from tokenizer import BOS, FIRST_PIECE, SPACE, Tokenizer, train_bpe  # noqa: E402

# Hand-made vocabulary.  Ids: FIRST_PIECE (259) + index.
#   259 ▁   260 a   261 b   262 c   263 d   264 ▁a   265 ab   266 bc   267 ▁ab   268 abc   269 cd
PIECES = [SPACE, "a", "b", "c", "d", SPACE + "a", "ab", "bc", SPACE + "ab", "abc", "cd"]
SCORES = [-1e6] * 5 + [-3.0, -1.0, -2.0, -4.0, -5.0, -0.5]


def byte_id(b):
    return 3 + b


class HandExamples(unittest.TestCase):
    def setUp(self):
        self.tok = Tokenizer(PIECES, SCORES)

    def enc(self, text):
        ids = self.tok.encode(text)
        ref = [BOS] + self.tok.encode_normalized_reference(SPACE + text.replace(" ", SPACE))
        self.assertEqual(ids, ref)
        return ids

    def test_layout(self):
        self.assertEqual(FIRST_PIECE, 259)
        self.assertEqual(self.tok.tokens[:3], ["<unk>", "<s>", "</s>"])
        self.assertEqual(self.tok.tokens[3], "<0x00>")
        self.assertEqual(self.tok.tokens[258], "<0xFF>")
        self.assertEqual(self.tok.types[:4], [2, 3, 3, 6])
        self.assertEqual(self.tok.types[259], 1)

    def test_highest_score_first(self):
        # ▁ a b c: pairs ▁a(-3) ab(-1) bc(-2) -> ab; then ▁ab(-4) abc(-5) -> ▁ab; "▁abc" absent.
        self.assertEqual(self.enc("abc"), [BOS, 267, 262])

    def test_later_pair_wins_on_score(self):
        # ▁ b c d: bc(-2) cd(-0.5) -> cd; "▁b" and "bcd" absent.
        self.assertEqual(self.enc("bcd"), [BOS, 259, 261, 269])

    def test_tie_takes_leftmost(self):
        scores = list(SCORES)
        scores[PIECES.index("cd")] = -2.0  # now bc and cd tie
        tok = Tokenizer(PIECES, scores)
        # ▁ b c d: bc(-2) and cd(-2) tie -> leftmost bc; then "▁b"... none -> ▁ bc d
        self.assertEqual(tok.encode("bcd"), [BOS, 259, 266, 263])
        self.assertEqual(tok.encode_normalized_reference(SPACE + "bcd"), [259, 266, 263])

    def test_repeated_pairs(self):
        # ▁ a b a b: ab(-1) at 1 and 3 -> leftmost: ▁ ab a b -> ab again: ▁ ab ab -> ▁ab(-4): ▁ab ab
        self.assertEqual(self.enc("abab"), [BOS, 267, 265])

    def test_spaces(self):
        # "a b" -> ▁ a ▁ b: only ▁a merges -> ▁a ▁ b
        self.assertEqual(self.enc("a b"), [BOS, 264, 259, 261])
        # two spaces: ▁ ▁ a -> ▁ ▁a
        self.assertEqual(self.enc(" a"), [BOS, 259, 264])

    def test_byte_fallback(self):
        # "é" is U+00E9 = C3 A9 in UTF-8; newline is byte 0x0A; 'x' is absent from this vocab.
        self.assertEqual(self.enc("é"), [BOS, 259, byte_id(0xC3), byte_id(0xA9)])
        self.assertEqual(self.enc("a\nb"), [BOS, 264, byte_id(0x0A), 261])
        self.assertEqual(self.enc("x"), [BOS, 259, byte_id(0x78)])

    def test_decode(self):
        self.assertEqual(self.tok.decode([BOS, 267, 262]), "abc")
        self.assertEqual(self.tok.decode([BOS, 264, 259, 261]), "a b")
        self.assertEqual(self.tok.decode([BOS, 259, byte_id(0xC3), byte_id(0xA9)]), "é")


class TrainedTokenizer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tok = train_bpe(data.tokenizer_corpus(7, n_docs=30), 700)

    def test_digits_single(self):
        ids = self.tok.encode("code 4817263 now")
        pieces = [self.tok.tokens[i] for i in ids[1:]]
        self.assertEqual(pieces[2:9], list("4817263"))
        for p in self.tok.tokens[FIRST_PIECE:]:
            if any(c.isdigit() for c in p):
                self.assertEqual(len(p), 1, p)

    def test_pieces_shape(self):
        for p in self.tok.tokens[FIRST_PIECE:]:
            if len(p) > 1:
                body = p[1:] if p.startswith(SPACE) else p
                self.assertTrue(body.isascii() and body.isalpha(), p)
        self.assertEqual(len(set(self.tok.tokens)), self.tok.vocab_size)

    def test_chunked_equals_whole_string(self):
        rng = random.Random(3)
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789 .,:;-'\n\t\u00e9\u4e2d\u2581"
        words = "the river code quiet-lamp number Anna remember for is".split()
        for _ in range(300):
            if rng.random() < 0.5:
                s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
            else:
                s = " ".join(rng.choice(words) + rng.choice(["", ".", ",", "\n", "  "]) for _ in range(8))
            norm = SPACE + s.replace(" ", SPACE)
            self.assertEqual(self.tok.encode_normalized(norm), self.tok.encode_normalized_reference(norm), repr(s))
            if SPACE not in s:  # a literal U+2581 decodes to a space, as in SentencePiece
                self.assertEqual(self.tok.decode(self.tok.encode(s)), s)

    def test_documents_match_whole_text_encoding(self):
        rng = random.Random(11)
        for i in range(40):
            d = data.make_train_doc(self.tok, rng, rng.choice([128, 256, 512]), rng.random())
            n = len(d.ids)
            while d.ids[n - 1] == 2:
                n -= 1
            self.assertEqual(self.tok.encode(d.plain_text()), d.ids[:n])
            for a in d.answers:
                self.assertEqual(self.tok.decode(d.ids[a["start"]:a["end"]]), a["text"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
