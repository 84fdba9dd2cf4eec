#!/usr/bin/env python3
"""Load test of `primekv serve` on loopback: C clients x R requests, mixing new and continued
conversations; reports failures, p50/p99 latency, throughput and the server's peak RSS.

Usage: load_test.py --primekv BIN --model GGUF [--clients 16] [--requests 25] [--slots 4]
Bounded: every request has a timeout and the whole run a deadline; the server is stopped.
"""
import argparse
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_test  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=25)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--kv-budget-mib", type=int, default=64)
    ap.add_argument("--deadline", type=float, default=900)
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    server_test.ARGS = a
    work = tempfile.mkdtemp(prefix="primekv-load-")
    s = server_test.Server(work, "--slots", str(a.slots), "--kv-budget-mib", str(a.kv_budget_mib),
                           session_dir=os.path.join(work, "sessions"))
    ctx = server_test.demo_prompt()
    keys = ["silver-lantern", "red-harbor", "blue-falcon", "green-door"]
    lat, fails, tokens, cached = [], [], [0], [0]
    lock = threading.Lock()
    t_end = time.time() + a.deadline

    def client(c):
        prompt = None
        for r in range(a.requests):
            if time.time() > t_end:
                with lock:
                    fails.append("deadline")
                return
            if r % 5 == 0:  # a new conversation every 5 requests, else continue it
                prompt = "Client %d conversation %d.\n%s\nWhat is the special magic number " \
                         "for %s?\n" % (c, r // 5, ctx, keys[c % 4])
            t0 = time.time()
            try:
                st, j, text = s.post("/v1/completions", {
                    "prompt": prompt, "temperature": 0, "max_tokens": a.max_tokens}, timeout=300)
            except Exception as e:  # noqa: BLE001 - any transport failure counts
                st, j, text = -1, None, str(e)
            dt = time.time() - t0
            with lock:
                lat.append(dt)
                if st != 200:
                    fails.append("%d %s" % (st, text[:200]))
                else:
                    tokens[0] += j["usage"]["completion_tokens"]
                    cached[0] += j["usage"]["prompt_tokens_details"]["cached_tokens"]
            if st == 200:
                prompt = prompt + j["choices"][0]["text"] + "\nWhat is the special magic " \
                    "number for %s?\n" % keys[(c + r + 1) % 4]

    t0 = time.time()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    hwm = 0
    try:
        for line in open("/proc/%d/status" % s.proc.pid):
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
    except OSError:
        pass
    m = s.metrics()
    s.stop()
    lat.sort()

    def pct(p):
        return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")

    out = {"clients": a.clients, "requests_each": a.requests, "slots": a.slots,
           "requests": len(lat), "failed": len(fails), "wall_s": round(wall, 2),
           "p50_ms": round(pct(0.50) * 1e3, 1), "p99_ms": round(pct(0.99) * 1e3, 1),
           "requests_per_s": round(len(lat) / wall, 2),
           "completion_tokens_per_s": round(tokens[0] / wall, 1),
           "cached_prompt_tokens": cached[0],
           "prefill_tokens": int(m["primekv_prefill_tokens_total"]),
           "evictions": int(m["primekv_evictions_total"]),
           "restores": int(m["primekv_restores_total"]),
           "peak_rss_mib": round(hwm / 2**20, 1), "kv_budget_mib": a.kv_budget_mib}
    print(json.dumps(out, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    for f in fails[:5]:
        print("failure:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
