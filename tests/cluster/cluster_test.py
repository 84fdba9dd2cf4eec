#!/usr/bin/env python3
"""`primekv serve` replicas sharing a Redis session store, behind HAProxy (deploy/haproxy.cfg).

Usage: cluster_test.py --primekv BIN --model GGUF CASE [--sanitized]
CASE failover: Redis + 3 replicas + HAProxy on loopback; 8 clients hold 10-turn conversations
  through the proxy; the replica that served most of them is killed with SIGKILL after the
  third turn. Every turn is answered, every turn after the kill reads its session from a cache
  (restored from Redis on another replica), the answers equal one plain server's turn for turn,
  and every client keeps its own session.
CASE store: replicas without the proxy: a session continued on another replica; a replica whose
  copy is behind reads the newer turn; keys namespaced by tenant (another key's session is
  never loaded); a Redis restart (append-only file) keeps every completed turn; a replica keeps
  answering while Redis is down; a damaged value is refused and the conversation starts afresh.
CASE prefix: 3 replicas without the proxy, one Redis: a new conversation on one replica finds
  the prefix another replica computed (the store's prefix index: cached_tokens > 0, the same
  answer as without it), another tenant's identical prompt finds nothing (cached_tokens 0);
  then the prefix hit rate of 12 new conversations over one document spread over the three
  replicas (printed, and checked: every one after the first hits).
CASE peers: 3 replicas behind two HAProxy balancers sharing their stick table (the `peers`
  section of deploy/haproxy.cfg): 6 conversations begun through lb1 are continued through lb2,
  whose table has learnt them, and each turn lands on the replica that answered the first.
CASE measure: the figures of docs/server.md (store latency against turn time, bytes per
  session for none and primekv at 0.75 / 0.9, a turn on a replica that does not hold the
  session against one that does); prints a table, checks nothing.

Every process (redis-server, haproxy, replicas) runs on loopback ports in a temporary directory
and is stopped before exit, also on failure. When redis-server or haproxy is missing the test
reports skipped (exit 77), except under CI=true, where it fails.
"""
import argparse
import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "server"))
import server_test as st  # noqa: E402
from server_test import Server, check  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77
KEYS = ["silver-lantern", "red-harbor", "blue-falcon", "green-door"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tenant_id(key):  # src/server/tenant.cc TenantId
    return "t" + hashlib.sha256(key.encode()).hexdigest()[:32]


def redis_key(tenant, sid):  # src/server/redis_store.cc RedisSessionKey
    return "primekv:session:%s:%s" % (tenant or "-", sid)


class RedisError(RuntimeError):
    """An error reply ("-CODE message")."""


def read_reply(f):
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RedisError("redis: " + rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    raise RuntimeError("redis: unexpected reply %r" % line)


class Redis:
    """redis-server on a free loopback port, with an append-only file fsynced on every write
    (as deploy/cluster.sh runs it), so a restart keeps every completed write."""

    def __init__(self, work, durable=True):
        self.dir = os.path.join(work, "redis")
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.proc = None
        self.durable = durable  # False: no persistence at all (measure only)
        self.start()

    def start(self):
        self.log = open(os.path.join(self.dir, "redis.log"), "a")
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.durable else [
            "--appendonly", "no"]
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.dir,
             "--save", ""] + persistence, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while True:
            try:
                if self.cmd("PING") == "PONG":
                    return
            except OSError:
                pass
            except RedisError as e:
                # A restart answers LOADING until it has replayed the append-only file.
                if "LOADING" not in str(e):
                    raise
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("redis-server did not start (%s)" % self.dir)
            time.sleep(0.05)

    def stop(self):
        st.stop_process(self.proc)
        self.log.close()

    def url(self):
        return "redis://127.0.0.1:%d/0" % self.port

    def cmd(self, *args):
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            out = b"*%d\r\n" % len(args)
            for a in args:
                a = a if isinstance(a, bytes) else str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
            s.sendall(out)
            return read_reply(s.makefile("rb"))


class Proxy:
    """HAProxy with deploy/haproxy.cfg in front of three replicas, as balancer lb1 (or, given
    the first one as `peer_of`, as lb2, sharing its stick table)."""

    def __init__(self, work, replicas, peer_of=None):
        self.port = free_port()
        name = "lb2" if peer_of else "lb1"
        self.sock = os.path.join(work, "haproxy-%s.sock" % name)
        self.peers = peer_of.peers if peer_of else (free_port(), free_port())
        env = dict(os.environ, PRIMEKV_PROXY="127.0.0.1:%d" % self.port, PRIMEKV_ADMIN=self.sock,
                   PRIMEKV_PEER1="127.0.0.1:%d" % self.peers[0],
                   PRIMEKV_PEER2="127.0.0.1:%d" % self.peers[1])
        for i, r in enumerate(replicas):
            env["PRIMEKV_R%d" % (i + 1)] = "127.0.0.1:%d" % r.port
        self.log = open(os.path.join(work, "haproxy-%s.log" % name), "w")
        self.proc = subprocess.Popen(
            ["haproxy", "-db", "-L", name, "-f", os.path.join(ROOT, "deploy", "haproxy.cfg")],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while self.states() != {"r1": "UP", "r2": "UP", "r3": "UP"}:
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("haproxy did not start: %s" % open(self.log.name).read())
            time.sleep(0.05)

    def table(self):
        """The stick table: {session id: server id}."""
        out = {}
        for line in self.admin("show table replicas").splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if "key" in fields and "server_id" in fields:
                out[fields["key"]] = fields["server_id"]
        return out

    def admin(self, line):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(self.sock)
            s.sendall(line.encode() + b"\n")
            return s.makefile().read()

    def states(self):
        try:
            rows = [r.split(",") for r in self.admin("show stat").splitlines()]
        except OSError:
            return {}
        return {r[1]: r[17] for r in rows if len(r) > 17 and r[0] == "replicas" and
                r[1].startswith("r")}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def post(port, body, sid=None, key=None, timeout=120, header_only=False):
    """A completion; returns (status, json, the replica HAProxy names or None). The session is
    sent as the `session` field and mirrored in the header the proxy routes on (header_only:
    in the header alone)."""
    headers = {"Content-Type": "application/json"}
    if sid:
        if not header_only:
            body = dict(body, session=sid)
        headers["X-PrimeKV-Session"] = sid
    if key:
        headers["Authorization"] = "Bearer " + key
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)
    resp = conn.getresponse()
    text = resp.read().decode("utf-8", "replace")
    conn.close()
    try:
        j = json.loads(text)
    except ValueError:
        j = None
    return resp.status, j, resp.getheader("X-PrimeKV-Replica")


def prompt_for(c, answers, context):
    p = "Conversation %d.\n%s\nWhat is the special magic number for %s?\n" % (
        c, context, KEYS[c % 4])
    for i, a in enumerate(answers):
        p += a + "\nWhat is the special magic number for %s?\n" % KEYS[(c + i + 1) % 4]
    return p


def cached(j):
    return j["usage"]["prompt_tokens_details"]["cached_tokens"]


def metric(server, name):
    return server.metrics().get("primekv_" + name, 0.0)


TENANT_KEYS = ("--api-key", "alpha", "--api-key", "beta")


def key_for(c):  # clients alternate between two tenants
    return "alpha" if c % 2 == 0 else "beta"


def reference(work, clients, turns, max_tokens, context):
    """Every conversation on one plain server (no store, no proxy), turn by turn."""
    ref = Server(work, "--slots", "2", *TENANT_KEYS)
    out = {}
    try:
        def run(c):
            answers, sid = [], None
            for _ in range(turns):
                code, j, _ = post(ref.port, {"prompt": prompt_for(c, answers, context),
                                             "temperature": 0, "max_tokens": max_tokens},
                                  sid=sid, key=key_for(c))
                if code != 200:
                    break
                sid = j["session"]
                answers.append(j["choices"][0]["text"])
            out[c] = answers
        threads = [threading.Thread(target=run, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        ref.stop()
    return out


def case_failover(work):
    n_clients, turns, kill_after, max_tokens = 8, 10, 3, 6
    context = st.demo_prompt()
    redis = Redis(work)
    replicas, proxy = [], None
    try:
        for _ in range(3):
            replicas.append(Server(work, "--slots", "2", "--session-store", redis.url(),
                                   *TENANT_KEYS))
            replicas[-1].key = "alpha"  # for /metrics
        proxy = Proxy(work, replicas)
        records = {c: [] for c in range(n_clients)}
        arrived = threading.Barrier(n_clients + 1)
        go = threading.Event()

        def client(c):
            answers, sid = [], None
            for t in range(turns):
                if t == kill_after:
                    arrived.wait()
                    go.wait()
                t0 = time.monotonic()
                try:
                    code, j, replica = post(proxy.port, {
                        "prompt": prompt_for(c, answers, context), "temperature": 0,
                        "max_tokens": max_tokens}, sid=sid, key=key_for(c))
                except OSError as e:
                    code, j, replica = str(e), None, None
                rec = {"turn": t, "status": code, "replica": replica,
                       "seconds": time.monotonic() - t0}
                records[c].append(rec)
                if code != 200:
                    return
                rec.update(session=j["session"], cached=cached(j), text=j["choices"][0]["text"],
                           sent=sid)
                sid = j["session"]
                answers.append(rec["text"])

        threads = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        arrived.wait(timeout=300)
        served = {}
        for c in range(n_clients):
            r = records[c][-1]
            served[r["replica"]] = served.get(r["replica"], 0) + 1
        victim = max(served, key=served.get)
        moved = served[victim]
        print("     after turn %d: conversations per replica %s; SIGKILL %s" % (
            kill_after, served, victim))
        replicas[int(victim[1:]) - 1].proc.kill()
        replicas[int(victim[1:]) - 1].proc.wait()
        go.set()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t0
        ok = all(len(records[c]) == turns and all(r["status"] == 200 for r in records[c])
                 for c in range(n_clients))
        check(ok, "all %d conversations answered all %d turns through the proxy" % (
            n_clients, turns))
        if not ok:
            for c in range(n_clients):
                print("     client %d: %s" % (c, [(r["turn"], r["status"], r["replica"])
                                                  for r in records[c]]))
            return
        after = [r for c in range(n_clients) for r in records[c][kill_after:]]
        check(all(r["cached"] > 0 for r in after),
              "every turn after the kill read its session from a cache (%d turns, cached tokens "
              "%d..%d)" % (len(after), min(r["cached"] for r in after),
                           max(r["cached"] for r in after)))
        check(all(r["replica"] != victim for r in after), "no turn after the kill on " + victim)
        # Affinity: a conversation stays on one replica before the kill, and on the one that
        # took it over after; so the survivors read exactly the victim's conversations.
        sticky = all(len({r["replica"] for r in records[c][:kill_after]}) == 1 and
                     len({r["replica"] for r in records[c][kill_after:]}) == 1
                     for c in range(n_clients))
        check(sticky, "each conversation stayed on its replica (before the kill, and after it "
              "on the one that took it over)")
        loads = sum(metric(s, "store_loads_total") for i, s in enumerate(replicas)
                    if "r%d" % (i + 1) != victim)
        check(loads == moved, "the %d conversations of %s were read from Redis by the others, "
              "each once (%d loads)" % (moved, victim, loads))
        ids = [records[c][0]["session"] for c in range(n_clients)]
        check(len(set(ids)) == n_clients, "every client has its own session")
        check(all(r["session"] == ids[c] and (r["turn"] == 0 or r["sent"] == ids[c])
                  for c in range(n_clients) for r in records[c]),
              "every turn of a client continued its own session (no session lost or mixed)")
        # Tenants through the proxy: the other key naming a session is routed to the replica
        # that holds it, and answered as an unknown session.
        foreign = [post(proxy.port, {"prompt": "x", "max_tokens": 1}, sid=ids[c],
                        key=key_for(c + 1))[0] for c in range(n_clients)]
        check(foreign == [404] * n_clients,
              "another API key naming a session through the proxy gets 404: %s" % foreign)
        ref = reference(work, range(n_clients), turns, max_tokens, context)
        same = [c for c in range(n_clients)
                if [r["text"] for r in records[c]] == ref.get(c)]
        check(len(same) == n_clients, "greedy answers equal one plain server's, turn for turn "
              "(%d of %d conversations)" % (len(same), n_clients))
        for c in set(range(n_clients)) - set(same):
            print("     client %d cluster: %r\n     client %d server:  %r" % (
                c, [r["text"] for r in records[c]], c, ref.get(c)))
        post_kill = sorted(r["seconds"] for r in after)
        print("     %d turns in %.1f s; after the kill: median %.0f ms, max %.0f ms" % (
            n_clients * turns, elapsed, 1000 * post_kill[len(post_kill) // 2],
            1000 * post_kill[-1]))
    finally:
        if proxy:
            proxy.stop()
        for s in replicas:
            s.stop(kill=True)
        redis.stop()


def case_store(work):
    context = st.demo_prompt()
    redis = Redis(work)
    keys = ("--api-key", "alpha", "--api-key", "beta")
    servers = []
    try:
        a, b, c = [Server(work, "--session-store", redis.url(), *keys) for _ in range(3)]
        servers = [a, b, c]
        for s in servers:
            s.key = "alpha"  # for /metrics
        ref = reference(work, [0], 7, 6, context)[0]
        answers = []

        def ask(server, sid, key="alpha", header_only=False):
            code, j, _ = post(server.port, {"prompt": prompt_for(0, answers, context),
                                            "temperature": 0, "max_tokens": 6}, sid=sid, key=key,
                              header_only=header_only)
            return code, j

        def step(server, sid, what, header_only=False):
            code, j = ask(server, sid, header_only=header_only)
            good = code == 200 and j["session"] == (sid or j["session"])
            text = j["choices"][0]["text"] if good else None
            check(good and text == ref[len(answers)] and (sid is None or cached(j) > 0),
                  "turn %d %s (cached %s)" % (len(answers) + 1, what,
                                              cached(j) if good else code))
            answers.append(text or "")
            return j["session"] if good else sid

        sid = step(a, None, "on replica A")
        key = redis_key(tenant_id("alpha"), sid)
        value = redis.cmd("HGET", key, "data") or b""
        check(value.startswith(b"PKVSESS1") and redis.cmd("HGET", key, "turn") == b"1",
              "the value is the session file image (turn 1) under the tenant's key")
        names = [k.decode() for k in redis.cmd("KEYS", "*")]
        check(names and key in names and all(tenant_id("alpha") in k for k in names) and
              not any("alpha" in k.replace(tenant_id("alpha"), "") or "beta" in k for k in names),
              "keys are namespaced by the tenant id, never the API key: %s" % names)
        # Another key names the session on a replica that does not hold it: the store is asked
        # under that key's tenant only, and finds nothing.
        code, j = ask(c, sid, key="beta")
        check(code == 404 and metric(c, "store_loads_total") == 0 and
              metric(c, "store_misses_total") == 1,
              "another key's request for the session is 404, nothing loaded (%s)" % code)
        # The same key with another press: read from the store, then refused as on the replica
        # that made it (400); the next turn on C with the right press still finds it.
        code, j, _ = post(c.port, {"prompt": prompt_for(0, answers, context), "max_tokens": 1,
                                   "primekv": {"press": "snapkv", "ratio": 0.5}}, sid=sid,
                          key="alpha")
        check(code == 400 and j["error"]["param"] == "primekv",
              "a session read from the store keeps its press: another one is 400 (%s)" % code)
        sid = step(b, sid, "on replica B, which read it from Redis")
        check(metric(b, "store_loads_total") == 1, "replica B loaded it once")
        sid = step(a, sid, "back on A, whose copy is a turn behind: it reads the newer one")
        check(metric(a, "store_loads_total") == 1, "replica A reloaded it (its copy was behind)")

        redis.stop()
        redis.start()
        sid = step(c, sid, "on C after a Redis restart (append-only file)")
        redis.stop()
        sid = step(c, sid, "on C while Redis is down (its own copy)")
        check(metric(c, "store_errors_total") >= 1, "the failed save is counted")
        redis.start()
        sid = step(c, sid, "on C with Redis back")
        check(redis.cmd("HGET", key, "turn") == b"6", "Redis holds turn 6")
        sid = step(b, sid, "on B, the session named in the X-PrimeKV-Session header only",
                   header_only=True)
        code, j, _ = post(b.port, {"prompt": "x", "max_tokens": 1, "session": sid},
                          sid="s" + "0" * 32, key="alpha", header_only=True)
        check(code == 400, "a header naming another session than the field is 400 (%s)" % code)

        # A damaged value: one byte of the cache flipped. A replica whose copy is behind reads
        # it, refuses it, and the conversation starts afresh.
        data = bytearray(redis.cmd("HGET", key, "data"))
        data[len(data) // 2] ^= 0x40
        redis.cmd("HSET", key, "data", bytes(data))
        code, j = ask(a, sid)
        check(code == 404 and metric(a, "store_rejected_total") == 1,
              "a damaged value is refused: 404 (%s), counted" % code)
        code, j = ask(a, None)
        check(code == 200 and j["session"] != sid, "the conversation starts afresh")
        for s in servers:
            log = s.read_log()
            check("runtime error" not in log and "AddressSanitizer" not in log,
                  "no sanitizer report in a replica's log")
    finally:
        for s in servers:
            s.stop()
        redis.stop()


def turn_ms(server, sid, prompt, max_tokens):
    t0 = time.monotonic()
    code, j, _ = post(server.port, {"prompt": prompt, "temperature": 0, "max_tokens": max_tokens},
                      sid=sid)
    return (time.monotonic() - t0) * 1000, j if code == 200 else None


def measure_press(work, redis, press, ratio, context):
    """One conversation of 13 turns over two replicas: the first turn on A, then 6 alternating
    (each lands where the session is a turn behind: a store load), then 6 on A (local)."""
    flags = ("--session-store", redis.url(), "--press", press, "--ratio", str(ratio), "-c",
             "4096", "--allow-ctx-overflow")
    a, b = Server(work, *flags), Server(work, *flags)
    try:
        answers, local, remote = [], [], []
        last = {}

        def turn(server, sid, into):
            ms, j = turn_ms(server, sid, prompt_for(0, answers, context), 8)
            if j is None:
                raise RuntimeError("a turn failed on %s %s" % (press, ratio))
            if into is not None:
                into.append(ms)
            answers.append(j["choices"][0]["text"])
            last.update(tokens=j["usage"]["prompt_tokens"] + j["usage"]["completion_tokens"])
            return j["session"]

        sid = turn(a, None, None)
        first_tokens = last["tokens"]
        for t in range(6):
            sid = turn(b if t % 2 == 0 else a, sid, remote)
        for _ in range(6):
            sid = turn(a, sid, local)
        ma, mb = a.metrics(), b.metrics()

        def total(n):
            return ma.get("primekv_" + n, 0) + mb.get("primekv_" + n, 0)

        median = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
        return (press, ratio, first_tokens, last["tokens"],
                total("store_bytes_saved_total") / total("store_saves_total") / 1024,
                1000 * total("store_load_seconds_total") / total("store_loads_total"),
                1000 * total("store_save_seconds_total") / total("store_saves_total"),
                median(local), median(remote))
    finally:
        a.stop()
        b.stop()


def case_prefix(work):
    # A document put into a session first (max_tokens 0), then questions over it as new
    # conversations: each starts with the document's tokens, the stored session's whole prompt.
    context = st.demo_prompt() * 2 + "\n"
    redis = Redis(work)
    servers = []
    try:
        servers = [Server(work, "--session-store", redis.url(), *TENANT_KEYS) for _ in range(3)]
        for s in servers:
            s.key = "alpha"  # for /metrics

        def ask(server, i, key="alpha", question=True):
            body = {"prompt": context + ("What is the special magic number for %s?\n" %
                                         KEYS[i % 4] if question else ""),
                    "temperature": 0, "max_tokens": 6 if question else 0}
            code, j, _ = post(server.port, body, key=key)
            check(code == 200, "conversation %d answered (%s)" % (i, code))
            return j if code == 200 else {"usage": {"prompt_tokens_details": {"cached_tokens": -1},
                                                    "prompt_tokens": 0},
                                          "choices": [{"text": None}]}

        ask(servers[0], 0, question=False)
        index = [k.decode() for k in redis.cmd("KEYS", "primekv:prefix:*")]
        check(len(index) == 1 and tenant_id("alpha") in index[0] and "alpha" not in
              index[0].replace(tenant_id("alpha"), ""),
              "replica A put the document in a session: one prefix index, named by the tenant "
              "id: %s" % index)
        other = ask(servers[1], 1)
        check(cached(other) > 0, "a new conversation on replica B reads the prefix replica A "
              "stored (cached %d of %d)" % (cached(other), other["usage"]["prompt_tokens"]))
        check(metric(servers[1], "store_prefix_hits_total") == 1, "B counts one prefix hit")
        beta = ask(servers[2], 1, key="beta")
        check(cached(beta) == 0, "another tenant's identical prompt on replica C finds nothing "
              "(cached 0)")
        check(beta["choices"][0]["text"] == other["choices"][0]["text"],
              "and gets the same answer, computed afresh")
        hits = 0
        for i in range(2, 14):
            j = ask(servers[i % 3], i)
            hits += cached(j) > 0
        print("     prefix hit rate, 12 new conversations of one tenant over one document on "
              "3 replicas (after B's): %d of 12" % hits)
        check(hits == 12, "every one reuses the stored prefix")
    finally:
        for s in servers:
            s.stop()
        redis.stop()


def case_peers(work):
    context = st.demo_prompt()
    redis = Redis(work)
    servers, proxies = [], []
    try:
        servers = [Server(work, "--session-store", redis.url()) for _ in range(3)]
        proxies = [Proxy(work, servers)]
        proxies.append(Proxy(work, servers, peer_of=proxies[0]))
        first = {}
        for c in range(6):
            code, j, replica = post(proxies[0].port, {"prompt": prompt_for(c, [], context),
                                                      "temperature": 0, "max_tokens": 4})
            check(code == 200 and replica, "conversation %d begun through lb1 on %s" % (
                c, replica))
            if code == 200:
                first[j["session"]] = (c, replica, j["choices"][0]["text"])
        check(len(set(r for _, r, _ in first.values())) > 1,
              "lb1 spread the conversations over replicas: %s" % sorted(
                  r for _, r, _ in first.values()))
        deadline = time.time() + 10
        while time.time() < deadline and not set(first) <= set(proxies[1].table()):
            time.sleep(0.1)
        learnt = proxies[1].table()
        check(set(first) <= set(learnt) and all(
            learnt[sid] == proxies[0].table()[sid] for sid in first),
              "lb2's stick table holds lb1's %d sessions, each with lb1's server" % len(first))
        for sid, (c, replica, text) in first.items():
            code, j, again = post(proxies[1].port, {
                "prompt": prompt_for(c, [text], context), "temperature": 0, "max_tokens": 4},
                sid=sid)
            check(code == 200 and again == replica,
                  "conversation %d continued through lb2 on %s (first turn: %s)" % (
                      c, again, replica))
    finally:
        for p in proxies:
            p.stop()
        for s in servers:
            s.stop()
        redis.stop()


def case_measure(work):
    """Store latency per turn (load, save) against the turn time, bytes per session for none and
    primekv at 0.75 / 0.9, a turn on a replica that does not hold the session's last turn against
    one that does. Redis with an append-only file fsynced on every write, then without
    persistence."""
    context = st.demo_prompt() * 4  # a conversation of about 2K tokens
    print("| Redis | press | ratio | tokens (first turn / last) | KiB per session (mean of saves) "
          "| load ms | save ms | turn ms, same replica | turn ms, other replica |")
    print("|---|---|---|---|---|---|---|---|---|")
    for durable in (True, False):
        redis = Redis(work, durable=durable)
        try:
            for press, ratio in (("none", 0), ("primekv", 0.75), ("primekv", 0.9)):
                r = measure_press(work, redis, press, ratio, context)
                print("| %s | %s | %.2f | %d / %d | %.0f | %.1f | %.1f | %.1f | %.1f |" % (
                    ("AOF always" if durable else "no persistence",) + r), flush=True)
        finally:
            redis.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--sanitized", action="store_true")
    ap.add_argument("case", choices=["failover", "store", "prefix", "peers", "measure"])
    st.ARGS = ap.parse_args()
    need = ["redis-server"] + (["haproxy"] if st.ARGS.case in ("failover", "peers") else [])
    missing = [t for t in need if not shutil.which(t)]
    if missing:
        msg = "%s not installed (bash scripts/setup.sh --cluster)" % " and ".join(missing)
        if os.environ.get("CI") == "true":
            print("FAIL " + msg + " (required under CI=true)")
            return 1
        print("SKIPPED: " + msg)
        return SKIP
    cases = {"failover": case_failover, "store": case_store, "prefix": case_prefix,
             "peers": case_peers, "measure": case_measure}
    return st.run_checks("primekv-cluster-test-", cases[st.ARGS.case])


if __name__ == "__main__":
    sys.exit(main())
