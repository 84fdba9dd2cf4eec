#!/usr/bin/python3
"""Long-context held-out sets (issue 25): the held-out task families at 4K, 8K, 16K and 32K
tokens, in the engine's `jsonl:PATH` format, from tools/train/data_long.py.

    /usr/bin/python3 scripts/make_long_splits.py                        # dev and test, every length
    /usr/bin/python3 scripts/make_long_splits.py --splits fresh --fresh-seed 424242 --out /tmp/fresh
    /usr/bin/python3 scripts/make_long_splits.py --lengths 4096 --n 2 --out /tmp/long  # a quick look

Layout: OUT/long-SPLIT/LENGTH/FAMILY.jsonl (fresh: OUT/long-fresh-SEED/...), plus
OUT/long-SPLIT/manifest.json (seeds, tokenizer file and its sha256, per-file sample counts and
token needs).  The default OUT (research/results/long-heldout/) is ignored by git: the sets
regenerate byte for byte from this script, so the lead decides what to commit.

Families: the twelve of data_long.HELDOUT_FAMILIES: the eleven 2K held-out families with their
2K settings (research/scripts/make_eval_splits.py) and multihop (a 2-hop chain, links far
apart).  Every planted item sits at a depth drawn uniformly over the context's tokens; the
variable-tracking assignments and multi-hop links at least 1/8 resp. 1/4 of the filler apart.

Seed streams (each family and length its own random.Random):
    dev    random.Random("long-dev-6101-FAMILY-LENGTH")
    test   random.Random("long-test-8923-FAMILY-LENGTH")
    fresh  random.Random("long-fresh-SEED-FAMILY-LENGTH"), SEED from --fresh-seed (required for
           fresh, so a fresh set need not live in the repository)
These strings differ from every other stream of the project: the 2K splits use "5101-..." and
"7919-..." (research/scripts/make_eval_splits.py), tools/train/make_heldout.py "31337-...", and
training integer seeds.

Extra fields per line (the engine ignores them): family, length, tokens {context, turns,
max_new_tokens, need} where need = context + sum(turns) + turns x max_new_tokens is what the
engine's plain-text runner needs in multi-turn mode (its largest need; context mode needs less),
and needles [{depth, token, role, asked}]: the requested depth in [0, 1) and the token offset of
every planted item.  need <= LENGTH always, and is within a filler sentence of it.

Token counts are exact for the tokenizer read from --model (default
models/primekv-retrieval-2.gguf, whose tokenizer is the first model's: the long model keeps it, so
the counts stay exact for it; pass --model models/primekv-long.gguf once it exists to check).
"""

import argparse
import hashlib
import json
import os
import random
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(_ROOT, "tools", "train"))
sys.path.insert(0, os.path.join(_ROOT, "tests", "reference"))
import corpus  # noqa: E402
import data_long  # noqa: E402
from gguf_read import GGUFFile  # noqa: E402
from tokenizer import FIRST_PIECE, Tokenizer  # noqa: E402

SPLIT_SEEDS = {"dev": 6101, "test": 8923}
USED_SEEDS = {5101, 7919, 31337, 6101, 8923}
DEFAULT_N = {"dev": 20, "test": 50, "fresh": 50}


def tokenizer_from_gguf(path):
    meta = GGUFFile(path).metadata
    return Tokenizer(list(meta["tokenizer.ggml.tokens"][FIRST_PIECE:]),
                     list(meta["tokenizer.ggml.scores"][FIRST_PIECE:]))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def stream_seed(split, seed, family, length, filler="generator"):
    return "long-%s%s-%d-%s-%d" % ("real-" if filler == "real" else "", split, seed, family, length)


def write_family(tok, split, seed, family, length, n, path, filler_docs=None):
    rng = random.Random(stream_seed(split, seed, family, length, "real" if filler_docs else "generator"))
    needs = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            s = None
            for _ in range(10):
                s = data_long.long_eval_sample(tok, rng, family, length, filler_docs=filler_docs)
                if s is not None:
                    break
            if s is None:
                continue
            line = {"id": "%s-%s-%d-%d" % (split, family, length, i)}
            line.update(s)
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
            needs.append(s["tokens"]["need"])
    return needs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(_ROOT, "models", "primekv-retrieval-2.gguf"),
                    help="GGUF whose tokenizer measures the lengths")
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    ap.add_argument("--splits", nargs="+", default=["dev", "test"], choices=["dev", "test", "fresh"])
    ap.add_argument("--fresh-seed", type=int, default=None, help="seed of the fresh split (required for it)")
    ap.add_argument("--n", type=int, default=None,
                    help="samples per family and length (default: dev 20, test 50, fresh 50)")
    ap.add_argument("--families", nargs="+", default=data_long.HELDOUT_FAMILIES)
    ap.add_argument("--out", default=os.path.join(_ROOT, "research", "results", "long-heldout"))
    ap.add_argument("--filler", choices=["generator", "real"], default="generator",
                    help="real: every family's filler is real prose from the corpus split of the same "
                         "name (tools/train/corpus.py: dev and test packages are never trained on; fresh "
                         "draws from the license texts); the folders are long-real-SPLIT")
    ap.add_argument("--corpus", default=None, help="corpus cache (default tools/train/corpus.py's)")
    args = ap.parse_args()
    for fam in args.families:
        if fam not in data_long.HELDOUT_FAMILIES:
            ap.error("unknown family %r (known: %s)" % (fam, " ".join(data_long.HELDOUT_FAMILIES)))
    if "fresh" in args.splits:
        if args.fresh_seed is None:
            ap.error("the fresh split needs --fresh-seed SEED")
        if args.fresh_seed in USED_SEEDS:
            ap.error("--fresh-seed %d is the seed of an existing split" % args.fresh_seed)
    tok = tokenizer_from_gguf(args.model)
    docs = None
    if args.filler == "real":
        docs = corpus.by_split(corpus.load(args.corpus or corpus.CACHE))
    for split in args.splits:
        seed = args.fresh_seed if split == "fresh" else SPLIT_SEEDS[split]
        name = "long-fresh-%d" % seed if split == "fresh" else "long-" + split
        n = args.n or DEFAULT_N[split]
        filler_docs = None
        if docs is not None:
            name = name.replace("long-", "long-real-", 1)
            filler_docs = docs["license" if split == "fresh" else split]
        manifest = {"split": split, "seed": seed,
                    "stream": stream_seed(split, seed, "FAMILY", 0, args.filler)[:-1] + "LENGTH",
                    "tokenizer": os.path.relpath(args.model, _ROOT), "tokenizer_sha256": sha256(args.model),
                    "samples_per_family": n, "filler": args.filler, "files": {}}
        if filler_docs is not None:
            table, digest = corpus.stats(filler_docs)
            manifest["corpus"] = {"digest": digest, "documents": table,
                                  "packages": sorted({d["package"] for d in filler_docs})}
        for L in args.lengths:
            folder = os.path.join(args.out, name, str(L))
            os.makedirs(folder, exist_ok=True)
            for fam in args.families:
                t0 = time.time()
                path = os.path.join(folder, fam + ".jsonl")
                needs = write_family(tok, split, seed, fam, L, n, path, filler_docs)
                manifest["files"]["%d/%s.jsonl" % (L, fam)] = {
                    "samples": len(needs), "need_min": min(needs) if needs else None,
                    "need_max": max(needs) if needs else None}
                print("%s: %d samples, need %s..%s of %d (%.1fs)" % (
                    path, len(needs), min(needs) if needs else "-", max(needs) if needs else "-", L,
                    time.time() - t0), flush=True)
        with open(os.path.join(args.out, name, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
