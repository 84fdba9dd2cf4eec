#!/usr/bin/env python3
"""Regenerates expected.txt: llama.cpp's token ids for corpus.json under one tokenizer.ggml.pre
name per pre-tokenizer family, and names.txt: for every name llama.cpp knows, whether llama.cpp
loads it and which family's ids it gives on the whole corpus.

Needs a llama.cpp checkout built with its shared library (default /work/llama.cpp, commit
c392e509) and the shared fixtures; run from this directory with /usr/bin/python3:
    LLAMA_DIR=/work/llama.cpp /usr/bin/python3 make_reference.py [--ids DIR]
Every vocabulary is llama.cpp's ggml-vocab-gpt-2.gguf with tokenizer.ggml.pre replaced.
expected.txt: a header line with the names, then one line per corpus string with a 32-bit
FNV-1a hash (8 hex digits) of each name's ids as little-endian int32, "=" where it equals the
hash of the column before. --ids DIR also writes the full ids, one file per name.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA_DIR = os.environ.get("LLAMA_DIR", "/work/llama.cpp")
VOCAB = os.path.join(HERE, "../../../../shared/fixtures/tokenizers/ggml-vocab-gpt-2.gguf")

# One name per family (and per flag that changes ids), in the order of expected.txt's columns.
FAMILIES = ["gpt-2", "starcoder", "falcon", "default", "chameleon", "llama-bpe", "dbrx",
            "stablelm2", "tekken", "deepseek-v3", "deepseek-coder", "deepseek-llm",
            "bloom", "viking"]
# Every name llama.cpp c392e509 maps (llama-vocab.cpp), plus one it refuses.
NAMES = ["default", "llama3", "llama-v3", "llama-bpe", "falcon3", "deepseek-llm",
         "deepseek-coder", "deepseek-v3", "falcon", "mpt", "starcoder", "gpt-2", "phi-2",
         "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de",
         "jina-v2-code", "roberta-bpe", "refact", "command-r", "qwen2", "deepseek-r1-qwen",
         "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat", "chatglm-bpe", "viking", "jais",
         "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "chameleon",
         "minerva-7b", "megrez", "gpt2"]


def patch_pre(data, name):
    """The GGUF bytes with the string value of tokenizer.ggml.pre replaced by `name`."""
    key = b"tokenizer.ggml.pre"
    at = data.index(struct.pack("<Q", len(key)) + key)
    vtype_at = at + 8 + len(key)
    assert struct.unpack_from("<I", data, vtype_at)[0] == 8  # string
    n = struct.unpack_from("<Q", data, vtype_at + 4)[0]
    val_at = vtype_at + 12
    new = name.encode()
    return data[:vtype_at + 4] + struct.pack("<Q", len(new)) + new + data[val_at + n:]


def rename_token(data, old, new):
    """The GGUF bytes with the first vocabulary string `old` renamed `new`."""
    at = data.index(struct.pack("<Q", len(old)) + old, data.index(b"tokenizer.ggml.tokens"))
    return data[:at] + struct.pack("<Q", len(new)) + new + data[at + 8 + len(old):]


# Strings for jina-v2's "<mask>" (llama.cpp strips the whitespace before it), tokenized with
# special-token parsing on GPT-2's vocabulary whose <|endoftext|> (id 50256) is renamed <mask>.
MASK_STRINGS = ["a <mask> b", "a  \t\n<mask>", "<mask>", " <mask>", "x\u00a0<mask>y",
                "a<mask>", "<mask> <mask>  <mask>", "hello world  <mask>.", "\n\n<mask>\n"]


def fnv1a(ids):
    h = 0x811C9DC5
    for b in b"".join(struct.pack("<i", i) for i in ids):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def main():
    ids_dir = sys.argv[sys.argv.index("--ids") + 1] if "--ids" in sys.argv else None
    tmp = tempfile.mkdtemp()
    tool = os.path.join(tmp, "llamacpp_tokenize")
    bin_dir = os.path.join(LLAMA_DIR, "build/bin")
    subprocess.run(["g++", "-std=c++17", "-O2", "-I" + os.path.join(LLAMA_DIR, "include"),
                    "-I" + os.path.join(LLAMA_DIR, "ggml/include"),
                    os.path.join(HERE, "llamacpp_tokenize.cc"), "-L" + bin_dir, "-lllama",
                    "-lggml", "-lggml-base", "-Wl,-rpath," + bin_dir, "-o", tool], check=True)
    with open(VOCAB, "rb") as f:
        vocab = f.read()
    corpus = json.load(open(os.path.join(HERE, "corpus.json"), encoding="utf-8"))
    stdin = "\0".join(corpus).encode() + b"\0"

    def run(name, data, base=vocab, extra=()):
        path = os.path.join(tmp, "vocab.gguf")
        with open(path, "wb") as f:
            f.write(patch_pre(base, name))
        out = subprocess.run([tool, path, *extra], input=data, capture_output=True).stdout
        lines = out.decode().splitlines()
        return lines[1:] if lines and lines[0].startswith("add_bos ") else lines

    def add_bos(name):
        path = os.path.join(tmp, "vocab.gguf")
        with open(path, "wb") as f:
            f.write(patch_pre(vocab, name))
        out = subprocess.run([tool, path], input=b"", capture_output=True).stdout.decode()
        return out.split()[1] if out.startswith("add_bos ") else "-"

    columns = []
    for name in FAMILIES:
        lines = run(name, stdin)
        assert len(lines) == len(corpus), (name, len(lines))
        ids = [[int(t) for t in line.split()] for line in lines]
        if ids_dir:
            os.makedirs(ids_dir, exist_ok=True)
            with open(os.path.join(ids_dir, name + ".ids"), "w") as f:
                f.writelines(line + "\n" for line in lines)
        columns.append([fnv1a(x) for x in ids])
    with open(os.path.join(HERE, "names.txt"), "w") as f:
        f.write("# name, whether llama.cpp c392e509 loads ggml-vocab-gpt-2.gguf with it, the first\n"
                "# expected.txt column whose ids it reproduces on every corpus string, and whether\n"
                "# it adds BOS by default (the vocabulary has no tokenizer.ggml.add_bos_token)\n")
        for name in NAMES + ["no-such-pre"]:
            lines = run(name, stdin)
            if len(lines) != len(corpus):
                f.write(f"{name} refused - -\n")
                continue
            hashes = [fnv1a([int(t) for t in line.split()]) for line in lines]
            same = [FAMILIES[k] for k, col in enumerate(columns) if col == hashes]
            f.write(f"{name} loads {same[0] if same else '-'} {add_bos(name)}\n")
    masked = rename_token(vocab, b"<|endoftext|>", b"<mask>")
    with open(os.path.join(HERE, "mask.txt"), "w") as f:
        f.write("# name, then for each of MASK_STRINGS (make_reference.py) llama.cpp's ids with\n"
                "# special tokens parsed, GPT-2's vocabulary with <|endoftext|> renamed <mask>\n")
        mask_input = "\0".join(MASK_STRINGS).encode() + b"\0"
        for name in ["gpt-2", "jina-v2-es", "jina-v2-de", "jina-v2-code"]:
            lines = run(name, mask_input, masked, ["special"])
            assert len(lines) == len(MASK_STRINGS), (name, lines)
            f.write(name + "\n" + "".join(line + "\n" for line in lines))
    with open(os.path.join(HERE, "expected.txt"), "w") as f:
        f.write(" ".join(FAMILIES) + "\n")
        for row in zip(*columns):
            cells = [f"{h:08x}" if k == 0 or h != row[k - 1] else "=" for k, h in enumerate(row)]
            f.write(" ".join(cells) + "\n")


if __name__ == "__main__":
    main()
