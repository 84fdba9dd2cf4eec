#!/usr/bin/env python3
"""Checks of `primekv serve` against users who share it (docs/server.md, Security): unpredictable
session ids, tenants per API key, the isolation salt, prefix reuse that never changes the matched
session, session files that are not regular files, and the statuses of odd but valid or invalid
requests; then the third hardening round (issue 55): --port-file on what is not a regular file,
settings that cannot work, /metrics and response ids, unknown models and top_k, 409 before a
slot, failed saves, tenant shares of the KV budget, stalled connections from one address; and
the web page (issue 54): its CSP, the cache endpoint's 401 and 404, --no-ui; and issue 67: keys
too long for a request head (exit 2), nosniff on every response, 404s that echo no id.

Usage: security_test.py --primekv BIN --model GGUF [--sanitized] [--only CHECK,...]
(--sanitized: an ASan/UBSan build, where the budget contention count is printed, not checked;
--only: run these check functions only, e.g. to show a row failing on an older binary)
"""
import argparse
import http.client
import json
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import time

import server_test as st
from server_test import Server, check

DOC = "The special magic number for blue-falcon is 4521. " * 20


def complete(s, prompt, key=None, **extra):
    body = {"prompt": prompt, "temperature": 0, "max_tokens": 4, **extra}
    headers = {"Authorization": "Bearer " + key} if key else None
    return s.post("/v1/completions", body, headers=headers)


def cached(j):
    return j["usage"]["prompt_tokens_details"]["cached_tokens"]


def ids_are_random(s):
    ids = []
    for i in range(64):
        code, j, _ = complete(s, "id %d" % i, key="alpha", max_tokens=0)
        ids.append(j["session"] if code == 200 else "")
    well_formed = all(len(x) == 33 and x[0] == "s" and
                      all(c in "0123456789abcdef" for c in x[1:]) for x in ids)
    check(well_formed, "session ids are 's' + 128 bits in hex")
    if not well_formed:
        return
    values = [int(x[1:], 16) for x in ids]
    varying = sum(1 for b in range(128) if len({(v >> b) & 1 for v in values}) == 2)
    check(varying >= 120, "%d of 128 id bits vary over 64 sessions (>= 120)" % varying)
    gaps = {values[i + 1] - values[i] for i in range(len(values) - 1)}
    check(len(gaps) == len(values) - 1, "no two consecutive ids differ by the same step")


def tenants(s):
    q = DOC + "\nWhat is the magic number?\n"
    code, a1, _ = complete(s, q, key="alpha")
    check(code == 200, "tenant alpha: first turn")
    sid = a1["session"]
    code, b, _ = complete(s, q + a1["choices"][0]["text"] + "\nAgain?\n", key="beta",
                          session=sid)
    code2, u, _ = complete(s, q, key="beta", session="s" + "0" * 32)
    check(code == 404 and code2 == 404 and b["error"]["message"] == u["error"]["message"],
          "another tenant's session id is the same 404 as an unknown one")
    code, b, _ = complete(s, q + a1["choices"][0]["text"] + "\nAgain?\n", key="beta")
    check(code == 200 and cached(b) == 0, "another tenant's prompt reuses nothing (cached 0)")
    code, b2, _ = complete(s, q, key="beta", cache_salt="other")
    code, a2, _ = complete(s, q + a1["choices"][0]["text"] + "\nAgain?\n", key="alpha",
                           cache_salt="other")
    check(cached(a2) == 0, "another cache_salt inside one tenant reuses nothing")
    code, a3, _ = complete(s, q + a1["choices"][0]["text"] + "\nAgain?\n", key="alpha")
    check(code == 200 and cached(a3) >= a1["usage"]["prompt_tokens"],
          "the same tenant and salt reuse the prefix (cached %d)" % cached(a3))
    code, _, _ = s.request("GET", "/v1/models", headers={"Authorization": "bearer alpha"})
    check(code == 200, "the auth scheme is case-insensitive ('bearer')")
    code, _, _ = s.request("GET", "/v1/models", headers={"Authorization": "Bearer gamma"})
    check(code == 401, "an unknown key is refused")


def prefix_never_changes_session(s):
    q = DOC + "\nWhat is the magic number for owner?\n"
    code, o1, _ = complete(s, q, key="alpha")
    turn = q + o1["choices"][0]["text"]
    # Someone else (same tenant) continues the same document with another question.
    code, x, _ = complete(s, turn + "\nIntruder question?\n", key="alpha")
    check(code == 200 and x["session"] != o1["session"] and cached(x) > 0,
          "a prefix match runs on its own copy (cached %d)" % cached(x))
    code, o2, _ = complete(s, turn + "\nOwner's second question?\n", key="alpha",
                           session=o1["session"])
    check(code == 200 and o2["session"] == o1["session"] and
          cached(o2) >= o1["usage"]["prompt_tokens"],
          "the owner's next turn keeps its cache (cached %d)" % cached(o2))


