#!/usr/bin/python3
"""How many facts a query-free press can keep whole: the token-count capacity of a KV head.

    /usr/bin/python3 research/scripts/capacity_bound.py \
        --tasks research/results/heldout-test/dense.jsonl \
        --results research/results/reference-heldout-test-v3/results.jsonl   # or .jsonl.xz

A query-free press chooses its kept set before the question, so which fact is asked is
independent of what it keeps. A fact can be copied only if every token of its value survives
in the head that copies it (research/notes/results-history.md §6.3: the last layer's copy); the model finds the fact
through its key's tokens, which must survive too. With keep = floor(n (1 - ratio)) entries per
head (the engine's uniform budget), the most facts a head can hold whole is the greedy count
of the cheapest facts that fit. Two capacities are printed per ratio, as a share of the
sample's facts (mean over samples):
 * `values`: value tokens only (an upper bound on what any kept set can hold);
 * `values+keys`: value and key tokens (what a fact needs to be both found and copied).
If the full cache's correctness does not depend on which facts survive, a query-free press
scores at most about full x capacity; `--results` prints that estimate beside each press's
measured score on the same family (x100). The estimate is a heuristic, not a theorem: a press
could in principle favour the facts the model gets right, and dropping distractors can help.
"""

import argparse
import collections
import json
import os
import re
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(_ROOT, "tests", "reference"))
sys.path.insert(0, os.path.join(_ROOT, "tools", "train"))
sys.path.insert(0, _HERE)
import ref_forward as R  # noqa: E402
from eval_rows import open_text  # noqa: E402
from tokenizer import FIRST_PIECE, Tokenizer  # noqa: E402

# A fact is a sentence of the generator's templates holding one key (a hyphenated word pair)
# and one value (a run of digits), in either order.
_SENTENCE = re.compile(r"[^.\n]+\.")
_KEY = re.compile(r"[a-z]+-[a-z]+")
_VALUE = re.compile(r"(?<![0-9a-z-])[0-9]+(?![0-9a-z-])")


def fact_costs(tok, context):
    """Per fact (value tokens, key tokens) of the tokenised context, by character spans."""
    ids = tok.encode(context + "\n", bos=True)
    text = " " + context + "\n"
    ends, pos = [], 0
    for t in ids:
        pos += len(tok.token_text(t))
        ends.append(pos)
    ends = np.asarray(ends)
    starts = np.concatenate([[0], ends[:-1]])

    def tokens_in(a, b):
        return int(np.count_nonzero((ends > a) & (starts < b)))

    costs = []
    for sent in _SENTENCE.finditer(text):
        keys = list(_KEY.finditer(sent.group()))
        values = list(_VALUE.finditer(sent.group()))
        if len(keys) == 1 and len(values) == 1:
            off = sent.start()
            key, value = keys[0].span(), values[0].span()
            costs.append((tokens_in(off + value[0], off + value[1]), tokens_in(off + key[0], off + key[1])))
    return len(ids), costs


def greedy_share(costs, keep):
    """Largest share of facts whose costs fit in `keep` entries (cheapest first)."""
    if not costs:
        return 0.0
    total, n = 0, 0
    for c in sorted(costs):
        if total + c > keep:
            break
        total += c
        n += 1
    return n / len(costs)


def selftest(tok):
    assert greedy_share([3, 1, 2], 3) == 2 / 3  # 1 + 2 fit, 3 does not
    assert greedy_share([5], 4) == 0.0 and greedy_share([], 4) == 0.0
    # Both template orders; every digit is a token of its own in these vocabularies, so the
    # value costs are the digit counts. Sentences with two keys or no value are not facts.
    n, costs = fact_costs(tok, "red-fox was given the combination 1234. The access code 987 is "
                               "for blue-sky. Both red-fox and blue-sky were here. Nothing 55 here.")
    assert [v for v, _ in costs] == [4, 3], costs
    assert all(k >= 2 for _, k in costs), costs  # a hyphenated pair is at least two tokens
    assert n == len(tok.encode("red-fox was given the combination 1234. The access code 987 is for "
                               "blue-sky. Both red-fox and blue-sky were here. Nothing 55 here.\n", bos=True))
    print("capacity_bound.py selftest: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(_ROOT, "models", "primekv-retrieval.gguf"))
    ap.add_argument("--tasks", help="one jsonl task file")
    ap.add_argument("--ratios", default="0.25,0.5,0.75,0.9")
    ap.add_argument("--samples", type=int, default=0, help="first N samples (0: all)")
    ap.add_argument("--results", help="an eval folder's results.jsonl (or its .xz): measured scores "
                    "beside the estimate")
    ap.add_argument("--selftest", action="store_true", help="check the counting on hand examples")
    args = ap.parse_args()
    meta = R.Model(args.model).meta
    tok = Tokenizer(list(meta["tokenizer.ggml.tokens"][FIRST_PIECE:]),
                    list(meta["tokenizer.ggml.scores"][FIRST_PIECE:]))
    if args.selftest:
        return selftest(tok)
    if not args.tasks:
        ap.error("--tasks is required (or --selftest)")
    ratios = [float(r) for r in args.ratios.split(",")]
    with open(args.tasks, encoding="utf-8") as f:
        samples = [json.loads(x) for x in f if x.strip()]
    if args.samples:
        samples = samples[:args.samples]
    cap_v = collections.defaultdict(list)
    cap_vk = collections.defaultdict(list)
    n_tok, n_fact, v_share = [], [], []
    for s in samples:
        n, costs = fact_costs(tok, s["context"])
        if not costs:
            sys.exit(f"capacity_bound.py: no fact lines found in sample {s['id']}")
        n_tok.append(n)
        n_fact.append(len(costs))
        v_share.append(sum(v for v, _ in costs) / n)
        for r in ratios:
            keep = max(1, int(np.floor(n * (1.0 - r))))
            cap_v[r].append(greedy_share([v for v, _ in costs], keep))
            cap_vk[r].append(greedy_share([v + k for v, k in costs], keep))
    print(f"{args.tasks}: {len(samples)} samples, {np.mean(n_tok):.0f} tokens, {np.mean(n_fact):.1f} facts, "
          f"value tokens {100 * np.mean(v_share):.1f}% of the context")
    measured = collections.defaultdict(list)
    full = []
    if args.results:
        base = os.path.basename(args.tasks)
        with open_text(args.results) as f:
            for line in f:
                row = json.loads(line)
                if row.get("status") != "ok" or os.path.basename(row["task"].split(":", 1)[-1]) != base:
                    continue
                if row["press"] == "none":
                    full.append(row["score"])
                else:
                    measured[(row["press"], row["ratio"])].append(row["score"])
    presses = sorted({p for p, _ in measured})
    head = "| ratio | capacity: values | capacity: values+keys |"
    if full:
        head += f" full x capacity (full = {100 * np.mean(full):.1f}) | " + " | ".join(presses) + " |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in ratios:
        cv, cvk = np.mean(cap_v[r]), np.mean(cap_vk[r])
        line = f"| {r} | {100 * cv:.1f}% | {100 * cvk:.1f}% |"
        if full:
            f = np.mean(full)
            line += f" {100 * f * cv:.1f} / {100 * f * cvk:.1f} | "
            line += " | ".join(f"{100 * np.mean(measured[(p, r)]):.1f}" if measured[(p, r)] else "" for p in presses)
            line += " |"
        print(line)


if __name__ == "__main__":
    main()
