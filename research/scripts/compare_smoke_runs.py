#!/usr/bin/env python3
"""Compares two whole `scripts/eval_reference.sh SMOKE=3` runs, old binary against new (the
check of a behaviour-preserving refactor): every eval folder's rows (status, prediction,
score, KV bytes) and fidelity's tables, with each run's own prefix in task paths ignored.
Exit status 1 when anything differs.

    SMOKE=3 PRIMEKV_BIN=OLD scripts/eval_reference.sh /tmp/smoke-old/ref
    SMOKE=3 PRIMEKV_BIN=NEW scripts/eval_reference.sh /tmp/smoke-new/ref
    research/scripts/compare_smoke_runs.py /tmp/smoke-old /tmp/smoke-new
"""
import json, lzma, os, sys
old, new = sys.argv[1].rstrip("/"), sys.argv[2].rstrip("/")
def rows(folder, prefix):
    p = os.path.join(folder, "results.jsonl")
    out = {}
    if not os.path.exists(p): return None
    for line in open(p):
        if not line.strip(): continue
        r = json.loads(line)
        task = r["task"].replace(prefix, "PFX/")
        out[(task, r["id"], r["press"], r["ratio"], r.get("mode"), r["turn"])] = (r["status"], r.get("prediction"), r.get("score"), r.get("kv_bytes_compressed"), r.get("kv_bytes_full"))
    return out
bad = 0
for d in sorted(os.listdir(old)):
    a = os.path.join(old, d); b = os.path.join(new, d)
    if not os.path.isdir(a): continue
    ra = rows(a, old + "/"); rb = rows(b, new + "/")
    if ra is None:
        # fidelity and other tables: compare csv/json files byte for byte except timings
        for f in sorted(os.listdir(a)):
            fa, fb = os.path.join(a, f), os.path.join(b, f)
            if not os.path.isfile(fa): continue
            if not os.path.exists(fb): print(d, f, "missing in new"); bad += 1; continue
            if f.endswith((".csv", ".md", ".json", ".jsonl")):
                ta = open(fa).read().replace(old + "/", "PFX/"); tb = open(fb).read().replace(new + "/", "PFX/")
                same = ta == tb
                print(d, f, "identical" if same else "DIFFERS")
                bad += 0 if same else 1
        continue
    if rb is None: print(d, "missing"); bad += 1; continue
    diff = [k for k in ra if k not in rb or ra[k] != rb[k]]
    extra = [k for k in rb if k not in ra]
    print("%-40s %4d rows  %d differ  %d extra" % (d, len(ra), len(diff), len(extra)))
    bad += len(diff) + len(extra)
    for k in diff[:3]: print("   ", k, ra[k], rb.get(k))
print("TOTAL differing:", bad)
sys.exit(1 if bad else 0)