def no_prefix_reuse(work):
    s = Server(work, "--no-prefix-reuse")
    try:
        q = DOC + "\nQ?\n"
        _, j1, _ = complete(s, q)
        _, j2, _ = complete(s, q + j1["choices"][0]["text"] + "\nQ2?\n")
        check(cached(j2) == 0, "--no-prefix-reuse: an unnamed turn reuses nothing")
        _, j3, _ = complete(s, q + j1["choices"][0]["text"] + "\nQ2?\n", session=j1["session"])
        check(cached(j3) > 0, "--no-prefix-reuse: a named session still continues")
    finally:
        s.stop()


def session_files(work):
    sess = os.path.join(work, "sess")
    s = Server(work, session_dir=sess)
    try:
        _, j, _ = complete(s, DOC + "\nQ?\n")
        sid = j["session"]
        _, k, _ = complete(s, DOC + "\nOther?\n", session=None)
    finally:
        s.stop()
    victim = os.path.join(work, "victim")
    open(victim, "w").write("precious")
    os.mkfifo(os.path.join(sess, "sfifo.pkvs"))
    os.symlink(victim, os.path.join(sess, "slink.pkvs"))
    os.symlink(victim, os.path.join(sess, sid + ".pkvs.tmp"))
    t0 = time.time()
    s = Server(work, session_dir=sess)  # raises if it never listens
    try:
        check(time.time() - t0 < 30, "a FIFO and a link in --session-dir do not block the start")
        log = s.read_log()
        check(log.count("not a regular file") == 2, "the FIFO and the link are reported, skipped")
        # At run time: the session's file becomes a FIFO, then a link.
        path = os.path.join(sess, k["session"] + ".pkvs")
        os.remove(path)
        os.mkfifo(path)
        t0 = time.time()
        code, j2, text = complete(s, DOC + "\nOther?\nMore?\n", session=k["session"])
        check(code == 404 and time.time() - t0 < 10 and sess not in text,
              "a FIFO in place of a session file: 404 at once, no server path (%d)" % code)
        code, j3, text = complete(s, DOC + "\nQ?\n" + j["choices"][0]["text"] + "\nQ2?\n",
                                  session=sid)
        check(code == 200, "a turn is saved with a link lying at its temporary name")
        check(open(victim).read() == "precious", "the link's target is untouched")
        check(not os.path.islink(os.path.join(sess, sid + ".pkvs")) and
              os.path.isfile(os.path.join(sess, sid + ".pkvs")), "the session file is a file")
        code, _, _ = s.request("GET", "/health")
        check(code == 200, "still serving")
    finally:
        s.stop()
    # A corrupted file met by a request that names no session: it starts afresh.
    s = Server(work, session_dir=sess)
    try:
        path = os.path.join(sess, sid + ".pkvs")
        data = bytearray(open(path, "rb").read())
        data[len(data) // 2] ^= 0x55
        open(path, "wb").write(bytes(data))
        code, j4, text = complete(s, DOC + "\nQ?\n" + j["choices"][0]["text"] + "\nQ3?\n")
        check(code == 200 and cached(j4) == 0 and sess not in text,
              "an unnamed request meeting a corrupt file starts afresh (%d)" % code)
    finally:
        s.stop()


def budget_waits(work):
    """Six long conversations and ten new ones under a budget that holds one long cache: a
    request that fits once the others settle waits for them instead of getting 503 (requests
    holding a session restored from disk are not running yet, and were not waited for). Under
    the sanitizers, where the count is not checked, three of two turns and four new ones still
    contend for the budget, and a request waits at most 15 s for memory instead of 60: there the
    turns are slow enough that waits run out, and the count is only printed."""
    longs, turns, shorts = (3, 2, 4) if st.ARGS.sanitized else (6, 4, 10)
    wait = ["--memory-wait-s", "15"] if st.ARGS.sanitized else []
    s = Server(work, "--slots", "4", "--kv-budget-mib", "4", "--ratio", "0", *wait,
               session_dir=os.path.join(work, "budget"))
    codes = []
    doc = DOC * 3

    def long_conversation(c):
        p = "Conversation %d. " % c + doc + "\nQ?\n"
        for t in range(turns):
            code, j, _ = s.post("/v1/completions", {"prompt": p, "temperature": 0, "max_tokens": 24})
            codes.append(code)
            if code != 200:
                return
            p += j["choices"][0]["text"] + "\nQ%d?\n" % t

    def first_turn(c):
        code, _, _ = s.post("/v1/completions", {"prompt": "Short %d. " % c + doc[:3000],
                                                "temperature": 0, "max_tokens": 8})
        codes.append(code)

    try:
        threads = ([threading.Thread(target=long_conversation, args=(c,)) for c in range(longs)] +
                   [threading.Thread(target=first_turn, args=(c,)) for c in range(shorts)])
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        evictions = s.metrics()["primekv_evictions_total"]
    finally:
        s.stop()
    asked = longs * turns + shorts
    what = "a 4 MiB budget, 4 slots: %d of %d turns answered, %d evictions (503 for none)" % (
        codes.count(200), asked, evictions)
    check(all(c in (200, 503) for c in codes), "under contention every answer is 200 or 503")
    if st.ARGS.sanitized:
        print("     (sanitized build, not checked) " + what)
    else:
        check(codes.count(200) == asked and evictions > 0, what)


def prefix_budget(work):
    """A conversation whose cache shares a pool with another (begun from its prompt) under a
    budget that holds the pool and little more: its next turn needs more pages than the pool
    has free, but once the other is evicted that one's pages are free for it. It is answered
    (evicting the other), where counting the whole pool as its own refused it with 503."""
    s = Server(work, "--slots", "1", "--kv-budget-mib", "4", "--ratio", "0")
    doc = DOC * 3
    try:
        code, a, text = s.post("/v1/completions", {"prompt": doc, "temperature": 0, "max_tokens": 4})
        check(code == 200, "the first conversation (%d %s)" % (code, text[:200]))
        held = [s.metrics()["primekv_kv_bytes_held"]]
        code, _, text = s.post("/v1/completions", {
            "prompt": doc + a["choices"][0]["text"] + "\nAnother one. " + DOC[:300],
            "temperature": 0, "max_tokens": 4})
        check(code == 200, "a second, from the first one's prompt (%d %s)" % (code, text[:200]))
        m = s.metrics()
        held.append(m["primekv_kv_bytes_held"])
        check(m["primekv_kv_pools"] == 1 and m["primekv_sessions_in_memory"] == 2,
              "the two share one pool (%d pools, %d sessions; bytes held %s)" % (
                  m["primekv_kv_pools"], m["primekv_sessions_in_memory"], held))
        code, j, text = s.post("/v1/completions", {
            "prompt": doc + a["choices"][0]["text"] + "\nAnd then? " + DOC[:200],
            "session": a["session"], "temperature": 0, "max_tokens": 4})
        m = s.metrics()
        check(code == 200 and m["primekv_evictions_total"] == 1,
              "the first one's next turn is answered by evicting the second (%d, %d evictions, "
              "pool %d of %d bytes: %s)" % (code, m["primekv_evictions_total"], held[-1],
                                            m["primekv_kv_budget_bytes"], text[:160]))
    finally:
        s.stop()


def statuses(s):
    def bad(body, param, what, path="/v1/completions"):
        code, j, text = s.post(path, body, headers={"Authorization": "Bearer alpha"})
        ok = code == 400 and j and j["error"].get("param") == param
        check(ok, "%s -> 400 naming %s (%d %s)" % (what, param, code, text[:120]))

    base = {"prompt": "hello", "max_tokens": 2}
    bad({**base, "top_p": 1e-300}, "top_p", "top_p 1e-300")
    bad({"messages": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]},
        "messages[0].content", "a content part whose type is a number", "/v1/chat/completions")
    for field, value in [("tools", [{"type": "function", "function": {"name": "f"}}]),
                         ("logprobs", True), ("response_format", {"type": "json_object"}),
                         ("tool_choice", "required"), ("logit_bias", {"1": 5})]:
        bad({**base, field: value}, field, "unsupported %s" % field)
    bad({"prompt": "hello", "max_tokens": 2, "max_completion_tokens": 3}, "max_completion_tokens",
        "both token limits, different")
    bad({"prompt": "hello", "max_completion_tokens": 10 ** 6}, "max_completion_tokens",
        "max_completion_tokens over the context")
    code, j, _ = s.request("GET", "/v1/models", headers={"Authorization": "Bearer alpha"})
    mid = j["data"][0]["id"]
    code, m, _ = s.request("GET", "/v1/models/" + mid, headers={"Authorization": "Bearer alpha"})
    check(code == 200 and m["id"] == mid, "GET /v1/models/{id}")
    code, m, _ = s.request("GET", "/v1/models/nope", headers={"Authorization": "Bearer alpha"})
    check(code == 404 and m["error"]["type"] == "model_not_found",
          "GET /v1/models/{unknown} -> 404 model_not_found")


