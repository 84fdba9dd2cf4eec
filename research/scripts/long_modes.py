#!/usr/bin/env python3
"""The long reference model's other protocols at 16K (issue 49), beside the whole-context tables
of long_tables.py: chunked compression against whole-context compression on the same samples,
multi-turn drift (six questions asked in turn of one compressed cache), and question mode (the
question in the prefill: SnapKV, the query-aware reference, beside the query-free presses).
Writes OUT/modes.md and OUT/modes.json:

    research/scripts/long_modes.py --tables research/results/long-tables/test-16384 \\
        --chunked research/results/long-tables/chunked-1024-16384 \\
                  research/results/long-tables/chunked-2048-16384 \\
        --drift research/results/long-tables/drift-16384 \\
        --question research/results/long-tables/question-16384 \\
        --out research/results/long-tables/16384

Every difference is paired (the same samples on both sides): the mean over families, each
weighted equally, with a 95% bootstrap interval (2,000 replicates redrawing each family's
samples). A folder that is missing or empty is left out of the tables.
"""
import argparse
import collections
import json
import os
import re

from long_tables import load, macro, paired


def chunk_of(folder):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    m = re.search(r"chunked-(\d+)", folder)
    return cfg.get("settings", {}).get("chunk") or (int(m.group(1)) if m else None)


def scores(rows, cfg):
    return {k: s for k, (s, _) in rows[cfg].items()}


def has_rows(folder):
    return folder and any(os.path.exists(os.path.join(folder, "results.jsonl" + x))
                          for x in ("", ".xz"))


