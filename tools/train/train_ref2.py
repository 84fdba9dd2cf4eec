#!/usr/bin/env python3
"""Train the second PrimeKV reference model (models/primekv-retrieval-2.md) within a wall-clock
budget, on a GPU (`--device cuda`) or, slowly, on the CPU.

    python3 tools/train/train_ref2.py --device cuda --minutes 8 --out-dir OUT

Shape: 8 layers, d_model 384, 4 query heads / 2 KV heads of head_dim 128 (GQA), SwiGLU 1024,
context 2048, RoPE base 1e6, the first model's tokenizer (read from its GGUF or a
tokenizer.json), so the held-out task files and the engine's tokenizer handling stay the same.
Data: tools/train/data.py's v2 generator (make_train_doc_v2), drawn by worker processes.

OUT gets train.log, summary.json, last.pt (model, optimizer and schedule state, written every
--ckpt-every minutes and at the end) and, with --weights-out, the final weights alone (float32,
schedule state, no optimizer) for shipping back from a machine whose output is size-limited.
`--resume PATH` continues from either: with the optimizer state when present, otherwise with
fresh Adam moments and a new warm-up. `--resume-gguf PATH` continues from the exported model
itself (its F16/F32 tensors), with fresh optimizer moments.
"""

import argparse
import collections
import dataclasses
import json
import math
import multiprocessing as mp
import os
import random
import sys
import time

PROCESS_START = time.time()
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import data  # noqa: E402
from model import Llama, ModelConfig, init_induction_circuit  # noqa: E402
from tokenizer import FIRST_PIECE, Tokenizer, load_tokenizer  # noqa: E402


# ---------------------------------------------------------------------------- tokenizer
# ---------------------------------------------------------------------------- schedule
# (start fraction of the budget, sequence length, difficulty range); rows = batch_tokens / length.
STAGES = [
    (0.00, 128, (0.0, 0.3)),
    (0.10, 256, (0.1, 0.6)),
    (0.25, 512, (0.3, 0.8)),
    (0.45, 1024, (0.5, 1.0)),
    (0.65, 2048, (0.6, 1.0)),
]


def pick_stage(frac, rng):
    cur = 0
    for i, s in enumerate(STAGES):
        if frac >= s[0]:
            cur = i
    if cur > 0 and rng.random() < 0.25:  # revisit a shorter length now and then
        cur = rng.randrange(cur)
    return STAGES[cur]


def lr_at(step, frac, args, warm_from):
    warm = min(1.0, (step - warm_from + 1) / args.warmup)
    return args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


# ---------------------------------------------------------------------------- data workers
_TOK = None


def _worker_init(tok_json):
    global _TOK
    _TOK = Tokenizer(tok_json["pieces"], tok_json["scores"])


def batch_of(make_doc, job):
    """job = (seed, length, rows, lo, hi, value_first) -> (ids (rows, length+1) int32, weights
    float32), each row a document of make_doc(tok, rng, length, difficulty, value_first=...)."""
    seed, length, rows, lo, hi, value_first = job
    rng = random.Random(seed)
    ids = np.empty((rows, length + 1), dtype=np.int32)
    w = np.empty((rows, length + 1), dtype=np.float32)
    for r in range(rows):
        d = make_doc(_TOK, rng, length, rng.uniform(lo, hi), value_first=value_first)
        ids[r] = d.ids
        w[r] = d.weights
    return ids, w


def make_batch(job):
    return batch_of(data.make_train_doc_v2, job)


class Feeder:
    """Keeps `depth` batches in flight in a pool of worker processes (0 workers: inline).
    `make_batch` must be a module-level function (workers receive it by name)."""

    def __init__(self, tok, workers, depth, make_batch=make_batch):
        self.make_batch = make_batch
        self.pool = None
        if workers > 0:
            self.pool = mp.get_context("fork").Pool(workers, _worker_init, (tok.to_json(),))
        else:
            _worker_init(tok.to_json())
        self.depth = depth if workers > 0 else 0
        self.q = collections.deque()

    def get(self, next_job):
        if self.pool is None:
            return self.make_batch(next_job())
        while len(self.q) < self.depth:
            self.q.append(self.pool.apply_async(self.make_batch, (next_job(),)))
        r = self.q.popleft().get()
        self.q.append(self.pool.apply_async(self.make_batch, (next_job(),)))
        return r

    def close(self):
        if self.pool is not None:
            self.pool.terminate()


