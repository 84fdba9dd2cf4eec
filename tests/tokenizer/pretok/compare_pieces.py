#!/usr/bin/env python3
"""Compares this engine's pre-tokenizer pieces with llama.cpp's, family by family, on corpus.json
and on random strings (a check beyond the ids of the ctest; nothing it writes is committed).

Needs a llama.cpp checkout with its shared library built (default /work/llama.cpp, commit
c392e509) and this project built (default ../../../build/release); run with /usr/bin/python3:
    LLAMA_DIR=/work/llama.cpp BUILD_DIR=build/release /usr/bin/python3 compare_pieces.py \
        [--random N] [--seed S]
It reads the regular expressions of each pre-tokenizer type from the checkout's
src/llama-vocab.cpp, builds llamacpp_split.cc (llama.cpp's unicode_regex_split) and
primekv_split.cc (PreTokenize), and prints the strings whose pieces differ. The random strings
mix ASCII, code points assigned in this Python's Unicode version (14: the engine's tables) and
the characters the expressions single out. Exits 1 when some piece differs.
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA_DIR = os.environ.get("LLAMA_DIR", "/work/llama.cpp")
BUILD_DIR = os.environ.get("BUILD_DIR", os.path.join(HERE, "../../../build/release"))
SRC = os.path.join(HERE, "../../../src")

# One tokenizer.ggml.pre name per family -> llama.cpp's pre-tokenizer type.
FAMILIES = {
    "default": "DEFAULT", "gpt-2": "LLAMA_VOCAB_PRE_TYPE_GPT2",
    "starcoder": "LLAMA_VOCAB_PRE_TYPE_STARCODER", "falcon": "LLAMA_VOCAB_PRE_TYPE_FALCON",
    "chameleon": "LLAMA_VOCAB_PRE_TYPE_CHAMELEON", "llama-bpe": "LLAMA_VOCAB_PRE_TYPE_LLAMA3",
    "stablelm2": "LLAMA_VOCAB_PRE_TYPE_QWEN2", "tekken": "LLAMA_VOCAB_PRE_TYPE_TEKKEN",
    "deepseek-v3": "LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM",
    "deepseek-coder": "LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_CODER",
    "deepseek-llm": "LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM", "bloom": "LLAMA_VOCAB_PRE_TYPE_BLOOM",
    "viking": "LLAMA_VOCAB_PRE_TYPE_VIKING",
}
ATOMS = ["'s", "'T", "'re", "'LL", "IMGIMG", "Z", "<sentinel:", "> ", "  ", "    ", "\r\n",
         "\u3000", "\u00a0", "\u2003", "\u0085", "~", "`", "/", "…", "。", "，", "、", "।", "۔",
         "،", "(", "|", ")"]


def expressions_inc():
    """C++ source for kExpressions, the regex lists of llm_tokenizer_bpe's switch."""
    src = open(os.path.join(LLAMA_DIR, "src/llama-vocab.cpp"), encoding="utf-8").read()
    begin = src.index("struct llm_tokenizer_bpe : llm_tokenizer {")
    body = src[begin:src.index("std::vector<std::string> regex_exprs;", begin)]
    entries, pending = [], []
    for m in re.finditer(r"case (LLAMA_VOCAB_PRE_TYPE_\w+):|default:|regex_exprs = \{(.*?)\n\s*\};",
                         body, re.S):
        if m.group(1):
            pending.append(m.group(1))
        elif m.group(0) == "default:":
            pending.append("DEFAULT")
        else:
            entries += [f'{{"{p}", {{{m.group(2)}}}}},' for p in pending]
            pending = []
    return ("static const std::map<std::string, std::vector<std::string>> kExpressions = {\n" +
            "\n".join(entries) + "\n};\n")


def main():
    n_random = int(sys.argv[sys.argv.index("--random") + 1]) if "--random" in sys.argv else 20000
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 1
    tmp = tempfile.mkdtemp()
    with open(os.path.join(tmp, "llamacpp_split_exprs.inc"), "w", encoding="utf-8") as f:
        f.write(expressions_inc())
    bin_dir = os.path.join(LLAMA_DIR, "build/bin")
    llama_tool, ours_tool = os.path.join(tmp, "llamacpp_split"), os.path.join(tmp, "primekv_split")
    subprocess.run(["g++", "-std=c++17", "-O2", "-I" + tmp, "-I" + os.path.join(LLAMA_DIR, "src"),
                    os.path.join(HERE, "llamacpp_split.cc"), "-L" + bin_dir, "-lllama",
                    "-Wl,-rpath," + bin_dir, "-o", llama_tool], check=True)
    libs = [os.path.join(BUILD_DIR, "src", d, f"libprimekv_{d}.a") for d in
            ("tokenizer", "gguf", "util")]
    subprocess.run(["g++", "-std=c++20", "-O2", "-I" + SRC, "-I" + os.path.join(SRC, "../include"),
                    os.path.join(HERE, "primekv_split.cc"), *libs, "-o", ours_tool], check=True)

    strings = json.load(open(os.path.join(HERE, "corpus.json"), encoding="utf-8"))
    rng = random.Random(seed)
    assigned = [cp for cp in range(0x80, 0x30000)
                if unicodedata.category(chr(cp)) not in ("Cn", "Cs")]
    ascii_chars = [chr(c) for c in range(0x20, 0x7F)] + list("\t\n\r\v\f")
    for _ in range(n_random):
        parts = []
        for _ in range(rng.randrange(1, 30)):
            r = rng.random()
            parts.append(rng.choice(ascii_chars) if r < 0.5 else
                         chr(rng.choice(assigned)) if r < 0.75 else rng.choice(ATOMS))
        strings.append("".join(parts))
    data = "\0".join(strings).encode() + b"\0"
    failed = False
    for name, pre_type in FAMILIES.items():
        ours = subprocess.run([ours_tool, name], input=data, capture_output=True,
                              check=True).stdout.decode().splitlines()
        theirs = subprocess.run([llama_tool, pre_type], input=data, capture_output=True,
                                check=True).stdout.decode().splitlines()
        bad = [i for i in range(len(strings)) if ours[i].split() != theirs[i].split()]
        print(f"{name}: {len(strings) - len(bad)}/{len(strings)} strings split as llama.cpp does")
        for i in bad[:3]:
            print("  ", repr(strings[i]))
            print("   ours    ", [bytes.fromhex(h).decode(errors="replace") for h in ours[i].split()])
            print("   llama.cpp", [bytes.fromhex(h).decode(errors="replace") for h in theirs[i].split()])
        failed |= bool(bad)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