# --- Issue 55: settings that cannot work, output paths, tenants that affect each other. ---

def serve_outcome(work, *args, wait=60):
    """Runs `serve` with `args`: (exit status, output), or (None, output) when it started
    listening (then it is stopped) or was still running after `wait` s."""
    log_path = os.path.join(work, "refused-%d.log" % time.monotonic_ns())
    with open(log_path, "w") as log:
        proc = subprocess.Popen([st.ARGS.primekv, "serve", "-m", st.ARGS.model, "--port", "0",
                                 "-t", "1", *args], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + wait
        while proc.poll() is None and time.time() < deadline:
            if "listening on" in open(log_path).read():
                break
            time.sleep(0.05)
        rc = proc.poll()
        st.stop_process(proc)
    return rc, open(log_path).read()


def refused(work, what, *args, wait=60):
    """A row: `serve` with `args` exits with an error (not a signal, not a start)."""
    rc, out = serve_outcome(work, *args, wait=wait)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    check(rc is not None and rc > 0 and "primekv" in out and "Sanitizer" not in out,
          "%s: refused, exit %s (%s)" % (what, rc if rc is not None else "none: it started",
                                         last[:150]))
    return rc is not None and rc > 0


def port_file_rows(work):
    """Item 10: --port-file is written by rename, so a path that is not a regular file (a
    device, FIFO, directory or link) is refused and left as it was."""
    fifo = os.path.join(work, "port-fifo")
    os.mkfifo(fifo)
    refused(work, "--port-file on a FIFO", "--port-file", fifo)
    check(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO is still a FIFO")
    folder = os.path.join(work, "port-dir")
    os.mkdir(folder)
    refused(work, "--port-file on a directory", "--port-file", folder)
    check(os.path.isdir(folder), "the directory is still a directory")
    victim = os.path.join(work, "port-victim")
    open(victim, "w").write("precious")
    link = os.path.join(work, "port-link")
    os.symlink(victim, link)
    refused(work, "--port-file on a symlink", "--port-file", link)
    check(os.path.islink(link) and open(victim).read() == "precious",
          "the link is still a link, its target untouched")
    device_ok = True
    if os.geteuid() == 0:
        # A private /dev/null (as root a rename over the real one would replace it).
        node = os.path.join(work, "port-null")
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        device_ok = refused(work, "--port-file on a character device", "--port-file", node)
        check(stat.S_ISCHR(os.lstat(node).st_mode), "the device node is still a device")
    if device_ok:  # only then is the real one safe to try
        refused(work, "--port-file /dev/null", "--port-file", "/dev/null")
        check(stat.S_ISCHR(os.lstat("/dev/null").st_mode), "/dev/null is still a device")
    else:
        check(False, "--port-file /dev/null: not tried (the device row failed)")
    # A regular file is replaced as before (the Server class relies on it).
    plain = os.path.join(work, "port-plain")
    open(plain, "w").write("old")
    rc, _ = serve_outcome(work, "--port-file", plain)
    check(rc is None and open(plain).read().strip().isdigit() and os.path.isfile(plain),
          "--port-file replaces a regular file (%s)" % open(plain).read().strip())


def unworkable_settings(work):
    """Items 9 and 11: settings that cannot work are refused at start, with a message."""
    refused(work, "--session-dir ''", "--session-dir", "")
    ro = os.path.join(work, "read-only")
    os.mkdir(ro)
    os.chmod(ro, 0o555)
    try:
        open(os.path.join(ro, "probe"), "w").close()
        os.remove(os.path.join(ro, "probe"))
        ro = "/proc/self/fdinfo"  # root writes through 0555: a directory no one can write
    except OSError:
        pass
    refused(work, "an unwritable --session-dir (%s)" % ro, "--session-dir", ro)
    t0 = time.time()
    refused(work, "an unreachable --session-store", "--session-store", "redis://127.0.0.1:1",
            wait=60)
    print("     (refused after %.1f s: the store gets 10 s to come up)" % (time.time() - t0))
    for key, what in [(" ", "a space"), ("\t", "a tab"), ("a\nb", "a newline inside"),
                      (" alpha", "a leading space"), ("alpha ", "a trailing space"),
                      ("al\x7fpha", "DEL inside")]:
        refused(work, "--api-key of %s (never matches)" % what, "--api-key", key)
    for args, what in [(("--tenant-kv-mib", "-1"), "--tenant-kv-mib -1"),
                       (("--tenant-kv-mib", "nan"), "--tenant-kv-mib nan"),
                       (("--tenant-kv-mib", "300"), "--tenant-kv-mib over --kv-budget-mib"),
                       (("--max-connections-per-ip", "600"), "--max-connections-per-ip 600"),
                       (("--header-deadline-s", "0"), "--header-deadline-s 0"),
                       (("--api-key", "alpha", "--metrics-key", "alpha"),
                        "--metrics-key equal to an --api-key"),
                       (("--metrics-key", "a\nb"), "--metrics-key with a newline")]:
        refused(work, what, *args)
    keys = os.path.join(work, "keys.txt")
    open(keys, "w").write("good\nbad\x01key\n")
    refused(work, "--api-key-file with a control character in a key", "--api-key-file", keys)


def response(s, path, body, key=None, session=None):
    """(status, parsed body, headers) of one POST."""
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    if session:
        body = dict(body, session=session)
    conn.request("POST", path, body=json.dumps(body), headers=h)
    r = conn.getresponse()
    text = r.read().decode("utf-8", "replace")
    headers = {k.lower(): v for k, v in r.getheaders()}
    conn.close()
    try:
        return r.status, json.loads(text), headers
    except ValueError:
        return r.status, None, headers


def metrics_and_ids(s):
    """Item 16: a tenant does not see the others' activity: /metrics needs the metrics key, and
    response ids are random, not a count of everyone's requests."""
    code, j, _ = s.request("GET", "/metrics", headers={"Authorization": "Bearer alpha"})
    check(code == 403 and j and j["error"]["type"] == "permission_error",
          "/metrics with a tenant key -> 403 (%d)" % code)
    code, _, _ = s.request("GET", "/metrics", headers={"Authorization": "Bearer nope"})
    check(code == 401, "/metrics with an unknown key -> 401 (%d)" % code)
    code, _, text = s.request("GET", "/metrics",
                              headers={"Authorization": "Bearer " + (s.metrics_key or "x")})
    check(code == 200 and "primekv_requests_total" in text, "/metrics with --metrics-key -> 200")
    ids = []
    for i in range(3):
        code, j, _ = complete(s, "response id %d" % i, key="beta", max_tokens=1)
        ids.append(j["id"] if code == 200 else "")
    code, j, _ = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                 "max_tokens": 1},
                        headers={"Authorization": "Bearer alpha"})
    ids.append(j["id"] if code == 200 else "")
    well = all(re.fullmatch(r"(cmpl|chatcmpl)-[0-9a-f]{32}", x) for x in ids)
    check(well and len(set(ids)) == len(ids),
          "response ids are 128 random bits, no counter (%s)" % ", ".join(ids[:2]))


