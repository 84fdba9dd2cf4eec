#!/usr/bin/env python3
"""HTTP limits of `primekv serve` (docs/server.md, Limits), on loopback:
(a) 64 stalled connections (a header line every 2 s) do not starve 16 normal clients;
(b) a 10 MB chunked body gets 413, (c) so does a ~400 KiB gzip body expanding to 400 MB,
(d) 80 MB of headers get 431 (or 413), each with the server's peak RSS under 300 MiB, and the
server still serves; (e) a request that never completes is dropped at --request-deadline-s.

Usage: http_limits_test.py --primekv BIN --model GGUF [--sanitized]
(--sanitized: an ASan/UBSan build, whose RSS and speed are printed but not checked)
"""
import argparse
import http.client
import json
import os
import socket
import sys
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_test  # noqa: E402  (Server, check: the helpers of the other server tests)
from server_test import Server, check  # noqa: E402

RSS_LIMIT_MIB = 300


def check_figure(cond, what):
    """A latency bound: not checked under sanitizers (instrumented code is slower)."""
    if server_test.ARGS.sanitized:
        print("     (sanitized build, not checked) " + what)
    else:
        check(cond, what)


def check_rss(s, base, what):
    """Peak RSS under RSS_LIMIT_MIB; under sanitizers, whose shadow memory and quarantine make
    the base larger, its growth since `base` under 64 MiB instead."""
    rss = peak_rss_mib(s)
    if server_test.ARGS.sanitized:
        check(rss - base < 64, "peak RSS grew %.1f MiB (< 64 MiB) after %s" % (rss - base, what))
    else:
        check(rss < RSS_LIMIT_MIB,
              "peak RSS %.1f MiB < %d MiB after %s" % (rss, RSS_LIMIT_MIB, what))
    return rss


HEAD = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"


def peak_rss_mib(server):
    for line in open("/proc/%d/status" % server.proc.pid):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return -1


def exchange(port, pieces, timeout=30):
    """Sends the byte strings of `pieces` (an iterable) on one connection from a thread while
    reading the answer; returns its status (None if the connection ended without one)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)

    def send():
        try:
            for p in pieces:
                sock.sendall(p)
        except OSError:
            pass  # the server answered and closed: what matters is the answer

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    data = b""
    try:
        while b"\r\n" not in data:
            got = sock.recv(4096)
            if not got:
                break
            data += got
    except OSError:
        pass
    sock.close()
    sender.join(timeout=timeout)
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def stalled_clients(port, n, stop, alive):
    """n connections that send a request head one line every 2 s until `stop` is set."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(HEAD.encode())
        socks.append(s)
    i = 0
    while not stop.wait(2.0):
        i += 1
        for s in list(socks):
            try:
                s.sendall(b"X-Slow-%d: 1\r\n" % i)
            except OSError:
                socks.remove(s)
    alive.append(len(socks))
    for s in socks:
        s.close()


