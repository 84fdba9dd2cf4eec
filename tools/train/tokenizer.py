"""SentencePiece-style "llama" tokenizer: training (BPE over the generator's text) and the
exact encoding algorithm the PrimeKV engine implements.

Vocabulary layout: 0 <unk> (type 2), 1 <s> and 2 </s> (type 3), 3..258 byte tokens
<0x00>..<0xFF> (type 6), then learned pieces (type 1) with scores (higher = merged first).

Encoding: replace ' ' by U+2581, prepend U+2581, split into characters, then repeatedly merge
the adjacent pair whose concatenation is a vocab piece with the highest score (ties: leftmost
pair) until no pair merges; a symbol not in the vocab becomes its UTF-8 bytes as <0xNN>.

Every learned piece is either one character or U+2581 optionally followed by ASCII letters
plus ASCII letters, so no piece can span a boundary before U+2581 or around a non-letter.
The fast encoder exploits this by encoding such chunks independently (with a cache); the
result is identical to the whole-string algorithm (checked by test_tokenizer_encode.py).
"""

import collections
import json
import re

SPACE = "\u2581"
UNK, BOS, EOS = 0, 1, 2
N_BYTES = 256
FIRST_PIECE = 3 + N_BYTES

TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_BYTE = 1, 2, 3, 6

# Characters always present as single pieces: printable ASCII except the space (which is
# written as U+2581).  Newline, tab and everything else go through byte fallback.
BASE_CHARS = [SPACE] + [chr(c) for c in range(33, 127)]

_CHUNK_RE = re.compile(SPACE + "?[A-Za-z]+|.", re.DOTALL)


def _is_mergeable(sym: str) -> bool:
    body = sym[1:] if sym.startswith(SPACE) else sym
    return body.isascii() and body.isalpha() if body else sym == SPACE


class Tokenizer:
    def __init__(self, pieces, scores):
        """pieces/scores: learned pieces (type 1) in id order starting at FIRST_PIECE."""
        self.tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(N_BYTES)] + list(pieces)
        self.scores = [0.0, 0.0, 0.0] + [0.0] * N_BYTES + [float(s) for s in scores]
        self.types = [TYPE_UNKNOWN, TYPE_CONTROL, TYPE_CONTROL] + [TYPE_BYTE] * N_BYTES + [TYPE_NORMAL] * len(pieces)
        self.piece_id = {p: FIRST_PIECE + i for i, p in enumerate(pieces)}
        self._cache = {}
        self._byte_bytes = {3 + b: bytes([b]) for b in range(N_BYTES)}

    @property
    def vocab_size(self):
        return len(self.tokens)

    # ------------------------------------------------------------------ encoding
    def _merge(self, syms):
        """The merge loop on a list of symbols; returns the final symbols."""
        pid, sc = self.piece_id, self.scores
        while len(syms) > 1:
            best, best_i = None, -1
            for i in range(len(syms) - 1):
                j = pid.get(syms[i] + syms[i + 1])
                if j is not None and (best is None or sc[j] > best):
                    best, best_i = sc[j], i
            if best_i < 0:
                break
            syms[best_i:best_i + 2] = [syms[best_i] + syms[best_i + 1]]
        return syms

    def _symbols_to_ids(self, syms):
        out = []
        for s in syms:
            j = self.piece_id.get(s)
            if j is not None:
                out.append(j)
            else:
                out.extend(3 + b for b in s.encode("utf-8"))
        return out

    def encode_normalized_reference(self, norm: str):
        """Whole-string algorithm, no chunking (slow; used by tests)."""
        return self._symbols_to_ids(self._merge(list(norm)))

    def _encode_chunk(self, chunk):
        ids = self._cache.get(chunk)
        if ids is None:
            ids = self._symbols_to_ids(self._merge(list(chunk)))
            if len(self._cache) < 500000:
                self._cache[chunk] = ids
        return ids

    def encode_normalized(self, norm: str):
        out = []
        for m in _CHUNK_RE.finditer(norm):
            out.extend(self._encode_chunk(m.group(0)))
        return out

    def encode(self, text: str, bos: bool = True):
        ids = self.encode_normalized(SPACE + text.replace(" ", SPACE))
        return ([BOS] if bos else []) + ids

    def encode_segment(self, seg: str):
        """Encode a piece of a document whose first character is not an ASCII letter; the
        ids of a document equal the concatenation of its segments' ids (see data.py)."""
        return self.encode_normalized(seg.replace(" ", SPACE))

    # ------------------------------------------------------------------ decoding
    def decode(self, ids):
        buf = bytearray()
        for t in ids:
            if t in self._byte_bytes:
                buf += self._byte_bytes[t]
            elif t >= FIRST_PIECE:
                buf += self.tokens[t].replace(SPACE, " ").encode("utf-8")
        s = buf.decode("utf-8", errors="replace")
        return s[1:] if s.startswith(" ") else s

    def token_text(self, t):
        if t in self._byte_bytes:
            return self._byte_bytes[t].decode("latin-1")
        if t >= FIRST_PIECE:
            return self.tokens[t].replace(SPACE, " ")
        return ""

    # ------------------------------------------------------------------ io
    def to_json(self):
        n = FIRST_PIECE
        return {"pieces": self.tokens[n:], "scores": self.scores[n:]}

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, ensure_ascii=False)

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        return cls(d["pieces"], d["scores"])


