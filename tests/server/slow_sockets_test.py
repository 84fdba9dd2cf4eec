#!/usr/bin/env python3
"""Slow sockets from several addresses (docs/server.md, Limits), on loopback.

For each address count of --addresses, a fresh `primekv serve` gets --slow connections that send
a request head one header line a second and never finish it, spread round robin over the source
addresses 127.0.0.2, 127.0.0.3, ...; a connection the server closes is opened again at once, so
the slow ones always number --slow. Beside them --clients normal clients each send --requests
whole requests (GET /health on a fresh connection). Every request must be answered (200) and
the p99 latency must be under --p99 s: the capacity for whole requests must not depend on how
many addresses the slow sockets come from.

Prints, per address count: the answered requests, p50/p99/max latency, the first answer's delay,
and how often the server closed a slow socket. Everything stops by itself (--deadline).

Usage: slow_sockets_test.py --primekv BIN --model GGUF [--slow 530] [--addresses 8,16]
       [--clients 16] [--requests 5] [--per-ip 16:32] [--p99 1.0] [--sanitized]
"""
import argparse
import errno
import os
import selectors
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_test  # noqa: E402  (Server, check: the helpers of the other server tests)
from server_test import Server, check  # noqa: E402

SLOW_HEAD = b"GET /health HTTP/1.1\r\nHost: x\r\n"


class SlowSockets:
    """`n` connections kept open from `addresses` (a header line each second, never the end of
    the head); one the server closes is reopened at once. Runs on its own thread until stop()."""

    def __init__(self, port, n, addresses):
        self.port, self.n, self.addresses = port, n, addresses
        self.sel = selectors.DefaultSelector()
        self.stop_event = threading.Event()
        self.connected = 0  # sockets whose connect completed and that are still open
        self.closed_by_server = 0
        self.opened = 0
        self.next_address = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=30)

    def _open(self):
        addr = self.addresses[self.next_address % len(self.addresses)]
        self.next_address += 1
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((addr, 0))
            rc = s.connect_ex(("127.0.0.1", self.port))
        except OSError:
            s.close()
            return False
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            return False
        self.opened += 1
        self.sel.register(s, selectors.EVENT_WRITE, {"sent": 0, "up": False})
        return True

    def _drop(self, s, state, by_server):
        self.sel.unregister(s)
        s.close()
        if state["up"]:
            self.connected -= 1
            self.closed_by_server += by_server

    def _event(self, key, mask, now):
        s, state = key.fileobj, key.data
        try:
            if not state["up"]:
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    self._drop(s, state, False)
                    return
                s.send(SLOW_HEAD)
                state.update(up=True, next=now + 1.0)
                self.connected += 1
                self.sel.modify(s, selectors.EVENT_READ, state)
            elif mask & selectors.EVENT_READ:
                s.recv(4096)  # an answer (a 4xx) or the end: either way the server let go
                self._drop(s, state, True)
        except OSError:
            self._drop(s, state, True)

    def _trickle(self, now):
        for key in list(self.sel.get_map().values()):
            state = key.data
            if state["up"] and now >= state["next"]:
                state["sent"] += 1
                state["next"] = now + 1.0
                try:
                    key.fileobj.send(b"X-Slow-%d: 1\r\n" % state["sent"])
                except OSError:
                    self._drop(key.fileobj, state, True)

    def _run(self):
        while not self.stop_event.is_set():
            while len(self.sel.get_map()) < self.n and self._open():
                pass
            now = time.monotonic()
            for key, mask in self.sel.select(timeout=0.05):
                self._event(key, mask, now)
            self._trickle(now)
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        self.sel.close()


def one_request(port, timeout):
    """(latency s, None) for a 200 to GET /health, else (latency, what went wrong)."""
    t0 = time.monotonic()
    try:
        data = server_test.raw_exchange(
            port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout)
        status = data.split(b" ", 2)[1] if data.startswith(b"HTTP/") else b"none"
        return time.monotonic() - t0, None if status == b"200" else status.decode()
    except OSError as e:
        return time.monotonic() - t0, type(e).__name__


