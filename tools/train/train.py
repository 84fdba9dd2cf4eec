#!/usr/bin/python3
"""Train the PrimeKV reference retrieval model from scratch within a wall-clock budget.

One command (CPU, Debian python3-torch 1.13):
    /usr/bin/python3 tools/train/train.py --minutes 85 --out models/primekv-retrieval.gguf

Writes tools/train/runs/<name>/{train.log, summary.json, tokenizer.json, export/}, keeps
checkpoints in tools/train/ckpt/<name>/ (resumed automatically when present), and at the end
exports a manifest that `primekv convert` turns into the GGUF file.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.path.insert(0, _HERE)
    import runtime_env

    runtime_env.reexec()

import time  # noqa: E402

PROCESS_START = time.time()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, _HERE)
import data  # noqa: E402
import export  # noqa: E402
from model import Llama, ModelConfig, init_induction_circuit  # noqa: E402
from tokenizer import Tokenizer, train_bpe  # noqa: E402

REPO = os.path.dirname(os.path.dirname(_HERE))


# ---------------------------------------------------------------------------- schedule
# (start fraction of the budget, sequence length, rows per batch, difficulty range).
# Short, easy documents first; full-length documents last.  Later stages also draw
# shorter rows now and then so that short-range retrieval is not forgotten.
def stages(ctx):
    s = [
        (0.00, 128, 16, (0.0, 0.3)),
        (0.15, 256, 8, (0.1, 0.6)),
        (0.35, 512, 4, (0.3, 0.8)),
        (0.55, 1024, 2, (0.5, 1.0)),
        (0.78, 2048, 1, (0.6, 1.0)),
    ]
    out = [x for x in s if x[1] <= ctx]
    if out[-1][1] < ctx:
        out.append((0.78, ctx, max(1, 2048 // ctx), (0.6, 1.0)))
    return out


def pick_stage(stg, frac, rng):
    cur = 0
    for i, s in enumerate(stg):
        if frac >= s[0]:
            cur = i
    # 25% of the steps after the first stage revisit an earlier length.
    if cur > 0 and rng.random() < 0.25:
        cur = rng.randrange(cur)
        return stg[cur], True
    return stg[cur], False


def lr_at(step, frac, args):
    warm = min(1.0, (step + 1) / args.warmup)
    # cosine from peak to 10% over the budget
    return args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


# ---------------------------------------------------------------------------- batches
def make_batch(tok, rng, length, rows, difficulty, ctx_sample):
    ids, tw = [], []
    for _ in range(rows):
        d = data.make_train_doc(tok, rng, length, rng.uniform(*difficulty))
        ids.append(d.ids)
        tw.append(d.weights)
    x = torch.tensor(ids, dtype=torch.long)
    w = torch.tensor(tw, dtype=torch.float32)[:, 1:]
    # Loss positions: every answer token, and a random sample of the (lightly weighted)
    # context tokens re-weighted by the sampling rate, so the output layer runs on few rows.
    ans = w >= 0.5
    ctx = (w > 0) & ~ans & (torch.rand(w.shape) < ctx_sample)
    sel = ans | ctx
    w = torch.where(ctx, w / ctx_sample, w) * sel
    return x[:, :-1], x[:, 1:], sel, w


def weighted_loss(model, inp, tgt, sel, w):
    h = model.hidden(inp)  # (B, T, d)
    hs = h[sel]
    logits = F.linear(hs, model.output_weight().to(hs.dtype)).float()
    ce = F.cross_entropy(logits, tgt[sel], reduction="none")
    ws = w[sel]
    return (ce * ws).sum() / ws.sum().clamp_min(1e-6), ce, ws


# ---------------------------------------------------------------------------- evaluation
def make_eval_set(tok, lengths, n_per_family, seed):
    rng = random.Random(seed)
    out = {}
    for L in lengths:
        for fam in data.EVAL_FAMILIES:
            docs = [data.make_eval_doc(tok, rng, fam, L) for _ in range(n_per_family)]
            docs = [d for d in docs if d is not None]
            if docs:
                out[(L, fam)] = docs
    return out


@torch.no_grad()
def teacher_forced_accuracy(model, docs, amp=True, batch=4):
    """Exact-match accuracy of greedy decoding with the full cache: all answer tokens are
    the argmax given the gold prefix (equivalent to greedy decode for exact match)."""
    model.eval()
    ok = tot = tok_ok = tok_tot = 0
    for i in range(0, len(docs), batch):
        chunk = docs[i:i + batch]
        x = torch.tensor([d.ids[:-1] for d in chunk], dtype=torch.long)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            logits = model(x)
        pred = logits.argmax(-1)
        for b, d in enumerate(chunk):
            for a in d.answers:
                s, e = a["start"], a["end"]
                tgt = torch.tensor(d.ids[s:e])
                hit = pred[b, s - 1:e - 1] == tgt
                ok += int(hit.all())
                tot += 1
                tok_ok += int(hit.sum())
                tok_tot += len(tgt)
    model.train()
    return ok / max(1, tot), tok_ok / max(1, tok_tot)


# ---------------------------------------------------------------------------- threads
class ThreadTuner:
    """On a shared machine two intra-op threads can be several times slower than one (each
    parallel op waits for a descheduled thread), and on an idle one they are ~1.7x faster.
    Time a fixed forward/backward with 1 and 2 threads every few minutes and use the faster."""

    def __init__(self, model, setting, every_s=120.0):
        self.model, self.setting, self.every_s = model, setting, every_s
        self.last = -1e9
        self.current = 2 if setting == "auto" else int(setting)
        torch.set_num_threads(self.current)
        g = torch.Generator().manual_seed(0)
        self.probe_ids = torch.randint(0, model.cfg.vocab_size, (4, 256), generator=g)

    def _time(self, n):
        torch.set_num_threads(n)
        best = 1e9
        for _ in range(2):
            t0 = time.time()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.model.hidden(self.probe_ids)
            h.float().square().mean().backward()
            best = min(best, time.time() - t0)
        return best

    def maybe_probe(self, log):
        if self.setting != "auto" or time.time() - self.last < self.every_s:
            return
        t1, t2 = self._time(1), self._time(2)
        new = 2 if t2 < 0.8 * t1 else 1  # two threads only when clearly faster
        if new != self.current:
            log("threads: %d -> %d (probe %.2fs with 1, %.2fs with 2)" % (self.current, new, t1, t2))
        self.current = new
        torch.set_num_threads(new)
        self.last = time.time()


# ---------------------------------------------------------------------------- main
def log_line(f, msg):
    print(msg, flush=True)
    f.write(msg + "\n")
    f.flush()


def save_ckpt(path, model, opt, state):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state}, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=85.0,
                    help="wall-clock budget of the whole command (setup, training, final eval, export)")
    ap.add_argument("--reserve", type=float, default=2.0, help="minutes kept for the final eval and export")
    ap.add_argument("--out", default="models/primekv-retrieval.gguf")
    ap.add_argument("--name", default="primekv-retrieval")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--rope-base", type=float, default=1e6,
                    help="large so that the slowest RoPE pairs barely rotate over the context (content matching)")
    ap.add_argument("--no-induction-init", action="store_true", help="plain random initialisation")
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--ctx-sample", type=float, default=0.15, help="fraction of context tokens in the loss")
    ap.add_argument("--eval-every", type=float, default=6.0, help="minutes between evaluations")
    ap.add_argument("--eval-n", type=int, default=8, help="documents per family per length in training evals")
    ap.add_argument("--ckpt-every", type=float, default=5.0, help="minutes between checkpoints")
    ap.add_argument("--threads", default="auto", help="1, 2 or auto (probe which is faster now)")
    ap.add_argument("--primekv", default=os.path.join(REPO, "build/release/src/cli/primekv"))
    ap.add_argument("--gguf-type", default="F32")
    ap.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    ap.add_argument("--no-export", action="store_true")
    args = ap.parse_args()

    run_dir = os.path.join(_HERE, "runs", args.name)
    ckpt_dir = os.path.join(_HERE, "ckpt", args.name)
    os.makedirs(run_dir, exist_ok=True)
    os.makedirs(ckpt_dir, exist_ok=True)
    ckpt_path = os.path.join(ckpt_dir, "last.pt")
    logf = open(os.path.join(run_dir, "train.log"), "a")
    log_line(logf, "=== start %s args %s" % (time.strftime("%Y-%m-%d %H:%M:%S"), json.dumps(vars(args))))

    # Tokenizer: trained on the generator's own text, deterministic from the seed.
    tok_path = os.path.join(run_dir, "tokenizer.json")
    resume = os.path.exists(ckpt_path) and not args.fresh
    if resume and os.path.exists(tok_path):
        tok = Tokenizer.load(tok_path)
    else:
        t0 = time.time()
        tok = train_bpe(data.tokenizer_corpus(args.seed), args.vocab)
        tok.save(tok_path)
        log_line(logf, "tokenizer: %d pieces in %.1fs" % (tok.vocab_size, time.time() - t0))

    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=args.d_model, n_layers=args.layers,
                      n_heads=args.heads, n_kv_heads=args.kv_heads, ffn_dim=args.ffn,
                      context_length=args.ctx, rope_base=args.rope_base, tied_output=args.tied)
    torch.manual_seed(args.seed)
    model = Llama(cfg)
    if not args.no_induction_init:
        init_induction_circuit(model, seed=args.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    state = {"step": 0, "tokens": 0, "answer_tokens": 0, "elapsed": 0.0, "evals": [],
             "rng": None, "config": dataclasses.asdict(cfg)}
    if resume:
        ck = torch.load(ckpt_path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
        log_line(logf, "resumed from %s at step %d, %.1f min" % (ckpt_path, state["step"], state["elapsed"] / 60))
    log_line(logf, "model: %s, %.2fM parameters" % (json.dumps(dataclasses.asdict(cfg)), model.num_params() / 1e6))

    eval_lengths = sorted({min(512, args.ctx), min(1024, args.ctx), args.ctx})
    eval_set = make_eval_set(tok, eval_lengths, args.eval_n, seed=10**9 + args.seed)
    stg = stages(args.ctx)
    rng = random.Random(args.seed)
    if state["rng"] is not None:
        rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"])

    if "budget" not in state:
        state["budget"] = args.minutes * 60.0 - (time.time() - PROCESS_START) - args.reserve * 60.0
    budget = state["budget"]
    log_line(logf, "training-loop budget %.1f min" % (budget / 60))
    t_start = time.time() - state["elapsed"]
    last_eval = last_ckpt = time.time()
    ema = None
    model.train()
    tuner = ThreadTuner(model, args.threads)

    def do_eval(tag):
        t0 = time.time()
        res = {}
        for (L, fam), docs in eval_set.items():
            if L > cur_len_limit():
                continue
            em, ta = teacher_forced_accuracy(model, docs)
            res["%s@%d" % (fam, L)] = round(em, 3)
            res["tok:%s@%d" % (fam, L)] = round(ta, 3)
        state["evals"].append({"step": state["step"], "tokens": state["tokens"], "minutes": round(state["elapsed"] / 60, 1),
                               "acc": res})
        log_line(logf, "eval[%s] step %d (%.0fs) exact: %s" % (tag, state["step"], time.time() - t0, " ".join(
            "%s=%.2f" % kv for kv in res.items() if not kv[0].startswith("tok:"))))
        log_line(logf, "eval[%s] step %d answer-token accuracy: %s" % (tag, state["step"], " ".join(
            "%s=%.2f" % (k[4:], v) for k, v in res.items() if k.startswith("tok:"))))
        return res

    def cur_len_limit():
        frac = state["elapsed"] / budget
        lim = 512
        for s in stg:
            if frac >= s[0]:
                lim = max(lim, s[1])
        return lim

    while True:
        state["elapsed"] = time.time() - t_start
        frac = state["elapsed"] / budget
        if frac >= 1.0:
            break
        tuner.maybe_probe(lambda m: log_line(logf, m))
        (s0, length, rows, diff), revisit = pick_stage(stg, frac, rng)
        lr = lr_at(state["step"], frac, args)
        for g in opt.param_groups:
            g["lr"] = lr
        inp, tgt, sel, w = make_batch(tok, rng, length, rows, diff, args.ctx_sample)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, ce, ws = weighted_loss(model, inp, tgt, sel, w)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        state["tokens"] += inp.numel()
        ans_mask = ws >= 0.5
        state["answer_tokens"] += int(ans_mask.sum())
        ans_loss = float(ce[ans_mask].mean()) if ans_mask.any() else float("nan")
        ema = ans_loss if ema is None else 0.98 * ema + 0.02 * ans_loss
        if state["step"] % 20 == 0 or state["step"] <= 3:
            el = time.time() - t_start
            log_line(logf, "step %d  %.1f/%.0f min  tok %.2fM  len %d  lr %.2e  loss %.3f  ans %.3f (ema %.3f)  gn %.2f  %.0f tok/s" % (
                state["step"], el / 60, budget / 60, state["tokens"] / 1e6, length, lr, float(loss), ans_loss, ema,
                float(gn), state["tokens"] / max(1.0, el)) + "  thr %d" % tuner.current)
        now = time.time()
        if now - last_eval > args.eval_every * 60:
            state["elapsed"] = now - t_start
            do_eval("train")
            last_eval = time.time()
        if now - last_ckpt > args.ckpt_every * 60:
            state["elapsed"] = time.time() - t_start
            state["rng"] = rng.getstate()
            state["torch_rng"] = torch.get_rng_state()
            save_ckpt(ckpt_path, model, opt, state)
            last_ckpt = time.time()

    state["elapsed"] = min(state["elapsed"], budget)
    state["rng"] = rng.getstate()
    state["torch_rng"] = torch.get_rng_state()
    save_ckpt(ckpt_path, model, opt, state)
    final = do_eval("final")
    summary = {
        "name": args.name, "seed": args.seed, "args": vars(args), "config": dataclasses.asdict(cfg),
        "parameters": model.num_params(), "steps": state["step"], "tokens_seen": state["tokens"],
        "answer_tokens_seen": state["answer_tokens"], "wall_minutes": round(state["elapsed"] / 60, 1),
        "final_answer_loss_ema": ema, "final_teacher_forced_accuracy": final, "evals": state["evals"],
        "checkpoint": os.path.relpath(ckpt_path, REPO),
    }
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    log_line(logf, "summary written to %s" % os.path.join(run_dir, "summary.json"))
    if not args.no_export:
        export.export(model, tok, args.name, os.path.join(run_dir, "export"), os.path.join(REPO, args.out) if not os.path.isabs(args.out) else args.out,
                      args.primekv, args.gguf_type, log=lambda m: log_line(logf, m))


if __name__ == "__main__":
    main()
