#!/usr/bin/env python3
"""GET /v1/sessions/{id}/cache on a long session: its size and its latency (docs/server.md,
The web page). The document is held-out contexts of the reference tasks
(research/results/heldout-test/*.jsonl) joined until --tokens, put into a session with
`max_tokens` 0 (prefill and compression), then one question; the endpoint is then read --reads
times and the body size, its size sent gzipped and the median and largest latency are printed.

Usage: bench_cache_view.py --primekv BIN --model GGUF [--tokens 32000] [--press primekv]
       [--ratio 0.9] [--reads 20] [--max-kib 256] [--max-ms 50] [--save FILE]
Exits 1 when the body is over --max-kib or the median latency over --max-ms.
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import server_test as st
from server_test import Server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def varints(s):
    """The endpoint's lists of small numbers (base64url digits, 5 bits each, lowest first)."""
    out, n, shift = [], 0, 0
    for ch in s:
        d = DIGITS.index(ch)
        if d >= 32:
            n += (d - 32) << shift
            shift += 5
        else:
            out.append(n + (d << shift))
            n, shift = 0, 0
    return out


def gzip_size(s, session):
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    conn.request("GET", "/v1/sessions/%s/cache" % session, headers={"Accept-Encoding": "gzip"})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    if resp.getheader("Content-Encoding") != "gzip":
        return None
    return len(body)


def count_tokens(text):
    out = subprocess.run([st.ARGS.primekv, "tokenize", "-m", st.ARGS.model, "-p", text,
                          "--json", "--no-bos"], check=True, capture_output=True, text=True)
    return len(json.loads(out.stdout)["ids"])


def document(tokens):
    """Whole held-out contexts, then part of one, to about `tokens` tokens."""
    folder = os.path.join(ROOT, "research", "results", "heldout-test")
    parts, total = [], 0
    for name in sorted(os.listdir(folder)):
        for line in open(os.path.join(folder, name)):
            context = json.loads(line)["context"]
            n = count_tokens(context)
            if total + n > tokens:
                cut = int(len(context) * (tokens - total) / n)
                parts.append(context[:cut])
                return "\n\n".join(parts)
            parts.append(context)
            total += n
    return "\n\n".join(parts)


def add_document_args(ap, tokens, ratio):
    """The arguments of a bench over one long document: binary, model, its size and press."""
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=tokens)
    ap.add_argument("--press", default="primekv")
    ap.add_argument("--ratio", type=float, default=ratio)
    ap.add_argument("--threads", type=int, default=2)


def serve_document(name, doc, *extra, deadline_s=600):
    """A server under st.ARGS's press and ratio, and the document put into a session with
    `max_tokens` 0 (prefill and compression): (server, its answer, seconds), or the server and
    None when the prefill failed (printed)."""
    a = st.ARGS
    s = Server(tempfile.mkdtemp(prefix="primekv-bench-%s-" % name), *extra, "--press", a.press,
               "--ratio", str(a.ratio), "--max-body-kib", "4096", "--request-deadline-s",
               str(deadline_s), threads=a.threads)
    t0 = time.time()
    code, j, text = s.post("/v1/completions", {"prompt": doc, "max_tokens": 0}, timeout=3600)
    if code != 200:
        print("prefill failed: %d %s" % (code, text[:300]))
        return s, None, 0.0
    return s, j, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    add_document_args(ap, tokens=32000, ratio=0.9)
    ap.add_argument("--reads", type=int, default=20)
    ap.add_argument("--max-kib", type=float, default=256)
    ap.add_argument("--max-ms", type=float, default=50)
    ap.add_argument("--save", default="", help="write the endpoint's body here")
    st.ARGS = ap.parse_args()
    doc = document(st.ARGS.tokens)
    s, j, seconds = serve_document("cache-view", doc, "--kv-budget-mib", "2048")
    try:
        if j is None:
            return 1
        print("prefill and compression of %d tokens: %.1f s" % (j["usage"]["prompt_tokens"],
                                                                 seconds))
        code, j, text = s.post("/v1/completions", {
            "prompt": doc + "\nWhat is the special magic number?\n", "max_tokens": 8,
            "session": j["session"], "temperature": 0}, timeout=600)
        session = j["session"]
        times, body = [], b""
        for _ in range(st.ARGS.reads):
            t = time.perf_counter()
            code, cache, text = s.request("GET", "/v1/sessions/%s/cache" % session)
            times.append(1000 * (time.perf_counter() - t))
            body = text.encode()
        runs = sum(len(varints(k)) // 2 for k in cache["kept"])
        kib, gz = len(body) / 1024, (gzip_size(s, session) or 0) / 1024
        if st.ARGS.save:
            open(st.ARGS.save, "wb").write(body)
        median = statistics.median(times)
        print("session: %d tokens, %d layers x %d KV heads, kept per layer %s" % (
            cache["n_tokens"], cache["n_layers"], cache["n_heads"], cache["kept_per_layer"]))
        print("cache view: %.1f KiB of JSON (%.1f KiB sent gzipped), %d kept runs over all "
              "heads, text %.1f KiB" % (kib, gz, runs, len(cache["text"].encode()) / 1024))
        print("latency over %d reads (client on loopback): median %.1f ms, max %.1f ms" % (
            len(times), median, max(times)))
        ok = kib < st.ARGS.max_kib and median < st.ARGS.max_ms
        print("%s: under %g KiB and %g ms" % ("ok" if ok else "FAIL", st.ARGS.max_kib,
                                               st.ARGS.max_ms))
        return 0 if ok else 1
    finally:
        s.stop()


if __name__ == "__main__":
    sys.exit(main())
