#!/usr/bin/env python3
"""A restored Gemma 2 session answers as the session kept in memory and as a fresh server.

Usage: window_restore_test.py --primekv BIN PATH [--sanitized]
PATH: restart | evict | prefix | redis

The model: a random Gemma 2 (4 layers, window 32 on the even layers) whose windowed layers'
post-norms are scaled x10, so an answer that reads entries a window no longer holds differs
from the right one. A 200-token first turn, then a departure from it:
  regenerate   the same prompt again (a cut at 199 tokens, below what the windows hold)
  cut150       the first 150 prompt tokens and 20 others
  continue     turn 1 prefills the prompt alone (max_tokens 0), then it and 10 more tokens
               (everything cached is reused)
Each departure runs on a server that keeps the session in memory, and after the PATH's restore:
  restart  the server stops and a new one reads the session file (--session-dir)
  evict    a small KV budget evicts the session to its file; the next turn reads it back
  prefix   after a restart, a request naming no session finds the file by its prefix
  redis    turn 1 on replica A, the departure on replica B of one Redis store
The restored turn must report the same cached_tokens and give the same greedy tokens as the one
in memory; a turn that starts over (cached_tokens 0) must also equal a fresh server's answer.
"""
import argparse
import os
import random
import struct
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "cluster"))
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "reference"))
import server_test as st  # noqa: E402
from server_test import Server, check  # noqa: E402

SKIP = 77
WINDOW = 32
MAX_TOKENS = 8
SERVE = ("--press", "none", "--ratio", "0")


def make_model(work):
    """The random Gemma 2 file with its windowed layers' post-norms scaled x10 in place."""
    from gguf_read import GGUFFile  # numpy: imported here so --help needs none
    path = os.path.join(work, "gemma2-window.gguf")
    subprocess.run([st.ARGS.primekv, "make-model", "--arch", "gemma2", "--layers", "4", "--d-model", "256",
                    "--heads", "4", "--kv-heads", "2", "--head-dim", "64", "--ffn", "512", "--vocab", "512",
                    "--sliding-window", str(WINDOW), "--type", "F32", "--seed", "5", "-o", path],
                   check=True, capture_output=True, timeout=120)
    f = GGUFFile(path)
    patches = []
    for layer in (0, 2):  # Gemma 2's windowed layers are the even ones
        for name in ("post_attention_norm", "post_ffw_norm"):
            info = f.infos["blk.%d.%s.weight" % (layer, name)]
            assert info.ggml_type == 0, "F32 norms expected"
            patches.append((f.data_start + info.offset, info.n_elements))
    del f
    with open(path, "r+b") as out:
        for off, n in patches:
            out.seek(off)
            vals = struct.unpack("<%df" % n, out.read(4 * n))
            out.seek(off)
            out.write(struct.pack("<%df" % n, *[v * 10 for v in vals]))
    return path


def turn(server, prompt, sid=None, max_tokens=MAX_TOKENS):
    body = {"prompt": prompt, "temperature": 0, "max_tokens": max_tokens}
    if sid:
        body["session"] = sid
    code, j, text = server.post("/v1/completions", body)
    if code != 200:
        raise RuntimeError("turn failed: %d %s" % (code, text[:300]))
    return j


def departures(prompt):
    """{name: (turn 1's max_tokens, the departing prompt)}; `continue` prefills turn 1 only
    (max_tokens 0), so its prompt extends exactly the tokens the session holds."""
    rng = random.Random(7)
    other = [rng.randrange(3, 512) for _ in range(20)]
    return {"regenerate": (MAX_TOKENS, list(prompt)), "cut150": (MAX_TOKENS, prompt[:150] + other),
            "continue": (0, list(prompt) + other[:10])}


def outcome(j):
    return j["usage"]["prompt_tokens_details"]["cached_tokens"], j["choices"][0]["text"]


def compare(path, name, restored, in_memory, fresh):
    rc, rt = outcome(restored)
    mc, mt = outcome(in_memory)
    check(rc == mc, "%s, %s: cached_tokens %d after the restore, %d in memory" % (path, name, rc, mc))
    check(rt == mt, "%s, %s: the same greedy tokens as the session in memory (%r vs %r)" % (
        path, name, rt, mt))
    if mc == 0:
        check(rt == outcome(fresh)[1], "%s, %s: started over, the fresh server's answer" % (path, name))
    if name == "continue":
        check(mc > 0, "%s, continue: the cache is reused (%d)" % (path, mc))


