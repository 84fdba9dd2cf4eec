#!/usr/bin/env python3
"""Train the long-context reference model (issue 25, `models/primekv-long.gguf`) within a
wall-clock budget, on a GPU (`--device cuda`) or, at toy scale, on the CPU (`--toy`).

    python3 tools/train/train_long.py --device cuda --minutes 9 --out-dir OUT      # the GPU run
    /usr/bin/python3 tools/train/train_long.py --toy --minutes 1 --out-dir /tmp/tl  # CPU check

Shape (default): the second reference model's, so training continues from its weights
(`--init-gguf models/primekv-retrieval-2.gguf`, the default; `--init-gguf none` starts from
scratch): Llama, 8 layers, d_model 384, 4 query / 2 KV heads of head_dim 128 (GQA), SwiGLU 1024,
the first model's 2,048-piece tokenizer (read from models/primekv-retrieval.gguf, so the held-out
files' token counts hold), context 32,768.  Why continue rather than train a wider model from
scratch: ten minutes of an H200 bought retrieval-2 its retrieval skills at 2K (150M tokens);
the same ten minutes at 16K-32K buy about a tenth of that in documents (estimate below), so they
are better spent teaching a model that already retrieves to do it over 16 times the distance.

RoPE: base 1e6 (retrieval-2's, and the base Qwen2 / Qwen2.5 use for their 32,768-token native
context), adjacent pairs, no scaling.  Over 32,768 positions the slowest of the 64 pairs turns by
32768 x 1e6^(-126/128) = 0.041 rad, and 15 pairs stay below 1 rad over the whole context: a
subspace where keys match by content at any distance (the first model's reason for 1e6 at 2K,
where 28 pairs did).  Keeping retrieval-2's base means no frequency changes its heads must
re-learn; `--rope-base` changes it (e.g. 1.6e7 keeps retrieval-2's 2K rotation at 32K).  The
GGUF states the base (llama.rope.freq_base) and the context (llama.context_length).

Curriculum (share of the budget -> document length, a quarter of the steps revisit a shorter
length): 0.00 -> ctx/16 (2K), 0.12 -> ctx/8 (4K), 0.30 -> ctx/4 (8K), 0.50 -> ctx/2 (16K),
0.72 -> ctx (32K).  --batch-tokens (default 65,536) per step: 32 rows of 2K ... 2 rows of 32K.
Data: tools/train/data_long.py (make_train_doc_long), facts at uniform depths, chains with far
links, near-key distractors, multi-turn drift, several filler styles; 40% of the 2K documents are
retrieval-2's own generator (data.make_train_doc_v2), so its skills are rehearsed.

FLOP estimate (per trained token; non-embedding parameters 14.2M: per layer 2 x 384 x 512 (q, o),
2 x 384 x 256 (k, v), 3 x 384 x 1024 (SwiGLU)):
    linear layers   6 x 14.2M                                  =  85 MFLOP
    attention       8 layers x 2 x 2 x (T/2) x 512 (fwd) x 3.5 (fwd + bwd with recompute)
                    = 28,700 x T FLOP: 2K 59M, 4K 118M, 8K 235M, 16K 470M, 32K 940M
At retrieval-2's measured 230,000 tokens/s (2K documents, ~33 TFLOP/s effective: small matmuls)
for the linear part and ~150 TFLOP/s for the fused (flash) attention kernel, one H200 should do
about 290K tokens/s at 4K, 175K at 16K, 110K at 32K: ~100M tokens in 8.2 minutes, of which
~13M (400 documents) at 32K.  These are estimates; the log prints the measured tokens/s and the
time waiting for data (12 worker processes generate about 800K tokens/s each on a CPU core).

Writes into --out-dir: train.log, summary.json, last.pt (weights, optimizer and schedule state,
every --ckpt-every minutes and at the end; 190 MB, for resuming on the same machine; into
--full-ckpt-dir when given),
carry.pt (bf16 weights + schedule state, 32 MB: small enough to come back from a device machine;
`--resume carry.pt` continues with fresh optimizer moments and a new warm-up) and --gguf-out
(default OUT/primekv-long.gguf, Q8_0 with F32 norms, 17 MB) written by Python
(tests/reference/gguf_write.py), so no engine binary is needed on the GPU machine.  --minutes
bounds the whole command: the loop stops --reserve minutes early, then saves, evaluates and
exports.
"""