def model_and_top_k(s):
    """Item 20: an unknown model is 404 model_not_found (not answered and echoed); top_k is
    served, not ignored."""
    code, j, _ = complete(s, "hello", key="alpha", model="gpt-4o")
    check(code == 404 and j["error"]["type"] == "model_not_found" and j["error"]["param"] ==
          "model", "\"model\": \"gpt-4o\" -> 404 model_not_found (%d)" % code)
    code, m, _ = s.request("GET", "/v1/models", headers={"Authorization": "Bearer alpha"})
    mid = m["data"][0]["id"]
    code, j, _ = complete(s, "hello", key="alpha", model=mid)
    check(code == 200 and j["model"] == mid, "the served model's id -> 200, echoed")
    code, j, _ = complete(s, "hello", key="alpha")
    check(code == 200 and j["model"] == mid, "no model -> the served one")
    for value in (-1, "3", 1.5, 2 ** 40):
        code, j, _ = complete(s, "hello", key="alpha", top_k=value)
        check(code == 400 and j["error"]["param"] == "top_k",
              "top_k %r -> 400 naming top_k (%d)" % (value, code))
    q = DOC + "\nWhat is the magic number?\n"
    _, greedy, _ = complete(s, q, key="alpha", max_tokens=16, cache_salt="topk")
    same = 0
    for seed in range(3):
        _, hot, _ = complete(s, q, key="alpha", max_tokens=16, temperature=2, top_k=1, seed=seed,
                             cache_salt="topk%d" % seed)
        same += hot["choices"][0]["text"] == greedy["choices"][0]["text"]
    check(same == 3, "top_k 1 at temperature 2 gives the greedy answer (%d of 3 seeds)" % same)