def per_turn(folder, cfg):
    """Mean score of each turn over the samples, for one (press, ratio)."""
    from eval_rows import open_text
    by = collections.defaultdict(list)
    with open_text(os.path.join(folder, "results.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("status") == "ok" and (r["press"], r["ratio"]) == cfg:
                by[r["turn"]].append(r["score"])
    return [100 * sum(v) / len(v) for _, v in sorted(by.items())]


def repeats(folder, cfg):
    """(wrong answers, wrong answers whose first number is an earlier turn's answer) of one
    (press, ratio): how often the model copies its own earlier answer."""
    from eval_rows import open_text
    turns = collections.defaultdict(dict)
    with open_text(os.path.join(folder, "results.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("status") == "ok" and (r["press"], r["ratio"]) == cfg:
                m = re.search(r"\d+", r["prediction"])
                turns[r["id"]][r["turn"]] = (r["score"], m.group(0) if m else "")
    wrong = copied = 0
    for conv in turns.values():
        for t, (score, number) in conv.items():
            if score >= 1:
                continue
            wrong += 1
            copied += bool(number) and number in [conv[u][1] for u in range(t) if u in conv]
    return wrong, copied


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", required=True, help="the whole-context eval folder")
    ap.add_argument("--chunked", nargs="*", default=[])
    ap.add_argument("--drift", default="")
    ap.add_argument("--question", default="")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    whole = load(args.tables)
    md, out = [], {}
    fmt = lambda d: "%+.1f [%+.1f, %+.1f]" % d

    chunked = [f for f in args.chunked if has_rows(f)]
    if chunked:
        md.append("### Chunked against whole-context compression (0.75)\n")
        md.append("Chunked: the context is prefilled in chunks and the cache compressed to "
                  "`KeepCount(tokens so far)` after each; whole: one compression after the "
                  "whole context. The same samples on both sides.\n")
        md.append("| chunk | press | n | whole | chunked | chunked - whole |")
        md.append("|---|---|---|---|---|---|")
        out["chunked"] = []
        for folder in chunked:
            rows = load(folder)
            size = chunk_of(folder)
            for (p, r) in sorted(rows):
                if (p, r) not in whole:
                    continue
                keys = sorted(set(rows[(p, r)]) & set(whole[(p, r)]))
                a, b = scores(whole, (p, r)), scores(rows, (p, r))
                d = paired(a, b, keys)
                md.append("| %s | %s %.2f | %d | %.1f | %.1f | %s |" % (
                    size, p, r, len(keys), macro(a, keys), macro(b, keys), fmt(d)))
                out["chunked"].append({"chunk": size, "press": p, "ratio": r, "n": len(keys),
                                       "whole": macro(a, keys), "chunked": macro(b, keys),
                                       "difference": d})
            pk, kd = ("primekv", 0.75), ("keydiff", 0.75)
            if pk in rows and kd in rows:
                keys = sorted(set(rows[pk]) & set(rows[kd]))
                d = paired(scores(rows, kd), scores(rows, pk), keys)
                md.append("| %s | primekv - keydiff | %d | | | %s |" % (size, len(keys), fmt(d)))
        md.append("")

    if has_rows(args.drift):
        rows = load(args.drift)
        keys = sorted(set.intersection(*[set(d) for d in rows.values()]))
        md.append("### Multi-turn drift at 16K\n")
        md.append("Twelve facts in a 16K-token document, six of them asked in turn; the cache is "
                  "compressed after the document and back to that budget after every answer. "
                  "Samples: %d; score per turn and its mean.\n" % len(keys))
        md.append("| press | ratio | mean | turns 1..6 | wrong answers | of them an earlier answer |")
        md.append("|---|---|---|---|---|---|")
        out["drift"] = {"samples": len(keys), "rows": []}
        for (p, r) in sorted(rows, key=lambda c: (c[0] != "none", c[0], c[1])):
            turns = per_turn(args.drift, (p, r))
            wrong, copied = repeats(args.drift, (p, r))
            md.append("| %s | %.2f | %.1f | %s | %d | %d |" % (
                p, r, macro(scores(rows, (p, r)), keys), " / ".join("%.0f" % t for t in turns),
                wrong, copied))
            out["drift"]["rows"].append({"press": p, "ratio": r,
                                         "score": macro(scores(rows, (p, r)), keys),
                                         "turns": turns, "wrong": wrong,
                                         "wrong_repeating_an_earlier_answer": copied})
        for r in sorted({r for (p, r) in rows if p == "primekv"}):
            if ("keydiff", r) in rows:
                d = paired(scores(rows, ("keydiff", r)), scores(rows, ("primekv", r)), keys)
                md.append("\nprimekv - keydiff at %.2f: %s (n = %d)" % (r, fmt(d), len(keys)))
                out["drift"]["primekv_minus_keydiff_%.2f" % r] = d
        md.append("")

    if has_rows(args.question):
        rows = load(args.question)
        keys = sorted(set.intersection(*[set(d) for d in rows.values()]))
        fams = collections.Counter(k[0] for k in keys)
        ratios = sorted({r for (p, r) in rows if p != "none"})
        md.append("### Question mode at 16K (the query-aware reference)\n")
        md.append("The question is prefilled with the document, so SnapKV's observation window "
                  "is the question itself; the query-free presses score the same cache. "
                  "Samples: %d (%s).\n" % (len(keys), ", ".join(
                      "%s %d" % kv for kv in sorted(fams.items()))))
        md.append("| press | " + " | ".join("%.2f" % r for r in ratios) + " |")
        md.append("|---|" + "---|" * len(ratios))
        full = macro(scores(rows, ("none", 0.0)), keys)
        md.append("| none (full cache) | " + " | ".join("%.1f" % full for _ in ratios) + " |")
        out["question"] = {"samples": len(keys), "full": full, "rows": [], "paired": []}
        for p in ["snapkv", "primekv", "keydiff"]:
            cells = []
            for r in ratios:
                if (p, r) in rows:
                    v = macro(scores(rows, (p, r)), keys)
                    cells.append("%.1f" % v)
                    out["question"]["rows"].append({"press": p, "ratio": r, "score": v})
                else:
                    cells.append("")
            md.append("| %s | %s |" % (p, " | ".join(cells)))
        md.append("\n| ratio | primekv - snapkv | primekv - keydiff | primekv: question - "
                  "context mode |")
        md.append("|---|---|---|---|")
        for r in ratios:
            pk = scores(rows, ("primekv", r))
            d1 = paired(scores(rows, ("snapkv", r)), pk, keys)
            d2 = paired(scores(rows, ("keydiff", r)), pk, keys)
            ctx = ""
            if ("primekv", r) in whole:
                ks = sorted(set(keys) & set(whole[("primekv", r)]))
                d3 = paired(scores(whole, ("primekv", r)), pk, ks)
                ctx = fmt(d3) + " (n = %d)" % len(ks)
            md.append("| %.2f | %s | %s | %s |" % (r, fmt(d1), fmt(d2), ctx))
            out["question"]["paired"].append({"ratio": r, "primekv_minus_snapkv": d1,
                                              "primekv_minus_keydiff": d2})
        md.append("")

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "modes.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, "modes.json"), "w") as f:
        json.dump(out, f, indent=1)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