def normal_load(port, clients, total):
    """`clients` threads complete `total` short completions; returns the latencies (s)."""
    latencies, errors, lock = [], [], threading.Lock()
    left = [total]

    def worker(k):
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            t0 = time.monotonic()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request("POST", "/v1/completions",
                             body=json.dumps({"prompt": "Client %d says" % k, "max_tokens": 4,
                                              "temperature": 0}),
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                conn.close()
                ok = resp.status == 200
            except OSError as e:
                ok, resp = False, e
            with lock:
                if ok:
                    latencies.append(time.monotonic() - t0)
                else:
                    errors.append(str(getattr(resp, "status", resp)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(latencies), errors


def case_starvation(s):
    stop, alive = threading.Event(), []
    staller = threading.Thread(target=stalled_clients, args=(s.port, 64, stop, alive))
    staller.start()
    time.sleep(1.0)  # all 64 connected and stalled
    lat, errors = normal_load(s.port, 16, 100)
    stop.set()
    staller.join()
    p99 = lat[max(0, -(-99 * len(lat) // 100) - 1)] if lat else float("inf")
    print("     100 requests beside 64 stalled connections: p50 %.3f s, p99 %.3f s, max %.3f s, "
          "%d errors; %d stalled connections still open" %
          (lat[len(lat) // 2] if lat else -1, p99, lat[-1] if lat else -1, len(errors),
           alive[0] if alive else -1))
    check(len(lat) == 100 and not errors, "16 clients complete 100 requests beside 64 stalled")
    check_figure(p99 < 2.0, "p99 latency %.3f s < 2 s" % p99)
    check(alive and alive[0] == 64, "the stalled connections were still open (not dropped early)")


def chunked_body(total, piece=64 << 10):
    yield (HEAD + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    block = b"x" * piece
    sent = 0
    while sent < total:
        yield b"%x\r\n" % piece + block + b"\r\n"
        sent += piece
    yield b"0\r\n\r\n"


def gzip_bomb(expanded, piece=1 << 20):
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * piece
    out = [z.compress(zeros) for _ in range(expanded // piece)]
    out.append(z.flush())
    return b"".join(out)


def case_bodies(s, base):
    st = exchange(s.port, chunked_body(10 << 20))
    print("     chunked 10 MB body: status %s" % st)
    check(st == 413, "a 10 MB chunked body gets 413")
    check_rss(s, base, "the chunked body")

    bomb = gzip_bomb(400 << 20)
    head = (HEAD + "Content-Type: application/json\r\nContent-Encoding: gzip\r\n"
            "Content-Length: %d\r\n\r\n" % len(bomb)).encode()
    st = exchange(s.port, [head, bomb])
    print("     gzip body %d KiB expanding to 400 MB: status %s" % (len(bomb) >> 10, st))
    check(st == 413, "a gzip body expanding past the limit gets 413")
    check_rss(s, base, "the gzip body")

    # A small gzip body is still accepted (decompressed before parsing).
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = gz.compress(json.dumps({"prompt": "Hi", "max_tokens": 2}).encode()) + gz.flush()
    st, j, _ = s.request("POST", "/v1/completions", raw=body,
                         headers={"Content-Encoding": "gzip"})
    check(st == 200 and j["usage"]["completion_tokens"] <= 2, "a small gzip body is served")
    st, j, _ = s.request("POST", "/v1/completions", raw=b"x", headers={"Content-Encoding": "br"})
    check(st == 415 and "error" in j, "Content-Encoding br gets 415 JSON")


def case_headers(s, base):
    line = b"X-Pad-%07d: " + b"a" * 1000 + b"\r\n"
    total = 80 << 20

    def pieces():
        yield HEAD.encode()
        for i in range(total // len(line % 0)):
            yield line % i
        yield b"\r\n"

    st = exchange(s.port, pieces())
    print("     80 MB of headers: status %s" % st)
    check(st in (431, 413), "80 MB of headers get 431 or 413")
    check_rss(s, base, "the headers")
    # 36 KiB of headers: within MHD's pool, past --max-header-kib: our JSON 431.
    st, j, _ = s.request("GET", "/health", headers={"X-Pad-%d" % i: "a" * 1000 for i in range(36)})
    check(st == 431 and "error" in j, "36 KiB of headers get 431 JSON")
    st, _, _ = s.request("GET", "/health")
    check(st == 200, "the server still answers /health")


def case_deadline(work):
    s = Server(work, "--request-deadline-s", "2")
    try:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        sock.sendall(HEAD.encode())
        t0, closed = time.monotonic(), None
        try:
            for i in range(20):  # 10 s of a header line every 0.5 s
                time.sleep(0.5)
                sock.sendall(b"X-Slow-%d: 1\r\n" % i)
        except OSError:
            closed = time.monotonic() - t0
        if closed is None:
            sock.settimeout(1)
            try:
                closed = time.monotonic() - t0 if sock.recv(1) == b"" else None
            except OSError:
                closed = time.monotonic() - t0
        sock.close()
        print("     a request that never completes: dropped after %s s" %
              ("%.1f" % closed if closed else "never"))
        check(closed is not None and 1.5 < closed < 8, "the deadline (2 s) drops it")
        st, _, _ = s.request("GET", "/health")
        check(st == 200, "the server still answers /health after the deadline")
    finally:
        s.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--sanitized", action="store_true")
    server_test.ARGS = ap.parse_args()
    return server_test.run_checks("primekv-http-limits-", checks)


def checks(work):
    # (A long head deadline: the stalled connections must stay open through the load; the
    # head deadline itself is a row of server_security.)
    s = Server(work, "--slots", "4", "--header-deadline-s", "60")
    try:
        case_starvation(s)
        base = peak_rss_mib(s)
        print("     peak RSS before the floods: %.1f MiB" % base)
        case_bodies(s, base)
        case_headers(s, base)
    finally:
        s.stop()
    case_deadline(work)
    logs = "".join(open(os.path.join(work, f)).read() for f in os.listdir(work)
                   if f.endswith(".log"))
    check(not any(w in logs for w in ("Sanitizer", "runtime error", "terminate called")),
          "no sanitizer or terminate report in the server logs")


if __name__ == "__main__":
    sys.exit(main())