def run(work, path):
    st.ARGS.model = make_model(work)
    rng = random.Random(5)
    prompt = [rng.randrange(3, 512) for _ in range(200)]

    fresh_server = Server(work, *SERVE)
    try:
        first = turn(fresh_server, prompt)
        deps = departures(prompt)
        fresh = {name: turn(fresh_server, p) for name, (_, p) in deps.items()}
    finally:
        fresh_server.stop()

    # In memory: one server, no restore between turn 1 and the departure (the prefix path's
    # departure names no session and finds the one in memory by its prefix).
    in_memory = {}
    for name, (n1, p) in deps.items():
        s = Server(work, *SERVE, *(() if path == "prefix" else ("--no-prefix-reuse",)))
        try:
            j1 = turn(s, prompt, None, n1)
            if n1:
                check(outcome(j1)[1] == outcome(first)[1], "%s: in memory, turn 1 as the fresh server" % name)
            in_memory[name] = turn(s, p, None if path == "prefix" else j1["session"])
        finally:
            s.stop()

    restored = RESTORES[path](work, prompt, deps)
    if restored is None:
        return
    for name in deps:
        compare(path, name, restored[name], in_memory[name], fresh[name])


def restore_restart(work, prompt, deps):
    out = {}
    for name, (n1, p) in deps.items():
        d = os.path.join(work, "restart-" + name)
        s = Server(work, *SERVE, "--no-prefix-reuse", session_dir=d)
        try:
            sid = turn(s, prompt, None, n1)["session"]
        finally:
            s.stop()
        s = Server(work, *SERVE, "--no-prefix-reuse", session_dir=d)
        try:
            out[name] = turn(s, p, sid)
            check(s.metrics().get("primekv_restores_total", 0) == 1, "restart, %s: restored from its file" % name)
        finally:
            s.stop()
    return out


def restore_evict(work, prompt, deps):
    out = {}
    rng = random.Random(11)
    for name, (n1, p) in deps.items():
        d = os.path.join(work, "evict-" + name)
        s = Server(work, *SERVE, "--no-prefix-reuse", "--kv-budget-mib", "3", session_dir=d)
        try:
            sid = turn(s, prompt, None, n1)["session"]
            # Other conversations until the budget has evicted some (the oldest, w, goes first).
            for i in range(12):
                turn(s, [rng.randrange(3, 512) for _ in range(200)])
                if s.metrics().get("primekv_evictions_total", 0) >= 1:
                    break
            check(s.metrics().get("primekv_evictions_total", 0) >= 1, "evict, %s: evicted" % name)
            before = s.metrics().get("primekv_restores_total", 0)
            out[name] = turn(s, p, sid)
            check(s.metrics().get("primekv_restores_total", 0) == before + 1,
                  "evict, %s: w read back from its file" % name)
        finally:
            s.stop()
    return out


def restore_prefix(work, prompt, deps):
    out = {}
    for name, (n1, p) in deps.items():
        d = os.path.join(work, "prefix-" + name)
        s = Server(work, *SERVE, session_dir=d)
        try:
            turn(s, prompt, None, n1)
        finally:
            s.stop()
        s = Server(work, *SERVE, session_dir=d)
        try:
            out[name] = turn(s, p)  # no session named: the prefix finds w's file
        finally:
            s.stop()
    return out


def restore_redis(work, prompt, deps):
    import cluster_test as ct
    from shutil import which
    if not which("redis-server"):
        print("redis-server not found" + (": failing under CI" if os.environ.get("CI") else ": skipped"))
        if os.environ.get("CI"):
            check(False, "redis-server is installed")
            return None
        sys.exit(SKIP)
    redis = ct.Redis(work)
    try:
        out = {}
        for name, (n1, p) in deps.items():
            store = ("--session-store", redis.url(), "--no-prefix-reuse")
            a = Server(work, *SERVE, *store)
            b = Server(work, *SERVE, *store)
            try:
                sid = turn(a, prompt, None, n1)["session"]
                out[name] = turn(b, p, sid)
                check(b.metrics().get("primekv_restores_total", 0) == 1,
                      "redis, %s: replica B read the session from Redis" % name)
            finally:
                a.stop()
                b.stop()
        return out
    finally:
        redis.stop()


RESTORES = {"restart": restore_restart, "evict": restore_evict, "prefix": restore_prefix,
            "redis": restore_redis}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--primekv", required=True)
    ap.add_argument("path", choices=sorted(RESTORES))
    ap.add_argument("--sanitized", action="store_true")
    args = ap.parse_args()
    args.model = None
    st.ARGS = args
    return st.run_checks("pk-window-%s-" % args.path, lambda work: run(work, args.path))


if __name__ == "__main__":
    sys.exit(main())