def train_bpe(texts, vocab_size: int):
    """Byte-pair merges over word chunks of the normalized texts.  Only letter runs (with an
    optional leading U+2581) are merged, so digits and punctuation stay single characters."""
    words = collections.Counter()
    for t in texts:
        norm = SPACE + t.replace(" ", SPACE)
        for m in _CHUNK_RE.finditer(norm):
            w = m.group(0)
            if len(w) > 1:
                words[w] += 1
    base = list(BASE_CHARS)
    n_merges = vocab_size - FIRST_PIECE - len(base)
    assert n_merges > 0
    # word -> list of symbols
    vocab = {w: list(w) for w in words}
    pair_counts = collections.Counter()
    where = collections.defaultdict(set)
    for w, syms in vocab.items():
        c = words[w]
        for a, b in zip(syms, syms[1:]):
            pair_counts[(a, b)] += c
            where[(a, b)].add(w)
    merges = []
    known = set(base)
    while len(merges) < n_merges and pair_counts:
        (a, b), cnt = max(pair_counts.items(), key=lambda kv: (kv[1], kv[0]))
        if cnt < 2:
            break
        new = a + b
        merges.append(new)
        known.add(new)
        for w in list(where[(a, b)]):
            syms = vocab[w]
            c = words[w]
            for x, y in zip(syms, syms[1:]):
                pair_counts[(x, y)] -= c
                if pair_counts[(x, y)] <= 0:
                    del pair_counts[(x, y)]
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            vocab[w] = out
            for x, y in zip(out, out[1:]):
                pair_counts[(x, y)] += c
                where[(x, y)].add(w)
        pair_counts.pop((a, b), None)
    # Merge pieces: score falls with merge rank; base characters score below every merge.
    pieces = base + merges
    scores = [-1e6] * len(base) + [-float(i) for i in range(len(merges))]
    return Tokenizer(pieces, scores)


def load_tokenizer(path):
    """A tokenizer.json (Tokenizer.save) or the pieces stored in a GGUF file."""
    if path.endswith(".json"):
        return Tokenizer.load(path)
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(here)), "tests", "reference"))
    from gguf_read import GGUFFile
    meta = GGUFFile(path).metadata
    return Tokenizer(list(meta["tokenizer.ggml.tokens"][FIRST_PIECE:]),
                     list(meta["tokenizer.ggml.scores"][FIRST_PIECE:]))
