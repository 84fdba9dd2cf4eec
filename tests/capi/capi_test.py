#!/usr/bin/env python3
"""The Python module `primekv` (python/primekv, on the C API) against the command line and the
server: greedy generation equals `primekv generate`, `score` equals `primekv press-scores` bit
for bit, sessions saved from Python continue in `primekv serve` and the reverse, bad input
raises, and two sessions on two threads run at the same time.

Usage: capi_test.py --primekv BIN --model GGUF CASE
(CASE: generate | score | sessions | serve | errors | threads | example | longrope |
strings)
The module is imported from PYTHONPATH (ctest sets it to the build tree's python/).
"""
import argparse
import json
import os
import subprocess
import sys
import threading
from contextlib import suppress
import time

import numpy as np

import primekv

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
import server_test  # noqa: E402  (the loopback server harness)

ARGS = None
check = server_test.check
DOC = ("The archive lists three keys. The key for the north gate is 8812. The key for the east "
       "gate is 3307. The key for the river gate is 5590. ") * 6


def cli_generate(prompt, n, press, ratio, mode="context", extra=()):
    cmd = [ARGS.primekv, "generate", "-m", ARGS.model, "-p", prompt, "-n", str(n), "--temp", "0",
           "--press", press, "--ratio", str(ratio), "--mode", mode, "--json", "-t", "1", *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    return json.loads(out.stdout)


def case_generate(model, work):
    prompt = DOC + "The key for the east gate is"
    for press, ratio, mode, extra, kw in [
            ("none", 0.0, "context", (), {}),
            ("primekv", 0.75, "context", (), {}),
            ("snapkv", 0.5, "context", (), {}),
            ("keydiff", 0.5, "chunked", ("--chunk", "64"), {"chunk": 64}),
            ("primekv", 0.5, "decode", ("--interval", "8"), {"interval": 8})]:
        ref = cli_generate(prompt, 24, press, ratio, mode, extra)
        ids = model.tokenize(prompt)
        with model.session(press=press, ratio=ratio, mode=mode, threads=1, **kw) as s:
            s.feed_context(ids)
            got = s.generate(24)
            t = s.timings()
        check(ids == ref["prompt_tokens"], f"{press}/{mode}: tokenize equals generate's prompt")
        check(got == ref["tokens"], f"{press} {ratio} {mode}: greedy tokens equal `primekv "
              f"generate` ({len(got)} tokens: {model.detokenize(got)!r})")
        check(t["compressions"] == ref["kv"]["compressions"],
              f"{press}/{mode}: {t['compressions']} compressions, as generate")


def random_layer(rng, n=37, hkv=2, heads=4, d=16, d_model=48, w=8, t_ctx=20, t_fut=6):
    positions = np.sort(rng.choice(n + 30, size=n, replace=False)).astype(np.int32)
    nxt = int(positions[-1]) + 1
    return {
        "keys": rng.standard_normal((1, hkv, n, d), dtype=np.float32),
        "values": rng.standard_normal((1, hkv, n, d), dtype=np.float32),
        "queries": rng.standard_normal((1, heads, w, d), dtype=np.float32),
        "window_positions": np.arange(nxt - w, nxt, dtype=np.int32),
        "wo": rng.standard_normal((d_model, heads * d), dtype=np.float32) / 8,
        "context_queries": rng.standard_normal((1, heads, t_ctx, d), dtype=np.float32),
        "context_positions": np.arange(t_ctx, dtype=np.int32),
        "future_queries": rng.standard_normal((1, heads, t_fut, d), dtype=np.float32),
        "positions": positions,
        "next_position": nxt,
        "meta": {"n": n, "n_heads": heads, "n_kv_heads": hkv, "head_dim": d, "d_model": d_model,
                 "n_layers": 4, "layer": 2, "next_position": nxt, "rope_base": 500000.0,
                 "rope_half": True, "ratio": 0.5},
    }


def rows(q):  # (1, heads, t, d) -> (t, heads * d), press-scores' layout
    return np.ascontiguousarray(q[0].transpose(1, 0, 2).reshape(q.shape[2], -1))


def write_layer(layer, folder):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(layer["meta"], f)
    files = {"keys.f32": layer["keys"][0], "values.f32": layer["values"][0],
             "positions.i32": layer["positions"], "window_queries.f32": rows(layer["queries"]),
             "window_positions.i32": layer["window_positions"], "wo.f32": layer["wo"],
             "context_queries.f32": rows(layer["context_queries"]),
             "context_positions.i32": layer["context_positions"],
             "future_queries.f32": rows(layer["future_queries"])}
    for name, arr in files.items():
        np.ascontiguousarray(arr).tofile(os.path.join(folder, name))


def case_score(model, work):
    del model
    rng = np.random.default_rng(7)
    layer = random_layer(rng)
    folder = os.path.join(work, "layer")
    write_layer(layer, folder)
    specs = [p for p in primekv.presses() if p not in ("none", "kvzip", "adakv:<press>")]
    specs += ["adakv:primekv", "adakv:snapkv", "snapkv:window=8",
              "primekv:key=selfexact,value=wo_self"]
    m = layer["meta"]
    for spec in specs:
        proc = subprocess.run([ARGS.primekv, "press-scores", folder, "--press", spec],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            # A spec press-scores refuses must be refused by score too, with the same reason.
            try:
                primekv.score(spec, layer["keys"], layer["values"])
                check(False, f"{spec}: press-scores refuses it ({proc.stderr.strip()}), "
                      "score accepted it")
            except ValueError:
                check(True, f"{spec}: refused by both")
            continue
        ref = np.fromfile(os.path.join(folder, "scores.f32"), dtype=np.float32)
        got = primekv.score(
            spec, layer["keys"], layer["values"], layer["queries"], positions=layer["positions"],
            window_positions=layer["window_positions"], wo=layer["wo"],
            context_queries=layer["context_queries"],
            context_positions=layer["context_positions"],
            future_queries=layer["future_queries"], next_position=layer["next_position"],
            rope_base=m["rope_base"], rope_half=True, layer=m["layer"], n_layers=m["n_layers"])
        check(got.shape == (1, m["n_kv_heads"], m["n"]), f"{spec}: kvpress's shape {got.shape}")
        check(np.array_equal(got.reshape(-1).view(np.uint32), ref.view(np.uint32)),
              f"{spec}: scores equal press-scores bit for bit")
    # Keyword parameters become the press spec; a batch scores each element on its own.
    both = np.concatenate([layer["keys"], layer["keys"][:, :, ::-1]], axis=0)
    vals = np.concatenate([layer["values"], layer["values"]], axis=0)
    got = primekv.score("lagkv", both, vals, lag=8)
    one = primekv.score("lagkv:lag=8", both[1:], vals[1:])
    check(np.array_equal(got[1], one[0]), "batch element 1 scored as on its own; lag=8 kwarg")
    check(not np.array_equal(got[0], got[1]), "batch elements differ")


def case_sessions(model, work):
    ids = model.tokenize(DOC)
    full = model.session(threads=1)
    full.feed_context(ids)
    comp = model.session(press="primekv", ratio=0.75, threads=1)
    comp.feed_context(ids)
    n = len(ids)
    info = model.info
    per_head = max(1, int(n * 0.25))
    check(full.kv_entries() == info["n_layers"] * info["n_kv_heads"] * n,
          f"none keeps all {n} entries per head")
    check(comp.kv_entries() == info["n_layers"] * info["n_kv_heads"] * per_head,
          f"primekv 0.75 keeps {per_head} of {n} per head")
    check(comp.kv_bytes() < full.kv_bytes() / 2,
          f"kv bytes {comp.kv_bytes()} < half of {full.kv_bytes()}")
    full.compress(0.5)
    check(full.kv_entries() == info["n_layers"] * info["n_kv_heads"] * n,
          "compress(0.5) on a none session is a no-op (none scores nothing)")
    pk = model.session(press="keydiff", ratio=0.5, threads=1)
    pk.feed(ids)
    check(pk.kv_entries() == info["n_layers"] * info["n_kv_heads"] * n, "feed does not compress")
    pk.compress()
    check(pk.kv_entries() == info["n_layers"] * info["n_kv_heads"] * (n // 2),
          "compress() removes the session's ratio")
    check(pk.timings()["compressions"] == 1, "explicit compressions are counted")
    # Save and load: the loaded session continues to the same tokens as the live one.
    q = model.tokenize(" The key for the river gate is", add_bos=False)
    a1 = comp.generate(6, feed_last=True)
    comp.end_turn()
    comp.save(work, "roundtrip")
    loaded = primekv.Session.load(model, os.path.join(work, "roundtrip.pkvs"), threads=1)
    check(loaded.tokens == comp.tokens, f"loaded tokens equal ({len(loaded.tokens)})")
    check(loaded.kv_entries() == comp.kv_entries(), "loaded cache keeps the same entries")
    comp.feed(q)
    loaded.feed(q)
    live, back = comp.generate(12), loaded.generate(12)
    check(live == back, f"the loaded session continues as the live one ({len(live)} tokens)")
    check(len(a1) > 0, "first answer")
    for s in (full, comp, pk, loaded):
        s.close()


def post_tokens(server, prompt, session=None, n=12):
    body = {"prompt": prompt, "temperature": 0, "max_tokens": n}
    if session:
        body["session"] = session
    code, j, text = server.post("/v1/completions", body)
    if code != 200:
        raise RuntimeError(f"server answered {code}: {text}")
    return j


def case_serve(model, work):
    server_test.ARGS = ARGS
    sessions = os.path.join(work, "sessions")
    os.makedirs(sessions)
    p = model.tokenize(DOC + "The key for the north gate is")
    q = model.tokenize(" The key for the river gate is", add_bos=False)
    # Python first, the server second: the server's defaults are primekv 0.75, multiturn.
    s = model.session(press="primekv", ratio=0.75, mode="multiturn", threads=1)
    s.feed_context(p)
    s.generate(8, feed_last=True)
    s.end_turn()
    s.save(sessions, "frompython")
    before = s.tokens
    s.feed(q)
    expected = model.detokenize(s.generate(12, feed_last=True))
    srv = server_test.Server(work, session_dir=sessions)
    try:
        j = post_tokens(srv, before + q, session="frompython")
        cached = j["usage"]["prompt_tokens_details"]["cached_tokens"]
        check(cached == len(before), f"the server read {cached} of {len(before)} tokens from the "
              "Python session")
        check(j["choices"][0]["text"] == expected,
              f"the server continues it as Python does: {expected!r}")
        # The server first, Python second.
        j1 = post_tokens(srv, p, n=8)
        sid = j1["session"]
    finally:
        srv.stop()
    t = primekv.Session.load(model, os.path.join(sessions, sid + ".pkvs"), threads=1)
    mine = t.tokens
    t.feed(q)
    from_server = model.detokenize(t.generate(12, feed_last=True))
    check(from_server == expected, f"Python continues the server's session {sid} as its own "
          f"conversation: {from_server!r}")
    srv = server_test.Server(work, session_dir=sessions)
    try:
        j2 = post_tokens(srv, mine + q, session=sid)
        check(j2["choices"][0]["text"] == from_server, "and as the server itself continues it")
    finally:
        srv.stop()


def expect(exc, what, fn):
    try:
        fn()
    except exc as e:
        check(len(str(e)) > 0, f"{what}: {type(e).__name__}: {e}")
        return
    except Exception as e:  # noqa: BLE001 (the wrong kind is the failure being reported)
        check(False, f"{what}: expected {exc.__name__}, got {type(e).__name__}: {e}")
        return
    check(False, f"{what}: no exception")


def case_errors(model, work):
    import torch
    rng = np.random.default_rng(1)
    k = rng.standard_normal((1, 2, 10, 8), dtype=np.float32)
    expect(ValueError, "keys with 3 dims", lambda: primekv.score("knorm", k[0], k[0]))
    expect(ValueError, "keys and values differ", lambda: primekv.score("knorm", k, k[:, :, :5]))
    expect(TypeError, "integer keys", lambda: primekv.score("knorm", k.astype(np.int32), k))
    expect(TypeError, "integer torch tensor",
           lambda: primekv.score("knorm", torch.zeros((1, 2, 10, 8), dtype=torch.int64), k))
    expect(ValueError, "press spec error", lambda: primekv.score("knorm:nonsense=1", k, k))
    expect(ValueError, "unknown press", lambda: primekv.score("nosuch", k, k))
    expect(ValueError, "snapkv without queries", lambda: primekv.score("snapkv", k, k))
    expect(ValueError, "primekv without W_O", lambda: primekv.score("primekv", k, k))
    expect(ValueError, "odd head_dim", lambda: primekv.score("knorm", k[..., :7], k[..., :7]))
    expect(ValueError, "queries of another head_dim",
           lambda: primekv.score("snapkv", k, k, np.zeros((1, 4, 3, 4), np.float32)))
    expect(ValueError, "heads not a multiple of kv heads",
           lambda: primekv.score("snapkv", k, k, np.zeros((1, 3, 3, 8), np.float32)))
    expect(ValueError, "wrong wo shape",
           lambda: primekv.score("primekv", k, k, wo=np.zeros((16, 5), np.float32)))
    # Integers that ctypes would wrap at 32 bits, and values beyond float32, are refused.
    big = 2**32
    expect(ValueError, "positions shifted by 2**32",
           lambda: primekv.score("knorm", k, k, positions=np.arange(10) + big))
    expect(ValueError, "next_position shifted by 2**32",
           lambda: primekv.score("streamingllm", k, k, next_position=10 + big))
    expect(ValueError, "layer shifted by 2**32", lambda: primekv.score("knorm", k, k, layer=big))
    expect(ValueError, "n_layers shifted by 2**32",
           lambda: primekv.score("knorm", k, k, n_layers=1 + big))
    expect(ValueError, "zero kv heads",
           lambda: primekv.score("knorm", k[:, :0], k[:, :0]))
    expect(ValueError, "a value carrying a second parameter",
           lambda: primekv.score("snapkv", k, k, np.zeros((1, 4, 3, 8), np.float32),
                                 window="4,kernel=999"))
    k64 = k.astype(np.float64)
    k64[0, 0, 0, 0] = 1e300
    expect(ValueError, "float64 beyond float32's range", lambda: primekv.score("knorm", k64, k))
    knan = k.copy()
    knan[0, 1, 3, 2] = np.nan
    expect(ValueError, "a NaN key", lambda: primekv.score("keydiff", knan, k))
    kinf = k.copy()
    kinf[0, 0, 0, 0] = np.inf
    expect(ValueError, "an Inf value", lambda: primekv.score("knorm", k, kinf))
    # A broadcast view of 4G elements (16 GB as float32) is refused before any copy.
    huge = np.broadcast_to(np.float32(1), (1, 1024, 1 << 20, 4))
    t0 = time.monotonic()
    expect(ValueError, "a huge broadcast input", lambda: primekv.score("knorm", huge, huge))
    check(time.monotonic() - t0 < 2, "the huge broadcast input is refused without a copy")
    expect(ValueError, "ctx_size of 2**32 + 100", lambda: model.session(ctx_size=big + 100))
    expect(ValueError, "chunk of 2**32 + 1", lambda: model.session(chunk=big + 1, mode="chunked"))
    expect(ValueError, "threads of 2**32", lambda: model.session(threads=big))
    expect(TypeError, "kv_q8='yes'", lambda: model.session(kv_q8="yes"))
    expect(TypeError, "kv_q8=2", lambda: model.session(kv_q8=2))
    half = primekv.score("knorm", torch.from_numpy(k).half(), k)
    check(half.dtype == np.float32 and half.shape == (1, 2, 10), "a float16 tensor is converted")
    expect(ValueError, "bad press for a session", lambda: model.session(press="nosuch"))
    expect(ValueError, "ratio 1", lambda: model.session(press="primekv", ratio=1.0))
    expect(ValueError, "snapkv cannot compress between chunks",
           lambda: model.session(press="snapkv", ratio=0.5, mode="chunked"))
    s = model.session(threads=1, ctx_size=32)
    expect(primekv.PrimeKVError, "generate before any feed", lambda: s.generate(4))
    expect(ValueError, "token id outside the vocabulary", lambda: s.feed([1, 10**6]))
    expect(ValueError, "negative token id", lambda: s.feed([1, -2]))
    expect(TypeError, "float tokens", lambda: s.feed([1.5, 2.0]))
    expect(ValueError, "2-D tokens", lambda: s.feed([[1, 2]]))
    expect(primekv.PrimeKVError, "past ctx_size", lambda: s.feed([5] * 33))
    expect(ValueError, "negative max_tokens", lambda: s.generate(-1))
    expect(ValueError, "max_tokens of 2**64", lambda: s.generate(2**64))
    expect(ValueError, "top_k of 2**32", lambda: s.generate(2, top_k=2**32))
    expect(ValueError, "an empty save directory", lambda: s.save("", "x"))
    expect(ValueError, "session id with a slash", lambda: s.save(work, "../x"))
    s.close()
    expect(primekv.PrimeKVError, "a closed session", lambda: s.feed([1, 2]))
    s.close()  # twice is harmless
    damaged = os.path.join(work, "damaged.pkvs")
    with open(damaged, "wb") as f:
        f.write(b"PKVSESS1" + bytes(40))
    expect(primekv.PrimeKVError, "a damaged session file",
           lambda: primekv.Session.load(model, damaged))
    expect(primekv.PrimeKVError, "a missing model", lambda: primekv.Model("/nonexistent.gguf"))
    other = primekv.Model(ARGS.model)
    held = other.session()
    expect(primekv.PrimeKVError, "closing a model with an open session", other.close)
    held.feed([1, 2])
    check(len(held.generate(2)) == 2, "the session still works after the refused close")
    held.close()
    other.close()
    expect(primekv.PrimeKVError, "a closed model", lambda: other.tokenize("hi"))
    expect(primekv.PrimeKVError, "a session on a closed model", lambda: other.session())


def case_generate_cap(model, work):
    """generate(2**29) allocates for the free context, not for max_tokens."""
    del work
    import resource
    with model.session(threads=1, ctx_size=64) as s:
        s.feed(model.tokenize("The secret number is 4721. The secret number is"))
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.monotonic()
        out = s.generate(2**29)
        dt = time.monotonic() - t0
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
        print(f"     generate(2**29) on a 64-token context: {len(out)} tokens, {dt:.2f} s, "
              f"peak RSS +{grown_mb:.1f} MiB")
        check(len(out) <= 64 and grown_mb < 100, "generate(2**29) is capped at the free context")


def case_close_race(model, work):
    """close() while another thread is inside a call refuses instead of freeing the session under
    it; two threads calling one session at once get PrimeKVError, never a torn cache."""
    del work
    ids = model.tokenize(DOC * 3)[:1500]
    n_refused = 0
    for _ in range(3):
        s = model.session(threads=1)
        errors = []

        def feed():
            try:
                s.feed_context(ids)
            except Exception as e:  # noqa: BLE001 (recorded and checked below)
                errors.append(e)
        t = threading.Thread(target=feed)
        t.start()
        time.sleep(0.05)
        refused = False
        try:
            s.close()
        except primekv.PrimeKVError as e:
            refused = "in use" in str(e)
        t.join()
        n_refused += refused
        check(not errors, f"the call in flight finished ({errors})")
        if refused:
            check(len(s.tokens) == len(ids), "the session is intact after the refused close")
        s.close()
        expect(primekv.PrimeKVError, "a session closed after the call", lambda: s.feed([1]))
    check(n_refused >= 1, f"close() during a call was refused ({n_refused} of 3 tries caught a call)")
    # Two threads feeding one session: each call succeeds whole or is refused as busy. One
    # thread feeds a long piece (retrying while refused) as the other feeds short ones until the
    # long one is in, so the two overlap and at least one call must have been refused.
    s = model.session(threads=1, ctx_size=2048)
    long_ids = ids[:600]
    counts = {"ok": 0, "busy": 0, "other": [], "long_ok": False}
    lock = threading.Lock()

    def one(feed_ids):
        try:
            s.feed(feed_ids)
            return True
        except primekv.PrimeKVError as e:
            with lock:
                if "in use" in str(e):
                    counts["busy"] += 1
                else:
                    counts["other"].append(str(e))
            return False

    started = threading.Event()  # the short feeds run: the long one starts among them

    def long_feeder():
        started.wait(60)
        for _ in range(10000):
            if one(long_ids):
                counts["long_ok"] = True
                return

    def short_feeder():
        while not counts["long_ok"] and len(counts["other"]) == 0 and counts["ok"] < 300:
            if one([5, 6, 7, 8]):
                with lock:
                    counts["ok"] += 1
            started.set()
            time.sleep(0.0005)  # room between short feeds for the long one to get in
    ts = [threading.Thread(target=long_feeder), threading.Thread(target=short_feeder)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    n = len(s.tokens)
    print(f"     two threads on one session: the long feed in, {counts['ok']} short feeds succeeded, "
          f"{counts['busy']} calls refused as busy, {len(counts['other'])} other errors; {n} tokens")
    check(not counts["other"], f"no torn-cache errors ({counts['other'][:2]})")
    check(counts["long_ok"], "the long feed went in")
    check(counts["busy"] > 0, "the two threads overlapped: some call was refused as busy")
    expected = 4 * counts["ok"] + len(long_ids)
    check(n == expected and s.kv_entries() == n * model.info["n_layers"] *
          model.info["n_kv_heads"], "the cache holds exactly the successful feeds (%d of %d)" % (
              n, expected))
    s.close()


def case_threads(model, work):
    del work
    ids = model.tokenize(DOC * 3)[:1500]
    rounds = 3
    calls, results = [], {}
    done = threading.Event()
    ticks = []

    def ticker():  # pure Python: it can only run while no thread holds the GIL in a call
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    def run(name):
        out = []
        for _ in range(rounds):
            with model.session(press="primekv", ratio=0.5, threads=1) as s:
                t0 = time.monotonic()
                s.feed_context(ids)
                calls.append((t0, time.monotonic()))
                out.append(s.generate(8))
        results[name] = out

    t_serial = time.monotonic()
    run("serial")
    t_serial = time.monotonic() - t_serial
    calls.clear()
    tick = threading.Thread(target=ticker)
    tick.start()
    workers = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    t_both = time.monotonic()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    t_both = time.monotonic() - t_both
    done.set()
    tick.join()
    # Ticks inside the middle 80% of a prefill call: with the GIL held through the call, none.
    inside = sum(1 for x in ticks for (a, b) in calls
                 if a + 0.1 * (b - a) < x < b - 0.1 * (b - a))
    in_calls = sum(b - a for a, b in calls)
    print(f"     {len(calls)} prefills of {len(ids)} tokens, {in_calls:.2f} s in calls; "
          f"{inside} ticks of another Python thread inside them; two threads {t_both:.2f} s "
          f"against {t_serial:.2f} s for one thread's share alone")
    check(inside >= 10, "another Python thread ran during the prefill calls (GIL released)")
    check(results["a"] == results["b"] == results["serial"],
          "both threads produced the tokens of a session on its own")


def case_example(model, work):
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python"))
    from primekv_press import PrimeKVPress
    rng = np.random.default_rng(3)
    layer = random_layer(rng, n=29, hkv=2, heads=4, d=16, d_model=64, w=4)
    layer["positions"] = np.arange(29, dtype=np.int32)
    layer["next_position"] = 29
    layer["meta"].update(next_position=29, layer=0, n_layers=1, rope_base=10000.0,
                         rope_half=True)
    folder = os.path.join(work, "example")
    write_layer(layer, folder)
    for f in ("window_queries.f32", "window_positions.i32", "context_queries.f32",
              "context_positions.i32", "future_queries.f32"):
        os.remove(os.path.join(folder, f))
    subprocess.run([ARGS.primekv, "press-scores", folder, "--press", "primekv"], check=True,
                   capture_output=True, timeout=120)
    ref = np.fromfile(os.path.join(folder, "scores.f32"), dtype=np.float32).reshape(1, 2, 29)

    class Config:  # the fields kvpress's presses read from a Hugging Face config
        rope_theta = 10000.0
        num_attention_heads = 4
        num_key_value_heads = 2
        head_dim = 16

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = Config()
            self.layer_idx = 0
            self.o_proj = torch.nn.Linear(64, 64, bias=False)
            with torch.no_grad():
                self.o_proj.weight.copy_(torch.from_numpy(layer["wo"]))

    module = Attention()
    keys = torch.from_numpy(layer["keys"])
    values = torch.from_numpy(layer["values"])
    hidden = torch.zeros((1, 29, 64))
    press = PrimeKVPress(compression_ratio=0.5)
    scores = press.score(module, hidden, keys, values, None, {})
    check(isinstance(scores, torch.Tensor) and tuple(scores.shape) == (1, 2, 29),
          f"PrimeKVPress.score gives a tensor of kvpress's shape {tuple(scores.shape)}")
    check(np.array_equal(scores.numpy().view(np.uint32), ref.view(np.uint32)),
          "PrimeKVPress.score equals press-scores bit for bit")
    k2, v2 = press.compress(module, hidden, keys, values, None, {})
    keep = torch.from_numpy(ref).topk(14, dim=-1).indices
    check(tuple(k2.shape) == (1, 2, 14, 16), f"compress keeps 14 of 29 ({tuple(k2.shape)})")
    check(torch.equal(k2, keys.gather(2, keep[..., None].expand(-1, -1, -1, 16))),
          "compress keeps the top-scored keys")
    check(torch.equal(v2, values.gather(2, keep[..., None].expand(-1, -1, -1, 16))),
          "and their values")
    del model


def case_longrope(model, work):
    """A random Phi-3 model with LongRoPE factors (original context 64, trained 256): a session
    of ctx_size N runs the factors `primekv generate -c N` runs, short at or below 64 and long
    above, and the two give other tokens."""
    del work
    prompt = "the quick brown fox jumps over the lazy dog " * 3
    ids = model.tokenize(prompt)
    check(len(ids) + 8 <= 64, f"the prompt ({len(ids)} tokens) and 8 more fit 64 positions")
    tokens = {}
    for ctx in (64, 65, 256):
        ref = cli_generate(prompt, 8, "none", 0.0, extra=("-c", str(ctx)))
        with model.session(threads=1, ctx_size=ctx) as s:
            s.feed_context(ids)
            got = s.generate(8)
        check(ids == ref["prompt_tokens"], f"ctx {ctx}: tokenize equals generate's prompt")
        check(got == ref["tokens"], f"ctx {ctx}: session tokens {got} equal `primekv generate "
              f"-c {ctx}`'s {ref['tokens']}")
        tokens[ctx] = got
    check(tokens[64] != tokens[65] and tokens[65] == tokens[256],
          "the short factors (ctx 64) and the long ones (65, 256) give other tokens")
    with model.session(threads=1) as s:  # ctx_size 0: the trained context, long factors
        s.feed_context(ids)
        check(s.generate(8) == tokens[256], "ctx_size 0 runs the trained context's factors")


def case_strings(model, work):
    """Strings for C holding a NUL are refused (C would read them cut at the NUL), and the
    C API's messages name its own arguments, not the command line's flags."""
    rng = np.random.default_rng(3)
    k = rng.standard_normal((1, 2, 10, 8), dtype=np.float32)
    expect(ValueError, "press with a NUL", lambda: model.session(press="knorm\0junk", ratio=0.5))
    expect(ValueError, "mode with a NUL", lambda: model.session(mode="context\0x"))
    expect(ValueError, "score press with a NUL", lambda: primekv.score("knorm\0junk", k, k))
    expect(ValueError, "score parameter with a NUL",
           lambda: primekv.score("snapkv", k, k, np.zeros((1, 4, 3, 8), np.float32),
                                 window="2\0"))
    expect(ValueError, "model path with a NUL", lambda: primekv.Model(ARGS.model + "\0x"))
    expect(ValueError, "session file path with a NUL",
           lambda: primekv.Session.load(model, os.path.join(work, "a.pkvs\0b")))
    with model.session(threads=1, ctx_size=32) as s:
        s.feed([1, 2, 3])
        expect(ValueError, "session id with a NUL", lambda: s.save(work, "id\0x"))
        expect(ValueError, "save directory with a NUL", lambda: s.save(work + "\0x", "id"))
        check(not os.listdir(work), "nothing was saved")
    for ctx in (model.info["context_length"] + 1, 2**24 + 1):
        try:
            model.session(ctx_size=ctx)
            check(False, f"ctx_size {ctx}: refused")
        except primekv.PrimeKVError as e:
            check("--" not in str(e) and "ctx_size" in str(e),
                  f"ctx_size {ctx}: the message names ctx_size, no flag: {e}")


def case_auto_profile(model, work):
    """profile=auto: the profile beside the model file, nested below 0.9, as the same press
    naming that file keeps; a copy of the model with no profile beside it and an empty cache is
    refused with the command that makes one, and a profile of another model beside it too."""
    import shutil

    def refused(fn, needle):
        try:
            fn()
        except primekv.PrimeKVError as e:
            check(needle in str(e), f"refused, naming {needle!r}: {e}")
            return
        check(False, f"not refused ({needle!r})")

    ids = model.tokenize(DOC)
    beside = os.path.splitext(ARGS.model)[0] + ".budget.json"
    auto = model.session(press="primekv:profile=auto", ratio=0.75, threads=1)
    auto.feed_context(ids)
    named = model.session(press="primekv:profile=" + beside + ",nest=0.9", ratio=0.75, threads=1)
    named.feed_context(ids)
    info = model.info
    uniform = info["n_layers"] * info["n_kv_heads"] * max(1, int(len(ids) * 0.25))
    check(auto.kv_entries() == named.kv_entries() != uniform,
          f"auto keeps {auto.kv_entries()}, the named profile {named.kv_entries()}, "
          f"uniform {uniform}")
    copy = os.path.join(work, "copy.gguf")
    shutil.copyfile(ARGS.model, copy)
    os.environ["XDG_CACHE_HOME"] = os.path.join(work, "cache")
    other = primekv.Model(copy)
    try:
        refused(lambda: other.session(press="primekv:profile=auto", ratio=0.5),
                "primekv calibrate -m " + copy)
        # Another model's profile (retrieval-2's: 8 layers x 2 KV heads) beside the copy.
        shutil.copyfile(os.path.join(os.path.dirname(ARGS.model), "primekv-retrieval-2.budget.json"),
                        os.path.join(work, "copy.budget.json"))
        refused(lambda: other.session(press="primekv:profile=auto", ratio=0.5),
                "it is for 8 layers x 2 KV heads")
    finally:
        other.close()


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--primekv", required=True)
    ap.add_argument("--model", required=True)
    cases = {"generate": case_generate, "score": case_score, "sessions": case_sessions,
             "serve": case_serve, "errors": case_errors, "threads": case_threads,
             "example": case_example, "close_race": case_close_race,
             "generate_cap": case_generate_cap, "longrope": case_longrope,
             "strings": case_strings, "auto_profile": case_auto_profile}
    ap.add_argument("case", choices=sorted(cases))
    ARGS = ap.parse_args()
    model = primekv.Model(ARGS.model)
    try:
        return server_test.run_checks("primekv-capi-test-",
                                      lambda work: cases[ARGS.case](model, work))
    finally:
        with suppress(primekv.PrimeKVError):  # a failed case may leave a session open
            model.close()

if __name__ == "__main__":
    sys.exit(main())