def get(s, path, key=None):
    """(status, body text, headers) of one GET."""
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    conn.request("GET", path, headers={"Authorization": "Bearer " + key} if key else {})
    r = conn.getresponse()
    text = r.read().decode("utf-8", "replace")
    headers = {k.lower(): v for k, v in r.getheaders()}
    conn.close()
    return r.status, text, headers


def csp_third_party_free(policy):
    """Every directive's sources are keywords ('self', 'none'): no host, scheme or wildcard,
    and no inline script or style."""
    directives = {}
    for part in policy.split(";"):
        words = part.split()
        if words:
            directives[words[0]] = words[1:]
    sources = [x for v in directives.values() for x in v]
    return ("default-src" in directives and "script-src" in directives and
            all(x in ("'self'", "'none'") for x in sources)), directives


def cache_view(s):
    """Issue 54: the web page's files and the cache endpoint. The page needs no key and sets a
    CSP that allows no other origin; GET /v1/sessions/{id}/cache needs the key (401), and
    another tenant's session id is the same 404 as an unknown one."""
    code, text, h = get(s, "/")
    ok, directives = csp_third_party_free(h.get("content-security-policy", ""))
    check(code == 200 and h.get("content-type", "").startswith("text/html") and ok,
          "GET / -> 200 HTML with a CSP naming no other origin (%d, %s)" % (code, directives))
    check("'unsafe-inline'" not in h.get("content-security-policy", "") and
          "<script>" not in text and re.search(r"(src|href)=\"(https?:)?//", text) is None,
          "the page has no inline script and loads nothing from another origin")
    check(h.get("x-content-type-options") == "nosniff", "the page is sent with nosniff")
    for path, kind in (("/app.js", "text/javascript"), ("/style.css", "text/css")):
        code, _, h = get(s, path)
        check(code == 200 and h.get("content-type", "").startswith(kind) and
              "content-security-policy" in h, "GET %s -> 200 %s with the CSP" % (path, kind))
    code, j, _ = complete(s, DOC, key="alpha", max_tokens=2, cache_salt="view")
    sid = j["session"]
    code, _, _ = get(s, "/v1/sessions/%s/cache" % sid)
    check(code == 401, "the cache endpoint without a key -> 401 (%d)" % code)
    code, _, _ = get(s, "/v1/sessions/%s/cache" % sid, key="nope")
    check(code == 401, "the cache endpoint with a wrong key -> 401 (%d)" % code)
    code, other, _ = get(s, "/v1/sessions/%s/cache" % sid, key="beta")
    unknown = "s" + "0" * 32
    code_u, text_u, _ = get(s, "/v1/sessions/%s/cache" % unknown, key="beta")
    check(code == 404 and code_u == 404 and other == text_u,
          "another tenant's session -> the same 404 as an unknown one (%d, %d)" % (code, code_u))
    code, text, h = get(s, "/v1/sessions/%s/cache" % sid, key="alpha")
    view = json.loads(text) if code == 200 else {}
    check(code == 200 and view.get("session") == sid and view.get("n_tokens", 0) > 0 and
          len(view.get("kept", [])) == view.get("n_layers", 0) * view.get("n_heads", 0) and
          sum(view.get("kept_per_layer", [])) < view.get("n_tokens", 0) * len(view["kept"]),
          "the owner reads the cache view (%d): every head's kept runs, fewer entries than "
          "positions" % code)
    code, _, _ = get(s, "/v1/sessions/..%2f..%2fetc/cache", key="alpha")
    check(code == 404, "a session id that is not one -> 404 (%d)" % code)


