#!/usr/bin/env python3
"""Checks of `primekv serve` against users who share it (docs/server.md, Security): unpredictable
session ids, tenants per API key, the isolation salt, prefix reuse that never changes the matched
session, session files that are not regular files, and the statuses of odd but valid or invalid
requests.

Usage: security_test.py --primekv BIN --model GGUF [--sanitized]
(--sanitized: an ASan/UBSan build, where the budget contention count is printed, not checked)
"""
import argparse
import os
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
    check(code == 404 and code2 == 404 and
          b["error"]["message"].replace(sid, "ID") == u["error"]["message"].replace("s" + "0" * 32,
                                                                                   "ID"),
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--sanitized", action="store_true")
    st.ARGS = ap.parse_args()
    return st.run_checks("primekv-security-test-", checks)


def checks(work):
    s = Server(work, "--api-key", "alpha", "--api-key", "beta")
    try:
        ids_are_random(s)
        tenants(s)
        prefix_never_changes_session(s)
        statuses(s)
    finally:
        s.stop()
    no_prefix_reuse(work)
    session_files(work)
    budget_waits(work)


if __name__ == "__main__":
    sys.exit(main())
