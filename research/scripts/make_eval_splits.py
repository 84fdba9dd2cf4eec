#!/usr/bin/python3
"""Development and test splits of the reference model's held-out task families (issue 11).

    /usr/bin/python3 research/scripts/make_eval_splits.py   # research/results/heldout-{dev,test}/

Every family is drawn twice from disjoint seed streams: "dev" (tune and explore there) and
"test" (touched only for the final table). Both streams differ from the seed of
tools/train/make_heldout.py (31337), whose ten samples per family were read by earlier sessions,
and from the training seeds. The families are tools/train/data.py's evaluation families in the
model's own wording, plus two that this script adds (docs/eval-tasks.md):

* near_key: five facts whose keys share a word with the asked key (brave-lantern, brave-river,
  quiet-lantern, ...), in repeated-paragraph filler instead of fresh prose;
* drift: twelve facts in fresh prose and six questions asked in turn, each about a fact no
  earlier question touched; every later turn needs entries the first question never pointed at.

The tokenizer is rebuilt from the model's GGUF, so token counts are exact for the model.
"""

import argparse
import json
import os
import random
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(_ROOT, "tools", "train"))
sys.path.insert(0, os.path.join(_ROOT, "tests", "reference"))
import data  # noqa: E402
from gguf_read import GGUFFile  # noqa: E402
from tokenizer import FIRST_PIECE, Tokenizer  # noqa: E402

SPLIT_SEEDS = {"dev": 5101, "test": 7919}
FAMILIES = data.EVAL_FAMILIES + ["near_key", "drift"]


def tokenizer_from_gguf(path):
    meta = GGUFFile(path).metadata
    tokens = meta["tokenizer.ggml.tokens"]
    scores = meta["tokenizer.ggml.scores"]
    return Tokenizer(list(tokens[FIRST_PIECE:]), list(scores[FIRST_PIECE:]))


def task_near_key(rng, n_near=5):
    """One asked adjective-noun key and n_near distractor keys sharing its adjective or noun."""
    t = data.Task()
    keys = data.asked_and_near_keys(rng, n_near)
    asked = keys[0]
    vals = data.unique(rng, lambda: data.make_value(rng, "number"), len(keys))
    label = data.label_for(rng, "number")
    tmpl = rng.choice(data.FACT_TEMPLATES)
    t.items = [data.fill(tmpl, L=label, K=k, V=v) for k, v in zip(keys, vals)]
    t.header = rng.choice(data.HEADERS) if rng.random() < 0.7 else None
    t.qblock.extend(data._qa(rng, label, asked, vals[0], "near_key", tmpl=tmpl, echo=0.35))
    return t


def make_doc(tok, rng, family, length):
    if family == "near_key":
        return data.render(tok, rng, task_near_key(rng), length, 0.0, "repeat")
    if family == "drift":
        t = data.task_kv(rng, 12, 6, "drift", key_kind="adjnoun", value_kind="number")
        return data.render(tok, rng, t, length, 0.0, "fresh")
    return data._make_eval_doc(tok, rng, family, length)


def split_prompt(text):
    """As tools/train/make_heldout.py: the answer prefix is the text after the last '? ', '. '
    or ': ' of the turn's prompt."""
    body = text[1:] if text.startswith("\n") else text
    cut = max(body.rfind("? "), body.rfind(". "), body.rfind(": "))
    if cut < 0:
        return body, ""
    return body[:cut + 1], body[cut + 2:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(_ROOT, "models", "primekv-retrieval.gguf"))
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--dev", type=int, default=20, help="samples per family in the dev split")
    ap.add_argument("--test", type=int, default=50, help="samples per family in the test split")
    ap.add_argument("--families", nargs="+", default=FAMILIES)
    ap.add_argument("--out", default=os.path.join(_ROOT, "research", "results"))
    ap.add_argument("--fresh", type=int, metavar="SEED",
                    help="write only OUT/heldout-fresh-SEED (--test samples per family) from a "
                         "third seed stream: a set outside the repository, to re-check a claim")
    args = ap.parse_args()
    seeds = dict(SPLIT_SEEDS)
    splits = [("dev", args.dev), ("test", args.test)]
    if args.fresh is not None:
        if args.fresh in list(SPLIT_SEEDS.values()) + [31337]:
            ap.error("--fresh %d is the seed of an existing split" % args.fresh)
        seeds["fresh-%d" % args.fresh] = args.fresh
        splits = [("fresh-%d" % args.fresh, args.test)]
    tok = tokenizer_from_gguf(args.model)
    for split, n_want in splits:
        folder = os.path.join(args.out, "heldout-" + split)
        os.makedirs(folder, exist_ok=True)
        for fam in args.families:
            rng = random.Random("%d-%s-%d" % (seeds[split], fam, args.length))
            path = os.path.join(folder, fam + ".jsonl")
            n = 0
            with open(path, "w", encoding="utf-8") as f:
                for i in range(n_want):
                    d = None
                    for _ in range(10):
                        d = make_doc(tok, rng, fam, args.length - 16)
                        if d is not None:
                            break
                    if d is None:
                        continue
                    turns = []
                    for prompt, refs, gold in d.turns:
                        q, prefix = split_prompt(prompt)
                        turns.append({"question": q, "answer_prefix": prefix, "answers": refs,
                                      "max_new_tokens": len(tok.encode_segment(" " + gold)) + 4})
                    f.write(json.dumps({"id": "%s-%s-%d" % (split, fam, i), "context": d.context_text,
                                        "turns": turns, "metric": "string_match_all"},
                                       ensure_ascii=False) + "\n")
                    n += 1
            print("%s: %d samples" % (path, n))


if __name__ == "__main__":
    main()