def no_ui(work):
    """--no-ui: no page at / (404), the API as before."""
    s = Server(work, "--no-ui")
    try:
        for path in ("/", "/app.js", "/style.css"):
            code, _, _ = get(s, path)
            check(code == 404, "--no-ui: GET %s -> 404 (%d)" % (path, code))
        code, j, _ = complete(s, "hello")
        check(code == 200, "--no-ui: completions answered (%d)" % code)
        code, _, _ = get(s, "/v1/sessions/%s/cache" % j["session"])
        check(code == 200, "--no-ui: the cache endpoint is API, still answered (%d)" % code)
    finally:
        s.stop()


def busy_session_slots1(work):
    """Item 18: with one slot, a turn naming a session that is answering, or waiting for the slot
    to answer, gets 409 at once instead of queueing (and then cutting the other turn out)."""
    s = Server(work, "--slots", "1")
    try:
        q = DOC + "\nWhat is the magic number?\n"
        _, j, _ = complete(s, q)
        _, other, _ = complete(s, "Another conversation. " + q)
        results = {}

        def turn(name, sid, extra, max_tokens):
            t0 = time.time()
            prompt = (q if sid == j["session"] else "Another conversation. " + q) + extra
            code, k, _ = complete(s, prompt, session=sid, max_tokens=max_tokens)
            results[name] = (code, time.time() - t0,
                             k["usage"]["completion_tokens"] if code == 200 else 0)

        def run(specs, delay):
            threads = [threading.Thread(target=turn, args=spec) for spec in specs]
            threads[0].start()
            time.sleep(delay)  # the first turn is running (a long answer: about a second)
            for t in threads[1:]:
                t.start()
            for t in threads:
                t.join()

        # Three turns on one session: the first runs, the two others come while it does.
        results.clear()
        run([("a", j["session"], "\nLong?\n", 1500), ("b", j["session"], "\nB?\n", 4),
             ("c", j["session"], "\nC?\n", 4)], 0.2)
        codes = sorted(results[n][0] for n in "abc")
        check(codes == [200, 409, 409] and results["b"][1] < results["a"][1] and
              results["c"][1] < results["a"][1],
              "--slots 1: three turns on one session, the later two while the first runs -> %s "
              "(200, 409, 409, the 409s at once; the first generated %d tokens in %.2f s)" %
              (", ".join(map(str, codes)), results["a"][2], results["a"][1]))
        # The slot is busy with another session; two turns on one session at once: one waits
        # for the slot (then 200), the other is 409 at once.
        results.clear()
        run([("a", other["session"], "\nLong?\n", 1500), ("b", j["session"], "\nB2?\n", 4),
             ("c", j["session"], "\nC2?\n", 4)], 0.2)
        codes = sorted(results[n][0] for n in "bc")
        refused = [results[n][1] for n in "bc" if results[n][0] == 409]
        check(codes == [200, 409] and refused and refused[0] < results["a"][1],
              "--slots 1, the slot busy: two turns on one waiting session -> %s (200, 409, the "
              "409 at once)" % ", ".join(map(str, codes)))
    finally:
        s.stop()


def failed_saves(work):
    """Item 19: a turn whose save fails is answered, and says so (header, field, metric)."""
    sess = os.path.join(work, "saves")
    s = Server(work, session_dir=sess)
    try:
        q = DOC + "\nQ?\n"
        code, j, h = response(s, "/v1/completions", {"prompt": q, "max_tokens": 4,
                                                     "temperature": 0})
        check(code == 200 and h.get("x-primekv-saved") == "true" and
              j["primekv"].get("saved") is True, "a saved turn says so (X-PrimeKV-Saved: true)")
        moved = sess + ".moved"
        os.rename(sess, moved)
        open(sess, "w").write("not a directory")  # every save now fails, as root too
        code, j2, h = response(s, "/v1/completions",
                               {"prompt": q + j["choices"][0]["text"] + "\nQ2?\n",
                                "max_tokens": 4, "temperature": 0}, session=j["session"])
        check(code == 200 and h.get("x-primekv-saved") == "false" and
              j2["primekv"].get("saved") is False,
              "a turn whose save failed: 200 with X-PrimeKV-Saved: false and primekv.saved "
              "false (%d, %s)" % (code, h.get("x-primekv-saved")))
        events, _ = st.stream(s, "/v1/completions", {"prompt": q + "Stream?\n", "max_tokens": 2,
                                                     "stream": True, "temperature": 0})
        last = [e for e in events if e.get("choices") and e["choices"][0].get("finish_reason")]
        check(last and last[-1].get("primekv", {}).get("saved") is False,
              "a streamed turn says it in its last chunk (primekv.saved false)")
        check(s.metrics().get("primekv_turns_not_saved_total") == 2,
              "primekv_turns_not_saved_total counts both")
        os.remove(sess)
        os.rename(moved, sess)
        code, _, h = response(s, "/v1/completions",
                              {"prompt": q + j["choices"][0]["text"] + "\nQ3?\n",
                               "max_tokens": 4, "temperature": 0}, session=j["session"])
        check(code == 200 and h.get("x-primekv-saved") == "true", "saved again once writable")
    finally:
        s.stop()


