#!/usr/bin/python3
"""Write models/README.md (the model card) from a finished run:
    /usr/bin/python3 tools/train/model_card.py --name primekv-retrieval --gguf models/primekv-retrieval.gguf

Reads tools/train/runs/<name>/summary.json and the full-cache evaluation
tools/train/runs/<name>/eval.json (run eval_torch.py first, see the README it writes).
"""

import argparse
import json
import lzma
import os
import shutil

_HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(_HERE))

FAMILY_NOTES = {
    "single": "one fact (adjective-noun key, 4-7 digit number) in grammar prose, one question",
    "single_uuid": "one fact with a UUID value",
    "multikey": "four facts, one asked",
    "dense": "haystack made only of distractor facts, one real fact asked",
    "multivalue": "one key with four values, all asked (order of appearance)",
    "multiquery": "four facts, all four asked in one question",
    "vt": "variable tracking: one chain of 4 hops in a repeated filler paragraph; list the 5 names",
    "freq": "word list; name the 3 most frequent words",
    "multiturn": "eight facts, four questions in turn, each gold answer kept in the context",
}


def open_rows(d):
    """DIR/results.jsonl, or the xz-compressed copy that research/results/ stores."""
    path = os.path.join(d, "results.jsonl")
    if not os.path.exists(path) and os.path.exists(path + ".xz"):
        return lzma.open(path + ".xz", "rt", encoding="utf-8")
    return open(path)