def normal_clients(port, clients, requests, timeout):
    """`clients` threads, `requests` each, one after another: (latencies, errors, the first
    answer's delay from the start)."""
    lat, errors, firsts, lock = [], [], [], threading.Lock()
    t_start = time.monotonic()

    def worker():
        for _ in range(requests):
            took, err = one_request(port, timeout)
            with lock:
                if err:
                    errors.append(err)
                else:
                    lat.append(took)
                    firsts.append(time.monotonic() - t_start)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(lat), errors, min(firsts) if firsts else float("inf")


def quantile(sorted_values, q):
    if not sorted_values:
        return float("inf")
    return sorted_values[max(0, -(-int(q * 100) * len(sorted_values) // 100) - 1)]


def run_case(work, n_addr, per_ip):
    a = server_test.ARGS
    extra = ["--max-connections-per-ip", str(per_ip)] if per_ip else []
    s = Server(work, *extra)
    slow = SlowSockets(s.port, a.slow, ["127.0.0.%d" % (2 + i) for i in range(n_addr)])
    try:
        slow.start()
        t0 = time.monotonic()
        while slow.connected < a.slow and time.monotonic() - t0 < 20:
            time.sleep(0.1)
        time.sleep(1.0)  # the server has accepted what it will accept
        held = slow.connected
        closed_before = slow.closed_by_server
        t_run = time.monotonic()
        lat, errors, first = normal_clients(s.port, a.clients, a.requests, a.timeout)
        took = time.monotonic() - t_run
        total = a.clients * a.requests
        p99 = quantile(lat, 0.99)
        print("     %d addresses%s: %d slow sockets open; %d of %d requests answered in %.1f s "
              "(first after %.2f s); p50 %.3f s, p99 %.3f s, max %.3f s; errors %s; slow sockets "
              "closed by the server %d (%d during the requests)" %
              (n_addr, " (--max-connections-per-ip %d)" % per_ip if per_ip else "", held,
               len(lat), total, took, first, quantile(lat, 0.5), p99, lat[-1] if lat else -1,
               sorted(set(errors)) or "none", slow.closed_by_server,
               slow.closed_by_server - closed_before), flush=True)
        check(len(lat) == total and not errors,
              "%d addresses: every request answered (%d of %d)" % (n_addr, len(lat), total))
        if a.sanitized:
            print("     (sanitized build, not checked) p99 %.3f s < %.1f s" % (p99, a.p99))
        else:
            check(p99 < a.p99, "%d addresses: p99 %.3f s < %.1f s" % (n_addr, p99, a.p99))
    finally:
        slow.stop()
        s.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--slow", type=int, default=530, help="slow sockets kept open")
    ap.add_argument("--addresses", default="8,16", help="source address counts, one run each")
    ap.add_argument("--per-ip", default="",
                    help="ADDRESSES:N,... --max-connections-per-ip N for that run (default: "
                    "the server's default)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=5, help="requests per client")
    ap.add_argument("--timeout", type=float, default=30, help="one request's limit (s)")
    ap.add_argument("--p99", type=float, default=1.0, help="the p99 latency bound (s)")
    ap.add_argument("--sanitized", action="store_true")
    server_test.ARGS = ap.parse_args()
    per_ip = dict(tuple(int(x) for x in item.split(":"))
                  for item in server_test.ARGS.per_ip.split(",") if item)

    def checks(work):
        for n in (int(x) for x in server_test.ARGS.addresses.split(",")):
            if not 1 <= n <= 16:
                raise ValueError("--addresses: 1 to 16 (127.0.0.2 to 127.0.0.17)")
            run_case(work, n, per_ip.get(n, 0))

    return server_test.run_checks("primekv-slow-sockets-", checks)


if __name__ == "__main__":
    sys.exit(main())
