#!/usr/bin/python3
"""Write held-out evaluation sets in the engine's `jsonl:PATH` format, one file per task family
of data.py, in the wording the reference model was trained on but from seeds training never
drew. `primekv eval --tasks jsonl:FILE` then compares presses on tasks the model can do, beside
the RULER-worded tasks that measure generalisation.

    /usr/bin/python3 tools/train/make_heldout.py --length 2048 --n 10 --out research/results/heldout

Each turn's prompt is split into "question" and "answer_prefix" (the runner joins them as
"\\n" + question + "\\n" + prefix); "max_new_tokens" is the gold answer's token count plus 4.
Needs only the Python standard library and the run's tokenizer (tools/train/runs/NAME/).
"""

import argparse
import json
import os
import random
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import data  # noqa: E402
from tokenizer import Tokenizer  # noqa: E402

HELDOUT_SEED = 31337  # training draws from --seed (1234) and eval_torch from 777 + length


def split_prompt(text):
    """'\\n...Q? A prefix' -> (question, answer prefix): the prefix is the last ' '-joined
    segment that the question templates add, found as the text after the last '?' or '.'."""
    body = text[1:] if text.startswith("\n") else text
    cut = max(body.rfind("? "), body.rfind(". "), body.rfind(": "))
    if cut < 0:
        return body, ""
    return body[:cut + 1], body[cut + 2:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="primekv-retrieval")
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--families", nargs="+", default=data.EVAL_FAMILIES)
    ap.add_argument("--out", default="research/results/heldout")
    args = ap.parse_args()
    tok = Tokenizer.load(os.path.join(_HERE, "runs", args.name, "tokenizer.json"))
    os.makedirs(args.out, exist_ok=True)
    for fam in args.families:
        rng = random.Random("%d-%s-%d" % (HELDOUT_SEED, fam, args.length))
        path = os.path.join(args.out, "%s.jsonl" % fam)
        n = 0
        with open(path, "w", encoding="utf-8") as f:
            for i in range(args.n):
                # Room for the stray prefix space and newlines the runner adds.
                d = data.make_eval_doc(tok, rng, fam, args.length - 16)
                if d is None:
                    continue
                turns = []
                for prompt, refs, gold in d.turns:
                    q, prefix = split_prompt(prompt)
                    turns.append({"question": q, "answer_prefix": prefix, "answers": refs,
                                  "max_new_tokens": len(tok.encode_segment(" " + gold)) + 4})
                f.write(json.dumps({"id": "%s-%d" % (fam, i), "context": d.context_text, "turns": turns,
                                    "metric": "string_match_all"}, ensure_ascii=False) + "\n")
                n += 1
        print("%s: %d samples" % (path, n))


if __name__ == "__main__":
    main()