# ---------------------------------------------------------------------------- evaluation
def near_key_task(rng, n_near=5):
    """Five facts whose adjective-noun keys share a word with the asked one (the held-out near_key
    family's shape, drawn here from the training-time evaluation seed)."""
    t = data.Task()
    keys = data.asked_and_near_keys(rng, n_near)
    asked = keys[0]
    vals = data.unique(rng, lambda: data.make_value(rng, "number"), len(keys))
    label = data.label_for(rng, "number")
    tmpl = rng.choice(data.FACT_TEMPLATES)
    t.items = [data.fill(tmpl, L=label, K=k, V=v) for k, v in zip(keys, vals)]
    t.qblock.extend(data._qa(rng, label, asked, vals[0], "near_key", tmpl=tmpl, echo=0.35))
    return t


EVAL_FAMILIES = ["single", "multikey", "near_key", "drift", "multiturn", "dense", "vt"]


def eval_doc(tok, rng, fam, length):
    for _ in range(10):
        if fam == "near_key":
            d = data.render(tok, rng, near_key_task(rng), length, 0.0, "repeat")
        elif fam == "drift":
            t = data.task_kv(rng, 12, 6, "drift", key_kind="adjnoun", value_kind="number")
            d = data.render(tok, rng, t, length, 0.0, "fresh")
        else:
            d = data._make_eval_doc(tok, rng, fam, length)
        if d is not None:
            return d
    return None


def make_eval_set(tok, lengths, n, seed):
    rng = random.Random(seed)
    out = {}
    for L in lengths:
        for fam in EVAL_FAMILIES:
            docs = [eval_doc(tok, rng, fam, L) for _ in range(n)]
            out[(L, fam)] = [d for d in docs if d is not None]
    return out


@torch.no_grad()
def teacher_forced_accuracy(model, docs, device, batch, positions=None):
    """Share of answers whose every token is the argmax given the gold prefix (greedy exact
    match with the full cache). positions: per document, position ids instead of 0..T-1."""
    model.eval()
    ok = tot = 0
    for i in range(0, len(docs), batch):
        chunk = docs[i:i + batch]
        x = torch.tensor([d.ids[:-1] for d in chunk], dtype=torch.long, device=device)
        p = None if positions is None else torch.tensor(positions[i:i + batch], dtype=torch.long)
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
            h = model.hidden(x, p)
            pred = F.linear(h, model.output_weight().to(h.dtype)).argmax(-1).cpu()
        for b, d in enumerate(chunk):
            for a in d.answers:
                s, e = a["start"], a["end"]
                ok += int((pred[b, s - 1:e - 1] == torch.tensor(d.ids[s:e])).all())
                tot += 1
    model.train()
    return ok / max(1, tot)


# ---------------------------------------------------------------------------- checkpoints
def save(path, model, opt, state):
    tmp = path + ".tmp"
    obj = {"model": {k: v.detach().float().cpu() for k, v in model.state_dict().items()}, "state": state}
    if opt is not None:
        obj["opt"] = opt.state_dict()
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_q8(path, src):
    """A weights file's tensors as int8 rows with one float scale per row (1-D tensors kept
    as float32): a quarter of the size, for carrying a checkpoint where size is limited.
    Resuming from it continues from weights rounded to 8 bits, with fresh optimizer moments."""
    ck = torch.load(src, map_location="cpu")
    q8 = {}
    for k, v in ck["model"].items():
        if v.dim() == 2:
            sc = v.abs().amax(1, keepdim=True).clamp_min(1e-12) / 127.0
            q8[k] = ((v / sc).round().to(torch.int8), sc)
        else:
            q8[k] = (v.clone(), torch.ones(()))
    torch.save({"model_q8": q8, "state": ck["state"]}, path)