def engine_table(dirs):
    """Full-cache rows (press none) of `primekv eval` runs: RULER-named tasks with RULER-like
    wording (src/eval), scored by the engine, per task and context length."""
    acc = {}
    for d in dirs:
        with open_rows(d) as f:
            for line in f:
                j = json.loads(line)
                if j["press"] != "none":
                    continue
                task = j["task"]
                if task.startswith("jsonl:"):  # held-out sets: jsonl:DIR/family.jsonl
                    task = "held-out " + os.path.basename(task)[:-len(".jsonl")]
                    # The held-out sets are written at 2048 tokens (make_heldout.py --length 2048);
                    # a few word-frequency samples come out shorter.
                    j["length"] = 2048
                key = (task, j["length"])
                acc.setdefault(key, []).append(j["score"])
    tasks = sorted({t for t, _ in acc}, key=lambda t: (t == "multiturn", t))
    lengths = sorted({n for _, n in acc})
    n = max(len(v) for v in acc.values())
    L = ["## Full-cache accuracy in the engine (`primekv eval`, press `none`)\n",
         "Score x 100 (RULER string match; multi-turn tasks average their turns), up to %d scored answers per cell. "
         "RULER-named tasks use the evaluation generators' wording (src/eval), which training never saw; "
         "`held-out` rows are the model's own task families from seeds training never drew "
         "(`tools/train/make_heldout.py`).\n" % n,
         "| task | " + " | ".join("%d tokens" % x for x in lengths) + " |",
         "|---|" + "---|" * len(lengths)]
    for t in tasks:
        cells = ["%.1f" % (100 * sum(acc[(t, x)]) / len(acc[(t, x)])) if (t, x) in acc else "-" for x in lengths]
        L.append("| %s | %s |" % (t, " | ".join(cells)))
    L.append("")
    return L


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="primekv-retrieval")
    ap.add_argument("--gguf", default="models/primekv-retrieval.gguf")
    ap.add_argument("--out", default=os.path.join(REPO, "models", "README.md"))
    ap.add_argument("--note", default=None, help="a remark on the run, kept in the training record")
    ap.add_argument("--engine-eval", nargs="*", default=[],
                    help="primekv eval output folders (results.jsonl); their full-cache rows are tabulated")
    args = ap.parse_args()
    run = os.path.join(_HERE, "runs", args.name)
    with open(os.path.join(run, "summary.json")) as f:
        s = json.load(f)
    ev = None
    if os.path.exists(os.path.join(run, "eval.json")):
        with open(os.path.join(run, "eval.json")) as f:
            ev = json.load(f)
    c, a = s["config"], s["args"]
    gguf = args.gguf
    size = os.path.getsize(os.path.join(REPO, gguf)) / 1e6 if os.path.exists(os.path.join(REPO, gguf)) else None
    L = []
    L.append("# PrimeKV reference model: `%s`\n" % os.path.basename(gguf))
    L.append("A small Llama-architecture model trained from scratch on this project's own synthetic "
             "retrieval data, so that KV-cache compression can be measured on a model whose full-cache "
             "answers are known to be right. It is not a language model: outside the task formats below "
             "its text is noise.\n")
    L.append("## Architecture\n")
    L.append("| field | value |\n|---|---|")
    rows = [("GGUF architecture", "llama"), ("parameters", "%.2fM" % (s["parameters"] / 1e6)),
            ("layers", c["n_layers"]), ("d_model", c["d_model"]), ("feed-forward", "%d (SwiGLU)" % c["ffn_dim"]),
            ("query heads / KV heads", "%d / %d (head_dim %d)" % (c["n_heads"], c["n_kv_heads"], c["head_dim"])),
            ("context length", c["context_length"]), ("RoPE", "adjacent pairs, base %g" % c["rope_base"]),
            ("RMSNorm eps", c["norm_eps"]), ("output matrix", "tied to embedding" if c["tied_output"] else "separate"),
            ("vocabulary", "%d (SentencePiece-style llama: <unk>, <s>, </s>, 256 byte tokens, BPE pieces; digits are single tokens)" % c["vocab_size"])]
    if size:
        rows.append(("file size", "%.1f MB" % size))
    L += ["| %s | %s |" % r for r in rows]
    L.append("")
    L.append("## Recipe\n")
    L.append("Reproduce from scratch (CPU, Debian `python3-torch` 1.13, `libopenblas0-pthread`, optional `libjemalloc2`):\n")
    L.append("```\n/usr/bin/python3 tools/train/train.py --minutes %g --name %s --out %s\n```\n" % (a["minutes"], s["name"], gguf))
    L.append("- Data: `tools/train/data.py`, seed %d. Grammar prose haystacks (fresh or a repeated paragraph), planted "
             "facts with our own templates (not RULER's wording), distractor facts, variable-tracking chains, word-frequency "
             "lists, multi-query / multi-value / multi-turn questions. Loss on answer tokens (weight 1) plus a 15%% "
             "sample of context tokens at weight %.2f." % (s["seed"], 0.02))
    L.append("- Curriculum by share of the time budget: 128-token documents with few facts first, then 256, 512, 1024 "
             "and %d tokens, with more facts and hops; a quarter of later steps revisit shorter lengths." % c["context_length"])
    L.append("- AdamW (0.9, 0.95), weight decay %g, peak LR %g after %d warm-up steps, cosine to 10%%, gradient clip 1.0, "
             "bf16 autocast." % (a["wd"], a["lr"], a["warmup"]))
    L.append("- Steps %d, tokens seen %.2fM (answer tokens %.2fM), training wall time %.1f min, final answer loss (EMA) %.3f.\n"
             % (s["steps"], s["tokens_seen"] / 1e6, s["answer_tokens_seen"] / 1e6, s["wall_minutes"],
                s["final_answer_loss_ema"] or float("nan")))
    L.append("## Full-cache accuracy (PyTorch, float32, greedy decoding)\n")
    if ev:
        res = ev["results"]
        lengths = sorted({int(k.split("@")[1]) for k in res})
        fams = [f for f in FAMILY_NOTES if any(k.startswith(f + "@") for k in res)]
        L.append("string_match_all (%% of reference strings found in the output), %d documents per family and length, "
                 "seed %d (`tools/train/eval_torch.py`).\n" % (ev["n"], ev["seed"]))
        L.append("| family | " + " | ".join("%d tokens" % x for x in lengths) + " | task |")
        L.append("|---|" + "---|" * len(lengths) + "---|")
        for f in fams:
            cells = ["%.1f" % res["%s@%d" % (f, x)]["string_match_all"] if "%s@%d" % (f, x) in res else "-" for x in lengths]
            L.append("| %s | %s | %s |" % (f, " | ".join(cells), FAMILY_NOTES[f]))
        L.append("")
    else:
        L.append("(not measured yet: run `/usr/bin/python3 tools/train/eval_torch.py --name %s --json "
                 "tools/train/runs/%s/eval.json` and rerun this script)\n" % (s["name"], s["name"]))
    L.append("The evaluation uses this project's own templates; RULER's wording is never seen in training, so a RULER-"
             "templated evaluation measures how far the retrieval generalises.\n")
    if args.engine_eval:
        L += engine_table(args.engine_eval)
    L.append("## Limitations\n")
    L.append("- It keys on the words right before the answer. An answer prefix that repeats the key and then adds "
             "other words before the value (RULER's \"The special magic number for KEY mentioned in the text above "
             "is\") sends it astray: on `examples/demo-context.txt` the prefix \"The special magic number for "
             "silver-lantern is\" gives the right number and \"... for silver-lantern mentioned in the report is\" "
             "does not. This is why the RULER-worded tasks above score far below the held-out families.")
    L.append("- It never learned to stop: end-of-text carries no loss, so it keeps writing after an answer; "
             "evaluations bound the answer length (`--max-new-tokens`, or per-turn `max_new_tokens`).")
    L.append("- Word-frequency lists (freq, cwe, fwe) were not learned.")
    L.append("- Multi-turn in the engine (held-out multiturn, 52.5) is below the PyTorch figure above (91.0): the "
             "engine keeps the model's own answers, continuation included, in the cache between turns, and "
             "its turn format puts the answer prefix on a new line; PyTorch's evaluation keeps the gold answers "
             "in the training format.")
    L.append("- The committed run was interrupted after its 25-minute checkpoint and resumed from it, which "
             "replays the same batches.\n")
    L.append("## Files\n")
    L.append("- `models/%s.train.log`: the training log (loss, throughput, evaluations every 6 minutes)." % s["name"])
    L.append("- `models/%s.training.json`: the run summary with its evaluations and the PyTorch full-cache "
             "evaluation above." % s["name"])
    L.append("- `models/%s.torch-logits.npz`: PyTorch's logits on a 1K-token document, compared with the "
             "engine by `ctest -R ref_torch_logits` (numpy only); `tools/train/check_engine.py` repeats the "
             "check over every position with PyTorch." % s["name"])
    L.append("- Checkpoint (not committed): `%s`." % s["checkpoint"])
    with open(args.out, "w") as f:
        f.write("\n".join(L) + "\n")
    print("wrote", args.out)
    # The run's record beside the model: summary, PyTorch evaluation and the training log.
    models = os.path.dirname(args.out)
    record = dict(s, full_cache_eval_torch=ev)
    if args.note:
        record["note"] = args.note
    with open(os.path.join(models, "%s.training.json" % s["name"]), "w") as f:
        json.dump(record, f, indent=1)
    shutil.copyfile(os.path.join(run, "train.log"), os.path.join(models, "%s.train.log" % s["name"]))


if __name__ == "__main__":
    main()