import argparse
import collections
import dataclasses
import functools
import json
import os
import random
import sys
import time

PROCESS_START = time.time()
_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, _HERE)
if __name__ == "__main__":
    import runtime_env  # noqa: E402  (allocator and OpenBLAS kernels for the CPU path)

    runtime_env.reexec()
sys.path.insert(0, os.path.join(_REPO, "tests", "reference"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import data_long  # noqa: E402
import export  # noqa: E402
from model import Llama, ModelConfig  # noqa: E402
from tokenizer import Tokenizer, load_tokenizer  # noqa: E402
from train_ref2 import (Feeder, batch_of, load_gguf_weights, lr_at, save,  # noqa: E402
                        teacher_forced_accuracy)

# (start fraction of the budget, divisor of --ctx, difficulty range)
STAGES = [
    (0.00, 16, (0.5, 1.0)),
    (0.12, 8, (0.5, 1.0)),
    (0.30, 4, (0.6, 1.0)),
    (0.50, 2, (0.6, 1.0)),
    (0.72, 1, (0.7, 1.0)),
]
MIN_DOC = 128


def stage_length(ctx, div):
    return max(MIN_DOC, ctx // div)


def pick_stage(frac, rng):
    cur = 0
    for i, s in enumerate(STAGES):
        if frac >= s[0]:
            cur = i
    if cur > 0 and rng.random() < 0.25:
        cur = rng.randrange(cur)
    return STAGES[cur]


# ---------------------------------------------------------------------------- PoSE positions
def pose_positions(rng, T, span, chunks=(2, 3)):
    """Position ids for a T-token window that spans `span` positions (PoSE, Zhu et al. 2024):
    the window is cut into 2-3 chunks at uniform points and the span - T skipped positions are
    shared out over the gaps, so relative distances up to span - 1 occur within a short window.
    Position 0 (BOS) stays at 0; RoPE only sees differences, so no chunk needs an absolute offset."""
    if span <= T:
        return list(range(T))
    k = min(rng.choice(chunks), T)
    cuts = sorted(rng.sample(range(1, T), k - 1))
    extra = span - T
    shares = sorted(rng.randint(0, extra) for _ in range(k - 2)) + [extra]
    skips = [b - a for a, b in zip([0] + shares[:-1], shares)]
    pos, off, ci = [], 0, 0
    for t in range(T):
        if ci < len(cuts) and t == cuts[ci]:
            off += skips[ci]
            ci += 1
        pos.append(t + off)
    return pos


def far_positions(doc, T, span):
    """Deterministic evaluation positions: everything from just before the first question on
    is moved span - T positions later, so every fact sits at least that far from its question."""
    if span <= T:
        return list(range(T))
    cut = max(1, doc.answers[0]["start"] - 48)
    return [t if t < cut else t + span - T for t in range(T)]


def cpu_has_bf16():
    import runtime_env
    flags = runtime_env.cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


# ---------------------------------------------------------------------------- data workers
def make_batch(job):
    """train_ref2's batches, of long documents (runs in train_ref2's worker processes); a job
    with a 7th element is a batch of skill rows of that family (--skill-rows)."""
    if len(job) == 7:
        return batch_of(functools.partial(data_long.make_train_doc_long, skill=job[6]), job[:6])
    return batch_of(data_long.make_train_doc_long, job)


# ---------------------------------------------------------------------------- checkpoints / export
def save_carry(path, model, state):
    """bf16 weights and the schedule state, no optimizer: the copy that fits a device's return."""
    tmp = path + ".tmp"
    torch.save({"model_bf16": {k: v.detach().to(torch.bfloat16).cpu() for k, v in model.state_dict().items()},
                "state": state}, tmp)
    os.replace(tmp, path)


def grow_slots(old_layers, new_layers):
    """Which old layer each new slot copies, and whether the slot is an inserted one: slot j
    copies old layer floor(j * old / new); the first slot of each old layer is that layer itself,
    the others are insertions spread evenly through the stack."""
    slots, seen = [], set()
    for j in range(new_layers):
        i = j * old_layers // new_layers
        slots.append((i, i in seen))
        seen.add(i)
    return slots


def grow_depth(old_sd, old_layers, model):
    """Load a shallower model's weights into `model`, keeping its function exactly: an inserted
    layer copies the layer before it, with its attention output (wo) and FFN down projection
    (w_down) zero, so its residual branches add nothing until training moves them.  A copy rather
    than fresh weights, so the first gradients reach projections that already attend and gate
    like a trained layer."""
    new_sd = model.state_dict()
    slots = grow_slots(old_layers, model.cfg.n_layers)
    for name in new_sd:
        if not name.startswith("blocks."):
            new_sd[name] = old_sd[name].clone()
            continue
        _, j, rest = name.split(".", 2)
        i, inserted = slots[int(j)]
        w = old_sd["blocks.%d.%s" % (i, rest)].clone()
        if inserted and rest in ("wo.weight", "w_down.weight"):
            w.zero_()
        new_sd[name] = w
    model.load_state_dict(new_sd)
    return [j for j, (_, ins) in enumerate(slots) if ins]


def load_any(path):
    try:
        ck = torch.load(path, map_location="cpu", weights_only=False)
    except TypeError:  # PyTorch before 1.13 has no weights_only
        ck = torch.load(path, map_location="cpu")
    if "model_bf16" in ck:
        ck["model"] = {k: v.float() for k, v in ck["model_bf16"].items()}
    if "model_q8" in ck:
        ck["model"] = {k: q.float() * sc for k, (q, sc) in ck["model_q8"].items()}
    return ck


_META_TYPES = None


def write_gguf(model, tok, name, path, gguf_type="Q8_0"):
    """The model as GGUF (export.py's metadata and tensor names), written by Python: 2-D tensors
    in gguf_type when their rows are whole 32-blocks, 1-D tensors (norms) in F32."""
    import gguf_read as R
    from gguf_write import Typed, write_gguf as _write
    types = {"string": (R.T_STRING, None), "uint32": (R.T_U32, None), "float32": (R.T_F32, None),
             "bool": (R.T_BOOL, None), "array[string]": (R.T_ARRAY, R.T_STRING),
             "array[float32]": (R.T_ARRAY, R.T_F32), "array[int32]": (R.T_ARRAY, R.T_I32)}
    meta = {}
    for kv in export.metadata(model.cfg, tok, name):
        vt, et = types[kv["type"]]
        meta[kv["key"]] = Typed(vt, kv["value"], et)
    tensors = []
    for n, a in export.tensor_list(model):
        t = gguf_type if (a.ndim == 2 and a.shape[-1] % 32 == 0) else "F32"
        tensors.append((n, a, t))
    tmp = path + ".tmp"
    _write(tmp, meta, tensors)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--toy", action="store_true",
                    help="CPU check: 2 layers, d_model 64, 2 / 1 heads of 32, ctx 512, no init, 1 worker")
    ap.add_argument("--minutes", type=float, default=9.0, help="wall-clock budget of the whole command")
    ap.add_argument("--reserve", type=float, default=0.8, help="minutes kept for the final save, eval and export")
    ap.add_argument("--budget-minutes", type=float, default=None,
                    help="training-loop budget (default: from --minutes); on resume, a new total")
    ap.add_argument("--out-dir", default=None, help="required (except with --float-copy)")
    ap.add_argument("--gguf-out", default=None, help="default OUT/primekv-long.gguf")
    ap.add_argument("--full-ckpt-dir", default=None,
                    help="where last.pt (with optimizer state, 190 MB at the default shape) goes; default "
                         "--out-dir. On a device machine, a folder outside the one that comes back")
    ap.add_argument("--gguf-type", default="Q8_0", choices=["F32", "F16", "Q8_0"])
    ap.add_argument("--tokenizer", default=os.path.join(_REPO, "models", "primekv-retrieval.gguf"))
    ap.add_argument("--init-gguf", default=os.path.join(_REPO, "models", "primekv-retrieval-2.gguf"),
                    help="start from this model's weights (same shape); 'none' for a random start")
    ap.add_argument("--name", default="primekv-long")
    ap.add_argument("--seed", type=int, default=2525)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--rope-base", type=float, default=1e6)
    ap.add_argument("--lr", type=float, default=5e-4, help="peak (a continuation: half retrieval-2's)")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--batch-tokens", type=int, default=65536, help="tokens per step (rows = this / length)")
    ap.add_argument("--ctx-sample", type=float, default=0.15)
    ap.add_argument("--value-first", type=float, default=0.35)
    ap.add_argument("--workers", type=int, default=max(0, min(12, (os.cpu_count() or 1) - 2)))
    ap.add_argument("--ckpt-every", type=float, default=2.0, help="minutes between checkpoints")
    ap.add_argument("--eval-every", type=float, default=3.0, help="minutes between evaluations")
    ap.add_argument("--eval-n", type=int, default=8, help="documents per family and length")
    ap.add_argument("--eval-families", nargs="+", default=["single", "multikey", "near_key", "drift", "vt", "multihop"])
    ap.add_argument("--pose-window", type=int, default=0,
                    help="CPU recipe: train on windows of this many tokens whose position ids skip (PoSE) to "
                         "span up to --ctx; the curriculum's long documents are replaced by these windows")
    ap.add_argument("--pose-plain", type=float, default=0.2, help="share of PoSE rows with plain positions")
    ap.add_argument("--long-share", type=float, default=0.0,
                    help="with --pose-window: share of steps on real documents of --long-len tokens "
                         "(plain positions), so attention over many distractors is trained too")
    ap.add_argument("--recompute-from", type=int, default=4096,
                    help="CPU: rows of at least this many tokens recompute each block in the backward pass "
                         "(memory of one layer's scores instead of all layers'; about a third more compute)")
    ap.add_argument("--long-len", type=int, nargs="+", default=[4096],
                    help="lengths of the real long rows (with --pose-window), one drawn per long step")
    ap.add_argument("--pose-eval-spans", type=int, nargs="*", default=None,
                    help="spans for the far-question evaluation of --pose-window documents (default ctx/4, ctx/2, ctx)")
    ap.add_argument("--threads", type=int, default=0, help="CPU intra-op threads (0: up to 2)")
    ap.add_argument("--cpu-bf16", choices=["auto", "on", "off"], default="auto",
                    help="bf16 autocast on the CPU (auto: where the CPU has native bf16 dot products, "
                         "avx512_bf16 or amx_bf16; measured 2.2x per training step on Zen 5)")
    ap.add_argument("--real-share", type=float, default=0.0,
                    help="share of long training documents whose filler is real prose (tools/train/corpus.py)")
    ap.add_argument("--corpus", default=None, help="corpus cache (default corpus.py's; built when missing)")
    ap.add_argument("--eval-real", action="store_true",
                    help="also evaluate the families with the corpus's dev-split prose as filler")
    ap.add_argument("--family-weight", action="append", default=[], metavar="FAMILY=W",
                    help="weight of a long training family (data_long.TRAIN_FAMILIES_LONG; repeatable)")
    ap.add_argument("--skill-rows", default=None, metavar="FAMILY:LENGTH:SHARE",
                    help="with --pose-window: a SHARE of the steps are rows of LENGTH tokens, each a "
                         "FAMILY document in real prose (a skill the long rows give too few examples of)")
    ap.add_argument("--resume", default=None, help="a last.pt or carry.pt of this script")
    ap.add_argument("--grow-from", default=None,
                    help="a carry.pt or last.pt of a shallower model of this shape: its layers are kept in order "
                         "and --layers minus theirs are inserted between them as identities (see grow_depth)")
    ap.add_argument("--float-copy", nargs=2, metavar=("SRC", "DST"), default=None,
                    help="only write DST, a float32 weights file ({model, state}, as export.py and "
                         "check_engine.py --ckpt read) from a carry.pt or last.pt SRC, and exit")
    ap.add_argument("--export", default=None, metavar="SRC",
                    help="only write --gguf-out (in --gguf-type) from a carry.pt or last.pt SRC, with "
                         "the shape its state records, and exit")
    args = ap.parse_args()
    if args.export:
        if not args.gguf_out:
            ap.error("--export needs --gguf-out")
        ck = load_any(args.export)
        m = Llama(ModelConfig(**ck["state"]["config"]))
        m.load_state_dict(ck["model"])
        write_gguf(m, load_tokenizer(args.tokenizer), args.name, args.gguf_out, args.gguf_type)
        print("wrote %s from %s (step %d)" % (args.gguf_out, args.export, ck["state"]["step"]))
        return
    if args.float_copy:
        ck = load_any(args.float_copy[0])
        torch.save({"model": ck["model"], "state": ck["state"]}, args.float_copy[1])
        return
    if not args.out_dir:
        ap.error("--out-dir is required")
    if args.toy:
        args.layers, args.d_model, args.heads, args.kv_heads, args.head_dim, args.ffn = 2, 64, 2, 1, 32, 128
        args.ctx = min(args.ctx, 512)
        args.init_gguf = "none"
        args.workers = min(args.workers, 1)
        args.batch_tokens = min(args.batch_tokens, 2048)
        args.eval_n = min(args.eval_n, 2)
        args.reserve = min(args.reserve, 0.25)
    gguf_out = args.gguf_out or os.path.join(args.out_dir, args.name + ".gguf")

    os.makedirs(args.out_dir, exist_ok=True)
    logf = open(os.path.join(args.out_dir, "train.log"), "a")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    device = torch.device(args.device)
    autocast = device.type == "cuda" or args.cpu_bf16 == "on" or (args.cpu_bf16 == "auto" and cpu_has_bf16())
    log("=== start %s args %s" % (time.strftime("%Y-%m-%d %H:%M:%S"), json.dumps(vars(args))))
    log("bf16 autocast: %s" % autocast)
    log("torch %s, device %s%s" % (torch.__version__, device,
                                   (" (%s)" % torch.cuda.get_device_name()) if device.type == "cuda" else ""))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        torch.set_num_threads(args.threads or max(1, min(2, os.cpu_count() or 1)))
    tok = load_tokenizer(args.tokenizer)
    if args.real_share > 0 or args.eval_real:
        import corpus
        docs = corpus.by_split(corpus.load(args.corpus or corpus.CACHE))
        data_long.REAL_DOCS.update(docs)
        data_long.REAL_SHARE = args.real_share
        log("real prose: %s documents by split, share %.2f" % (
            {k: len(v) for k, v in docs.items()}, args.real_share))
    for fw in args.family_weight:
        name, _, w = fw.partition("=")
        if name not in data_long.TRAIN_FAMILIES_LONG or not w:
            raise SystemExit("--family-weight %s: families are %s" % (fw, ", ".join(data_long.TRAIN_FAMILIES_LONG)))
        data_long.TRAIN_FAMILIES_LONG[name] = float(w)
    if args.family_weight:
        log("long training families: %s" % data_long.TRAIN_FAMILIES_LONG)
    skill = None
    if args.skill_rows:
        fam, L, share = (args.skill_rows.split(":") + ["", ""])[:3]
        try:
            skill = (fam, int(L), float(share))
        except ValueError:
            raise SystemExit("--skill-rows %s: FAMILY:LENGTH:SHARE" % args.skill_rows)
        if fam not in data_long.TRAIN_FAMILIES_LONG or not args.pose_window or args.real_share <= 0:
            raise SystemExit("--skill-rows needs a family of %s, --pose-window and --real-share" %
                             ", ".join(data_long.TRAIN_FAMILIES_LONG))
    feeder = Feeder(tok, args.workers, depth=2 * max(1, args.workers),  # fork before CUDA starts
                    make_batch=make_batch)
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
                      n_kv_heads=args.kv_heads, head_dim=args.head_dim, ffn_dim=args.ffn,
                      context_length=args.ctx, rope_base=args.rope_base)
    torch.manual_seed(args.seed)
    model = Llama(cfg)
    state = {"step": 0, "tokens": 0, "elapsed": 0.0, "evals": [], "warm_from": 0,
             "config": dataclasses.asdict(cfg), "segments": [], "init": None}
    ck = None
    if args.resume:
        ck = load_any(args.resume)
        model.load_state_dict(ck["model"])
        state = ck["state"]
        state["config"] = dataclasses.asdict(cfg)
        log("resumed weights from %s at step %d, %.2f min" % (args.resume, state["step"], state["elapsed"] / 60))
    elif args.grow_from:
        ck = load_any(args.grow_from)
        old_layers = ck["state"]["config"]["n_layers"]
        if old_layers >= args.layers:
            raise SystemExit("--grow-from %s has %d layers; --layers %d must be more" % (
                args.grow_from, old_layers, args.layers))
        inserted = grow_depth(ck["model"], old_layers, model)
        state = ck["state"]
        state["config"] = dataclasses.asdict(cfg)
        state.setdefault("grown", []).append({"step": state["step"], "from_layers": old_layers,
                                              "to_layers": args.layers, "inserted": inserted})
        ck = {}  # fresh optimizer: the new layers have no moments
        log("grown from %s (%d layers, step %d) to %d layers; inserted identity layers at %s" % (
            args.grow_from, old_layers, state["step"], args.layers, inserted))
    elif args.init_gguf and args.init_gguf != "none":
        load_gguf_weights(model, args.init_gguf)
        state["init"] = os.path.basename(args.init_gguf)
        log("initialised from %s (its weights as stored; fresh optimizer)" % args.init_gguf)
    model.to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    kw = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **kw)
    if ck is not None and "opt" in ck:
        opt.load_state_dict(ck["opt"])
        log("optimizer state restored")
    elif ck is not None:
        state["warm_from"] = state["step"]  # fresh moments: warm up again
    ck = None
    log("model: %s, %.2fM parameters" % (json.dumps(dataclasses.asdict(cfg)), model.num_params() / 1e6))

    if args.budget_minutes is not None:
        state["budget"] = args.budget_minutes * 60.0
    elif "budget" not in state:
        state["budget"] = args.minutes * 60.0 - (time.time() - PROCESS_START) - args.reserve * 60.0
    budget = state["budget"]
    deadline = PROCESS_START + args.minutes * 60.0 - args.reserve * 60.0
    log("training-loop budget %.2f min (this run stops at %.2f min of its own)" % (
        budget / 60, (deadline - PROCESS_START) / 60))

    eval_lengths = sorted({stage_length(args.ctx, 8), args.ctx})
    if device.type != "cuda":  # the CPU path builds a (T x T) mask: keep its evaluation short
        eval_lengths = sorted({min(L, 2048) for L in eval_lengths})
    erng = random.Random("long-train-eval-%d" % args.seed)
    if args.pose_window:
        eval_lengths = [args.pose_window]
    eval_set = {(L, fam): [d for d in (data_long.eval_doc_long(tok, erng, fam, L) for _ in range(args.eval_n))
                           if d is not None]
                for L in eval_lengths for fam in args.eval_families}
    if args.eval_real:
        for L in eval_lengths:
            for fam in args.eval_families:
                eval_set[(L, "real-" + fam)] = [
                    d for d in (data_long.eval_doc_long(tok, erng, fam, L, data_long.REAL_DOCS["dev"])
                                for _ in range(args.eval_n)) if d is not None]
    pose_spans = []
    if args.pose_window:
        pose_spans = args.pose_eval_spans if args.pose_eval_spans is not None else sorted(
            {args.ctx // 4, args.ctx // 2, args.ctx})
    prng = random.Random("pose-%d-%d" % (args.seed, state["step"]))
    sched_rng = random.Random("%d-%d" % (args.seed, state["step"]))
    job_seed = [(args.seed * 1000003 + state["step"] * 7919) & 0xFFFFFFFF]
    t_start = time.time() - state["elapsed"]
    state["segments"].append({"start_step": state["step"], "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                              "device": str(device)})

    def next_job():
        frac = (time.time() - t_start) / budget
        _, div, diff = pick_stage(frac, sched_rng)
        length = stage_length(args.ctx, div)
        if args.pose_window:
            length = sched_rng.choice(args.long_len) if sched_rng.random() < args.long_share else args.pose_window
            if skill and length == args.pose_window and sched_rng.random() < skill[2]:
                job_seed[0] += 1
                return (job_seed[0], skill[1], max(1, args.batch_tokens // skill[1]), diff[0], diff[1],
                        args.value_first, skill[0])
        job_seed[0] += 1
        return (job_seed[0], length, max(1, args.batch_tokens // length), diff[0], diff[1], args.value_first)

    def do_eval(tag):
        t0 = time.time()
        res = {}
        for (L, fam), docs in eval_set.items():
            res["%s@%d" % (fam, L)] = round(teacher_forced_accuracy(model, docs, device, max(1, 16384 // L)), 3)
            for S in pose_spans:
                pos = [far_positions(d, L, S) for d in docs]
                res["%s@far%d" % (fam, S)] = round(
                    teacher_forced_accuracy(model, docs, device, max(1, 16384 // L), pos), 3)
        state["evals"].append({"step": state["step"], "tokens": state["tokens"],
                               "minutes": round(state["elapsed"] / 60, 2), "acc": res})
        log("eval[%s] step %d (%.1fs) exact: %s" % (tag, state["step"], time.time() - t0,
                                                   " ".join("%s=%.2f" % kv for kv in res.items())))

    os.makedirs(args.full_ckpt_dir or args.out_dir, exist_ok=True)
    ckpt_path = os.path.join(args.full_ckpt_dir or args.out_dir, "last.pt")
    carry_path = os.path.join(args.out_dir, "carry.pt")

    def checkpoint():
        save(ckpt_path, model, opt, state)
        save_carry(carry_path, model, state)
        log("checkpoint %s and %s at step %d" % (ckpt_path, carry_path, state["step"]))

    last_eval = last_ckpt = time.time()
    ema = None
    model.train()
    t_data = t_step = 0.0
    len_tokens = collections.Counter()
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
        positions = None
        if args.pose_window and inp.shape[1] == args.pose_window:
            T = inp.shape[1]
            positions = torch.tensor([pose_positions(prng, T, T if prng.random() < args.pose_plain
                                                     else prng.randint(T + 1, args.ctx)) for _ in range(inp.shape[0])],
                                     dtype=torch.long)
        ans = w >= 0.5
        ctx = (w > 0) & ~ans & (torch.rand(w.shape, device=device) < args.ctx_sample)
        sel = ans | ctx
        wt = torch.where(ctx, w / args.ctx_sample, w)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            h = model.hidden(inp, positions, args.recompute_from if device.type == "cpu" else 0)
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
        len_tokens[inp.shape[1]] += inp.numel()
        if state["step"] % 10 == 0 or state["step"] <= 3:
            am = ws >= 0.5
            al = float(ce[am].mean()) if int(am.sum()) else float("nan")
            ema = al if ema is None else 0.9 * ema + 0.1 * al
            el = time.time() - t_start
            log("step %d  %.2f/%.2f min  tok %.1fM  len %d x %d  lr %.2e  loss %.3f  ans %.3f (ema %.3f)  gn %.2f  "
                "%.0f tok/s  wait %.0f%%" % (state["step"], el / 60, budget / 60, state["tokens"] / 1e6, inp.shape[0],
                                            inp.shape[1], lr, float(loss), al, ema, float(gn),
                                            state["tokens"] / max(1.0, el), 100 * t_data / max(1e-9, t_data + t_step)))
        t_data += t1 - t0
        t_step += time.time() - t1
        now = time.time()
        if now - last_eval > args.eval_every * 60:
            state["elapsed"] = now - t_start
            do_eval("train")
            last_eval = time.time()
        if now - last_ckpt > args.ckpt_every * 60:
            state["elapsed"] = time.time() - t_start
            checkpoint()
            last_ckpt = time.time()

    feeder.close()
    state["elapsed"] = min(time.time() - t_start, budget)
    state["tokens_by_length"] = {str(k): v + state.get("tokens_by_length", {}).get(str(k), 0)
                                 for k, v in len_tokens.items()}
    checkpoint()
    t0 = time.time()
    write_gguf(model, tok, args.name, gguf_out, args.gguf_type)
    log("wrote %s (%s, %.1f MB, %.1fs)" % (gguf_out, args.gguf_type, os.path.getsize(gguf_out) / 1e6, time.time() - t0))
    if time.time() < PROCESS_START + args.minutes * 60.0 - 20:
        do_eval("final")
    summary = {"name": args.name, "args": vars(args), "config": dataclasses.asdict(cfg),
               "parameters": model.num_params(), "init": state.get("init"), "steps": state["step"],
               "tokens_seen": state["tokens"], "tokens_by_length": state["tokens_by_length"],
               "train_minutes": round(state["elapsed"] / 60, 2), "budget_minutes": round(budget / 60, 2),
               "finished": state["elapsed"] >= budget - 1.0, "final_answer_loss_ema": ema, "evals": state["evals"],
               "segments": state["segments"], "grown": state.get("grown", []),
               "device": str(device) + ((" " + torch.cuda.get_device_name()) if device.type == "cuda" else "")}
    with open(os.path.join(args.out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    log("done in %.2f min" % ((time.time() - PROCESS_START) / 60))


if __name__ == "__main__":
    main()