def tenant_share(work):
    """Item 15: one tenant's requests do not evict another's idle conversation (no
    --session-dir, so an evicted conversation is forgotten)."""
    s = Server(work, "--api-key", "alpha", "--api-key", "beta", "--kv-budget-mib", "4",
               "--ratio", "0")
    try:
        q = DOC[:600] + "\nWhat is the magic number?\n"
        code, a1, _ = complete(s, q, key="alpha")
        check(code == 200, "tenant alpha: a short conversation")
        codes = []
        for c in range(8):
            code, _, _ = complete(s, "Conversation %d. " % c + DOC * 2 + "\nQ?\n", key="beta")
            codes.append(code)
        try:
            evictions = s.metrics().get("primekv_evictions_total", 0)
        except ValueError:  # a server without --metrics-key (an older binary)
            evictions = -1
        code, a2, _ = complete(s, q + a1["choices"][0]["text"] + "\nAgain?\n", key="alpha",
                               session=a1["session"])
        check(code == 200 and cached(a2) > 0,
              "alpha's idle session survives 8 long conversations of beta (%d, %d evictions, "
              "beta %s)" % (code, evictions, ",".join(map(str, codes))))
        check(all(c == 200 for c in codes), "beta's conversations are answered (its own evicted)")
    finally:
        s.stop()
    # A fixed cap: a tenant's request beyond it is refused, naming the share.
    if not st.serve_supports("--tenant-kv-mib"):
        check(False, "--tenant-kv-mib: not a flag of this server")
        return
    s = Server(work, "--api-key", "alpha", "--kv-budget-mib", "8", "--tenant-kv-mib", "1",
               "--ratio", "0")
    try:
        code, j, _ = complete(s, DOC * 2 + "\nQ?\n", key="alpha")
        check(code == 503 and "--tenant-kv-mib" in j["error"]["message"],
              "--tenant-kv-mib 1: a larger request -> 503 naming the share (%d)" % code)
    finally:
        s.stop()


def slow_heads(work):
    """Item 17: stalled connections from one address cannot fill the connection cap, and a head
    that trickles in is dropped at --header-deadline-s."""
    s = Server(work, "--max-connections", "32")
    socks, stop = [], threading.Event()
    try:
        for _ in range(40):  # more than the cap, all from 127.0.0.2
            try:
                c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                c.settimeout(5)
                c.bind(("127.0.0.2", 0))
                c.connect(("127.0.0.1", s.port))
                c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
                socks.append(c)
            except OSError:
                pass
        time.sleep(1.0)
        t0 = time.time()
        try:
            code, _, _ = complete(s, "hello", max_tokens=1)
        except (OSError, http.client.HTTPException) as e:
            code = str(e) or type(e).__name__
        check(code == 200 and time.time() - t0 < 10,
              "a client beside 40 stalled connections from one other address -> %s (the cap "
              "is 32, a quarter per address)" % code)
    finally:
        stop.set()
        for c in socks:
            c.close()
        s.stop()
    if not st.serve_supports("--header-deadline-s"):
        check(False, "--header-deadline-s: not a flag of this server")
        return
    s = Server(work, "--header-deadline-s", "2")
    try:
        c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\n")
        t0, closed = time.time(), None
        try:
            for i in range(20):  # a header line every 0.5 s: 10 s, under the 30 s deadline
                time.sleep(0.5)
                c.sendall(b"X-Slow-%d: 1\r\n" % i)
            c.settimeout(1)
            if c.recv(1) == b"":
                closed = time.time() - t0
        except OSError:
            closed = time.time() - t0
        c.close()
        check(closed is not None and closed < 6,
              "a head that trickles in is dropped at --header-deadline-s 2 (after %s s)" %
              ("%.1f" % closed if closed else "never"))
    finally:
        s.stop()


# --- Issue 67: keys that cannot fit a request head, nosniff, 404s that echo no id. ---

def long_api_keys(work):
    """Item 4: a key whose Authorization line cannot fit in --max-header-kib never matches: it
    is refused at start as a usage error (exit 2), from --api-key and from --api-key-file."""
    for args, what in [(("--api-key", "k" * 40000), "a 40,000-byte --api-key (head limit 32 KiB)"),
                       (("--max-header-kib", "1", "--api-key", "k" * 984),
                        "a 984-byte --api-key with --max-header-kib 1"),
                       (("--api-key", "alpha", "--metrics-key", "m" * 40000),
                        "a 40,000-byte --metrics-key")]:
        rc, out = serve_outcome(work, *args)
        last = out.strip().splitlines()[-1] if out.strip() else ""
        check(rc == 2 and "--max-header-kib" in last,
              "%s: refused, exit %s (%s)" % (what, rc, last[:150]))
    keys = os.path.join(work, "long-keys.txt")
    open(keys, "w").write("short\n" + "k" * 40000 + "\n")
    rc, out = serve_outcome(work, "--api-key-file", keys)
    check(rc == 2, "a 40,000-byte key in --api-key-file: refused, exit %s" % rc)
    # The bound is not tighter than the head: a key just under it works.
    key = "k" * 900
    s = Server(work, "--max-header-kib", "1", "--api-key", key)
    try:
        data = st.raw_exchange(s.port, ("GET /v1/models HTTP/1.0\r\nAuthorization: Bearer %s\r\n\r\n"
                                        % key).encode())
        check(data.startswith(b"HTTP/1.0 200") or data.startswith(b"HTTP/1.1 200"),
              "a 900-byte key with --max-header-kib 1 starts and authenticates (%r)" % data[:12])
    finally:
        s.stop()


