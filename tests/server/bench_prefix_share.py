#!/usr/bin/env python3
"""Resident KV memory of many conversations over one document (docs/server.md, Shared
prefixes). A document of about --tokens tokens (held-out contexts of the reference tasks, as
bench_cache_view.py makes it) is put into a session with `max_tokens` 0 (prefill and
compression), then --conversations new conversations each ask one short question about it
without naming a session, so each begins by a prefix match on the document's session.

Printed, and written as JSON with --json: the KV bytes the server holds (/metrics
kv_bytes_held: pool chunks, free pages included, shared pages once) after the document and after
every conversation; each conversation's own live entries (its cache view's kept bytes less the
document's); and the ratio of the bytes held to (the document's session + the conversations' own
entries), which the issue bounds by 1.3.

Usage: bench_prefix_share.py --primekv BIN --model GGUF [--tokens 16000] [--press primekv]
       [--ratio 0.75] [--mode context] [--conversations 100] [--max-tokens 4] [--max-ratio 1.3]
       [--json FILE]
Exits 1 when a conversation reused no prefix, or the ratio is over --max-ratio.
"""
import argparse
import json
import sys
import time

import server_test as st
from bench_cache_view import add_document_args, document, serve_document


def main():
    ap = argparse.ArgumentParser()
    add_document_args(ap, tokens=16000, ratio=0.75)
    ap.add_argument("--conversations", type=int, default=100)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--mode", default="context",
                    help="the server's --mode: context compresses the document once; multiturn "
                         "compresses every turn back to the budget, and a conversation copies "
                         "each shared page its compression rewrites")
    ap.add_argument("--max-ratio", type=float, default=1.3)
    ap.add_argument("--budget-mib", type=int, default=16384)
    ap.add_argument("--json", default="")
    st.ARGS = ap.parse_args()
    a = st.ARGS
    doc = document(a.tokens)
    s, j, seconds = serve_document("prefix-share", doc, "--kv-budget-mib", str(a.budget_mib),
                                   "--mode", a.mode, deadline_s=3600)
    try:
        if j is None:
            return 1
        doc_tokens = j["usage"]["prompt_tokens"]
        _, view, _ = s.request("GET", "/v1/sessions/%s/cache" % j["session"])
        doc_kept = view["bytes"]["kept"]
        doc_held = s.metrics()["primekv_kv_bytes_held"]
        print("document: %d tokens, prefill and %s %.2f in %.1f s; its session holds %.1f MiB "
              "(live entries %.1f MiB)" % (doc_tokens, a.press, a.ratio, seconds,
                                          doc_held / 2**20, doc_kept / 2**20))
        held, own, cached, seconds = [], [], [], []
        for i in range(a.conversations):
            t = time.time()
            q = "\nQuestion %d: what is the special magic number for item %d?\n" % (i, 7 * i + 3)
            code, j, text = s.post("/v1/completions", {
                "prompt": doc + q, "max_tokens": a.max_tokens, "temperature": 0}, timeout=600)
            if code != 200:
                print("conversation %d failed: %d %s" % (i, code, text[:300]))
                return 1
            seconds.append(time.time() - t)
            cached.append(j["usage"]["prompt_tokens_details"]["cached_tokens"])
            _, view, _ = s.request("GET", "/v1/sessions/%s/cache" % j["session"])
            own.append(view["bytes"]["kept"] - doc_kept)
            held.append(s.metrics()["primekv_kv_bytes_held"])
            if (i + 1) % 10 == 0:
                print("  %d conversations: %.1f MiB held, %.2f s a conversation" % (
                    i + 1, held[-1] / 2**20, sum(seconds[-10:]) / 10), flush=True)
        m = s.metrics()
        bound = doc_held + sum(own)
        ratio = held[-1] / bound
        copies = doc_held * (1 + a.conversations)  # each conversation its own copy of the document
        print("after %d conversations: %.1f MiB held in %d pool(s); document session + their own "
              "entries: %.1f MiB; ratio %.3f (bound %.2f); a copy each would hold %.1f MiB" % (
                  a.conversations, held[-1] / 2**20, m.get("primekv_kv_pools", 0), bound / 2**20,
                  ratio, a.max_ratio, copies / 2**20))
        print("own entries a conversation: %.1f KiB mean; cached tokens: min %d of %d" % (
            sum(own) / len(own) / 1024, min(cached), doc_tokens))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"tokens": doc_tokens, "press": a.press, "ratio": a.ratio, "mode": a.mode,
                           "conversations": a.conversations, "max_tokens": a.max_tokens,
                           "doc_session_bytes": doc_held, "doc_kept_bytes": doc_kept,
                           "held_bytes": held, "own_bytes": own, "cached_tokens": cached,
                           "seconds": seconds, "ratio_to_bound": ratio,
                           "copy_each_bytes": copies, "kv_pools": m.get("primekv_kv_pools")},
                          f, indent=1)
        ok = min(cached) > 0 and ratio <= a.max_ratio
        print("%s: every conversation reused the document, ratio <= %.2f" % (
            "ok" if ok else "FAIL", a.max_ratio))
        return 0 if ok else 1
    finally:
        s.stop()


if __name__ == "__main__":
    sys.exit(main())