def load_gguf_weights(model, path):
    """Copy an exported model's tensors (F32/F16, as tools/train/export.py names them) into model."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(_HERE)), "tests", "reference"))
    from gguf_read import GGUFFile
    import export
    f = GGUFFile(path)
    names = dict((n, t) for n, t in export.tensor_list(model))
    params = {"token_embd.weight": model.tok_emb.weight, "output_norm.weight": model.norm.weight}
    if model.output is not None:
        params["output.weight"] = model.output.weight
    for i, b in enumerate(model.blocks):
        p = "blk.%d." % i
        for g, t in (("attn_norm", b.attn_norm), ("attn_q", b.wq), ("attn_k", b.wk), ("attn_v", b.wv),
                     ("attn_output", b.wo), ("ffn_norm", b.ffn_norm), ("ffn_gate", b.w_gate),
                     ("ffn_up", b.w_up), ("ffn_down", b.w_down)):
            params[p + g + ".weight"] = t.weight
    with torch.no_grad():
        for n, prm in params.items():
            a = np.asarray(f.tensor(n), dtype=np.float32).reshape(names[n].shape)
            prm.copy_(torch.from_numpy(a))


# ---------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--minutes", type=float, default=8.0, help="wall-clock budget of the whole command")
    ap.add_argument("--reserve", type=float, default=0.6, help="minutes kept for the final eval and save")
    ap.add_argument("--budget-minutes", type=float, default=None,
                    help="training-loop budget (default: from --minutes); on resume, a new total")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--weights-out", default=None, help="also write the final weights alone here")
    ap.add_argument("--tokenizer", default=os.path.join(os.path.dirname(os.path.dirname(_HERE)),
                                                        "models", "primekv-retrieval.gguf"))
    ap.add_argument("--name", default="primekv-retrieval-2")
    ap.add_argument("--seed", type=int, default=2025)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--rope-base", type=float, default=1e6)
    ap.add_argument("--no-induction-init", action="store_true")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--batch-tokens", type=int, default=16384, help="tokens per step (rows = this / length)")
    ap.add_argument("--ctx-sample", type=float, default=0.15)
    ap.add_argument("--workers", type=int, default=max(0, min(12, (os.cpu_count() or 1) - 2)))
    ap.add_argument("--ckpt-every", type=float, default=2.0, help="minutes between checkpoints")
    ap.add_argument("--eval-every", type=float, default=2.0, help="minutes between evaluations")
    ap.add_argument("--eval-n", type=int, default=16)
    ap.add_argument("--value-first", type=float, default=0.0,
                    help="share of key-value documents whose facts state the value first (data.py)")
    ap.add_argument("--resume", default=None, help="a last.pt or weights file of this script")
    ap.add_argument("--resume-gguf", default=None, help="continue from an exported GGUF")
    ap.add_argument("--resume-summary", default=None,
                    help="with --resume-gguf: the schedule state (step, tokens, minutes, budget) from a "
                         "summary.json or models/primekv-retrieval-2.training.json (its last stage)")
    ap.add_argument("--q8-copy", nargs=2, metavar=("SRC", "DST"), default=None,
                    help="only write DST, the int8 carry copy of the weights file SRC, and exit")
    args = ap.parse_args()
    if args.q8_copy:
        save_q8(*args.q8_copy)
        return

    os.makedirs(args.out_dir, exist_ok=True)
    logf = open(os.path.join(args.out_dir, "train.log"), "a")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    device = torch.device(args.device)
    log("=== start %s args %s" % (time.strftime("%Y-%m-%d %H:%M:%S"), json.dumps(vars(args))))
    log("torch %s, device %s%s" % (torch.__version__, device,
                                   (" (%s)" % torch.cuda.get_device_name()) if device.type == "cuda" else ""))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    tok = load_tokenizer(args.tokenizer)
    # Workers fork before CUDA is initialised; they only generate text and token ids.
    feeder = Feeder(tok, args.workers, depth=2 * max(1, args.workers))
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
                      n_kv_heads=args.kv_heads, head_dim=args.head_dim, ffn_dim=args.ffn,
                      context_length=args.ctx, rope_base=args.rope_base)
    torch.manual_seed(args.seed)
    model = Llama(cfg)
    if not args.no_induction_init:
        init_induction_circuit(model, seed=args.seed)
    state = {"step": 0, "tokens": 0, "answer_tokens": 0, "elapsed": 0.0, "evals": [], "warm_from": 0,
             "config": dataclasses.asdict(cfg), "segments": []}
    ck = None
    if args.resume:
        try:
            ck = torch.load(args.resume, map_location="cpu", weights_only=False)
        except TypeError:  # PyTorch before 1.13 has no weights_only
            ck = torch.load(args.resume, map_location="cpu")
        if "model_q8" in ck:  # int8 rows + scales (a compact copy for carrying to another machine)
            ck["model"] = {k: q.float() * sc for k, (q, sc) in ck["model_q8"].items()}
        model.load_state_dict(ck["model"])
        state = ck["state"]
        log("resumed weights from %s at step %d, %.2f min" % (args.resume, state["step"], state["elapsed"] / 60))
    elif args.resume_gguf:
        load_gguf_weights(model, args.resume_gguf)
        if args.resume_summary:
            with open(args.resume_summary) as f:
                summ = json.load(f)
            if "steps" not in summ:  # the model's training.json: one summary per stage
                summ = summ[sorted(summ)[-1]]
            state.update(step=summ["steps"], tokens=summ["tokens_seen"], elapsed=summ["train_minutes"] * 60.0,
                         budget=summ["budget_minutes"] * 60.0, evals=summ["evals"],
                         segments=summ.get("segments", []))
        log("resumed weights from %s at step %d (optimizer moments start afresh)" % (args.resume_gguf, state["step"]))
    model.to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    kw = {"fused": True} if device.type == "cuda" else {"foreach": True}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **kw)
    if ck is not None and "opt" in ck:
        opt.load_state_dict(ck["opt"])
        log("optimizer state restored")
    elif ck is not None or args.resume_gguf:
        state["warm_from"] = state["step"]  # fresh moments: warm up again
    ck = None
    log("model: %s, %.2fM parameters" % (json.dumps(dataclasses.asdict(cfg)), model.num_params() / 1e6))

    if args.budget_minutes is not None:
        state["budget"] = args.budget_minutes * 60.0
    elif "budget" not in state:
        state["budget"] = args.minutes * 60.0 - (time.time() - PROCESS_START) - args.reserve * 60.0
    budget = state["budget"]
    deadline = PROCESS_START + args.minutes * 60.0 - args.reserve * 60.0  # this process's own limit
    log("training-loop budget %.2f min (this run stops at %.2f min of its own)" % (
        budget / 60, (deadline - PROCESS_START) / 60))

    eval_set = make_eval_set(tok, sorted({min(512, args.ctx), args.ctx}), args.eval_n, seed=10**9 + args.seed)
    sched_rng = random.Random("%d-%d" % (args.seed, state["step"]))
    job_seed = [(args.seed * 1000003 + state["step"] * 7919) & 0xFFFFFFFF]
    t_start = time.time() - state["elapsed"]
    state["segments"].append({"start_step": state["step"], "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                              "device": str(device)})

    def next_job():
        frac = (time.time() - t_start) / budget
        s0, length, diff = pick_stage(frac, sched_rng)
        job_seed[0] += 1
        return (job_seed[0], length, max(1, args.batch_tokens // length), diff[0], diff[1], args.value_first)


    def do_eval(tag):
        t0 = time.time()
        res = {}
        for (L, fam), docs in eval_set.items():
            res["%s@%d" % (fam, L)] = round(teacher_forced_accuracy(model, docs, device, 16 if L <= 512 else 8), 3)
        state["evals"].append({"step": state["step"], "tokens": state["tokens"],
                               "minutes": round(state["elapsed"] / 60, 2), "acc": res})
        log("eval[%s] step %d (%.1fs) exact: %s" % (tag, state["step"], time.time() - t0,
                                                   " ".join("%s=%.2f" % kv for kv in res.items())))

    ckpt_path = os.path.join(args.out_dir, "last.pt")
    last_eval = last_ckpt = time.time()
    ema = None
    model.train()
    t_data = t_gpu = 0.0
    while True:
        now = time.time()
        state["elapsed"] = now - t_start
        frac = state["elapsed"] / budget
        if frac >= 1.0 or now >= deadline:
            break
        lr = lr_at(state["step"], frac, args, state["warm_from"])
        for g in opt.param_groups:
            g["lr"] = lr
        t0 = time.time()
        ids, w = feeder.get(next_job)
        t1 = time.time()
        x = torch.from_numpy(ids).to(device, non_blocking=True).long()
        w = torch.from_numpy(w).to(device, non_blocking=True)[:, 1:]
        inp, tgt = x[:, :-1], x[:, 1:]
        ans = w >= 0.5
        ctx = (w > 0) & ~ans & (torch.rand(w.shape, device=device) < args.ctx_sample)
        sel = ans | ctx
        wt = torch.where(ctx, w / args.ctx_sample, w)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            h = model.hidden(inp)
            hs = h[sel]
            logits = F.linear(hs, model.output_weight().to(hs.dtype)).float()
        ce = F.cross_entropy(logits, tgt[sel], reduction="none")
        ws = wt[sel]
        loss = (ce * ws).sum() / ws.sum().clamp_min(1e-6)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        state["tokens"] += inp.numel()
        if state["step"] % 25 == 0 or state["step"] <= 3:
            am = ws >= 0.5
            n_ans = int(am.sum())
            state["answer_tokens"] += n_ans * 25 if state["step"] % 25 == 0 else n_ans
            al = float(ce[am].mean()) if n_ans else float("nan")
            ema = al if ema is None else 0.9 * ema + 0.1 * al
            el = time.time() - t_start
            log("step %d  %.2f/%.2f min  tok %.1fM  len %d  lr %.2e  loss %.3f  ans %.3f (ema %.3f)  gn %.2f  "
                "%.0f tok/s  wait %.0f%%" % (state["step"], el / 60, budget / 60, state["tokens"] / 1e6, inp.shape[1],
                                            lr, float(loss), al, ema, float(gn), state["tokens"] / max(1.0, el),
                                            100 * t_data / max(1e-9, t_data + t_gpu)))
        t_data += t1 - t0
        t_gpu += time.time() - t1
        now = time.time()
        if now - last_eval > args.eval_every * 60:
            state["elapsed"] = now - t_start
            do_eval("train")
            last_eval = time.time()
        if now - last_ckpt > args.ckpt_every * 60:
            state["elapsed"] = time.time() - t_start
            save(ckpt_path, model, opt, state)
            log("checkpoint %s at step %d" % (ckpt_path, state["step"]))
            last_ckpt = time.time()

    feeder.close()
    state["elapsed"] = min(time.time() - t_start, budget)
    save(ckpt_path, model, opt, state)
    log("checkpoint %s at step %d" % (ckpt_path, state["step"]))
    if args.weights_out:
        save(args.weights_out, model, None, state)
        log("weights (no optimizer) %s" % args.weights_out)
    do_eval("final")
    summary = {"name": args.name, "args": vars(args), "config": dataclasses.asdict(cfg),
               "parameters": model.num_params(), "steps": state["step"], "tokens_seen": state["tokens"],
               "answer_tokens_seen_approx": state["answer_tokens"], "train_minutes": round(state["elapsed"] / 60, 2),
               "budget_minutes": round(budget / 60, 2), "finished": state["elapsed"] >= budget - 1.0,
               "final_answer_loss_ema": ema, "evals": state["evals"], "segments": state["segments"],
               "device": str(device) + ((" " + torch.cuda.get_device_name()) if device.type == "cuda" else "")}
    with open(os.path.join(args.out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    log("done in %.2f min" % ((time.time() - PROCESS_START) / 60))


if __name__ == "__main__":
    main()