def every_response_nosniff(s):
    """Item 5: X-Content-Type-Options: nosniff on every response the server writes: JSON,
    text, errors, streams and the page's files."""
    rows = [("GET", "/health", None, None), ("GET", "/v1/models", None, "alpha"),
            ("GET", "/v1/models", None, None), ("GET", "/v1/nothing", None, "alpha"),
            ("POST", "/v1/models", None, "alpha"), ("GET", "/metrics", None, "alpha"),
            ("GET", "/metrics", None, st.METRICS_KEY),
            ("POST", "/v1/completions", {"prompt": "hello", "max_tokens": 1}, "alpha"),
            ("POST", "/v1/completions", {"prompt": "hello", "max_tokens": 1, "stream": True},
             "alpha"),
            ("POST", "/v1/completions", {"prompt": 5}, "alpha"),
            ("GET", "/", None, None), ("GET", "/app.js", None, None)]
    missing = []
    for method, path, body, key in rows:
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        headers = {"Authorization": "Bearer " + key} if key else {}
        data = json.dumps(body) if body is not None else None
        if data:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        r.read()
        if r.getheader("X-Content-Type-Options") != "nosniff":
            missing.append("%s %s -> %d" % (method, path, r.status))
        conn.close()
    check(not missing, "nosniff on all %d kinds of response (missing on %s)" %
          (len(rows), missing or "none"))


def not_found_echoes_nothing(s):
    """Item 5: a 404 does not echo the id (or model name) the client sent."""
    code, j, _ = complete(s, "hello", key="alpha", max_tokens=1, cache_salt="echo")
    sid = j.get("session", "")
    marker = "sZzEcHo" + "0" * 25
    rows = []
    code, _, text = complete(s, "hello", key="beta", session=sid)
    rows.append(("another tenant's session", code, text, sid))
    code, _, text = complete(s, "hello", key="alpha", session=marker)
    rows.append(("an unknown session", code, text, marker))
    code, text, _ = get(s, "/v1/sessions/%s/cache" % marker, key="alpha")
    rows.append(("the cache view of an unknown session", code, text, marker))
    code, text, _ = get(s, "/v1/sessions/%s/cache" % sid, key="beta")
    rows.append(("the cache view of another tenant's session", code, text, sid))
    code, text, _ = get(s, "/v1/sessions/..%2fsZzEcHo/cache", key="alpha")
    rows.append(("the cache view of a non-id", code, text, "sZzEcHo"))
    code, text, _ = get(s, "/v1/models/sZzEcHo-model", key="alpha")
    rows.append(("an unknown model's path", code, text, "sZzEcHo"))
    code, _, text = complete(s, "hello", key="alpha", model="sZzEcHo-model")
    rows.append(("an unknown model in the body", code, text, "sZzEcHo"))
    code, _, text = s.request("POST", "/v1/completions", {"prompt": "hello"},
                              headers={"Authorization": "Bearer alpha",
                                       "X-PrimeKV-Session": marker})
    rows.append(("an unknown session in X-PrimeKV-Session", code, text, marker))
    for what, code, text, echo in rows:
        check(code == 404 and echo not in text,
              "%s -> 404 without the id (%d, %s)" % (what, code, text[:100]))
    messages = [json.loads(text)["error"]["message"] for _, code, text, _ in rows[:4]
                if code == 404]
    check(len(messages) == 4 and set(messages) == {"unknown session"},
          "every unknown session reads 'unknown session' (%s)" % sorted(set(messages)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--sanitized", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated check functions to run")
    st.ARGS = ap.parse_args()
    return st.run_checks("primekv-security-test-", checks)


def checks(work):
    def want(fn):
        return not st.ARGS.only or fn.__name__ in st.ARGS.only.split(",")

    on_keyed = [ids_are_random, tenants, prefix_never_changes_session, statuses, metrics_and_ids,
                model_and_top_k, cache_view, every_response_nosniff, not_found_echoes_nothing]
    if any(want(fn) for fn in on_keyed):
        s = Server(work, "--api-key", "alpha", "--api-key", "beta")
        try:
            for fn in on_keyed:
                if want(fn):
                    fn(s)
        finally:
            s.stop()
    for fn in [no_prefix_reuse, session_files, budget_waits, prefix_budget, port_file_rows, unworkable_settings,
               busy_session_slots1, failed_saves, tenant_share, slow_heads, no_ui,
               long_api_keys]:
        if want(fn):
            fn(work)


if __name__ == "__main__":
    sys.exit(main())
