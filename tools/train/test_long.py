#!/usr/bin/python3
"""Unit tests of the long-context generator, held-out sets and training script (issue 25).

    /usr/bin/python3 tools/train/test_long.py

Needs numpy (the GGUF tokenizer); the training round trip also needs torch and is skipped
without it; the engine checks (GGUF load, logits) run when build/*/src/cli/primekv exists.
"""

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_REPO, "tests", "reference"))
sys.path.insert(0, os.path.join(_REPO, "scripts"))

import data_long  # noqa: E402
from make_long_splits import tokenizer_from_gguf  # noqa: E402

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

MODEL = os.path.join(_REPO, "models", "primekv-retrieval-2.gguf")
TOK = tokenizer_from_gguf(MODEL)


def find_primekv():
    for b in ("ci", "release", "debug"):
        p = os.path.join(_REPO, "build", b, "src", "cli", "primekv")
        if os.path.exists(p):
            return p
    return None


class GeneratorTest(unittest.TestCase):
    def test_deterministic(self):
        for fam in data_long.HELDOUT_FAMILIES:
            a = data_long.long_eval_sample(TOK, random.Random("t-%s" % fam), fam, 4096)
            b = data_long.long_eval_sample(TOK, random.Random("t-%s" % fam), fam, 4096)
            self.assertEqual(json.dumps(a), json.dumps(b), fam)
        d1 = data_long.make_train_doc_long(TOK, random.Random(5), 8192, 0.8)
        d2 = data_long.make_train_doc_long(TOK, random.Random(5), 8192, 0.8)
        self.assertEqual(d1.ids, d2.ids)
        self.assertEqual(d1.weights, d2.weights)

    def test_exact_token_counts(self):
        for L in (4096, 32768):
            for fam in data_long.HELDOUT_FAMILIES:
                s = data_long.long_eval_sample(TOK, random.Random("c-%s-%d" % (fam, L)), fam, L)
                t = s["tokens"]
                self.assertEqual(len(TOK.encode(s["context"])), t["context"], fam)
                turns = [len(TOK.encode("\n" + x["question"] + "\n" + x["answer_prefix"], bos=False))
                         for x in s["turns"]]
                self.assertEqual(turns, t["turns"], fam)
                self.assertEqual(t["max_new_tokens"], max(x["max_new_tokens"] for x in s["turns"]))
                need = t["context"] + sum(turns) + len(turns) * t["max_new_tokens"]
                self.assertEqual(need, t["need"])
                self.assertLessEqual(need, L)
                # Within a filler sentence of the target (the word list of freq is coarser).
                self.assertGreaterEqual(need, L * (0.85 if fam == "freq" else 0.99), (fam, L, need))

    def test_depths_and_offsets(self):
        """Needles sit at their requested depth (to within a filler sentence) and the text at the
        recorded token offset is the needle's; over many samples depths cover [0, 1)."""
        depths = []
        for i in range(40):
            s = data_long.long_eval_sample(TOK, random.Random("d-%d" % i), "single", 4096)
            (nd,) = s["needles"]
            depths.append(nd["depth"])
            ctx_tokens = s["tokens"]["context"]
            self.assertLess(abs(nd["token"] / ctx_tokens - nd["depth"]), 0.03, nd)
            ids = TOK.encode(s["context"])
            value = s["turns"][0]["answers"][0]
            after = TOK.decode(ids[nd["token"]:nd["token"] + 40])
            self.assertIn(value, after)
        self.assertLess(min(depths), 0.2)
        self.assertGreater(max(depths), 0.8)

    def test_chains_far_apart(self):
        for fam, role in (("vt", "assign"), ("multihop", None)):
            s = data_long.long_eval_sample(TOK, random.Random("g-" + fam), fam, 32768)
            chain = [n for n in s["needles"] if (n["role"] == role if role else n["asked"])]
            toks = sorted(n["token"] for n in chain)
            gaps = [b - a for a, b in zip(toks, toks[1:])]
            self.assertGreaterEqual(min(gaps), 2000, (fam, gaps))

    def test_train_doc_shape(self):
        rng = random.Random(9)
        for L in (512, 2048, 16384):
            for _ in range(3):
                d = data_long.make_train_doc_long(TOK, rng, L, 0.9)
                self.assertEqual(len(d.ids), L + 1)
                self.assertTrue(d.answers)
                for a in d.answers:
                    self.assertEqual(TOK.decode(d.ids[a["start"]:a["end"]]).strip(), a["text"].strip())

    def test_rows_too_short_for_any_long_placement(self):
        """A curriculum's shortest rows still get a document: below what the long placement can
        fit (64 tokens fails within a few draws), the short generator takes over."""
        rng = random.Random(1)
        for _ in range(20):
            d = data_long.make_train_doc_long(TOK, rng, 64, 0.9, short_share=0.0)
            self.assertEqual(len(d.ids), 65)
            self.assertTrue(d.answers)

    def test_skill_rows_are_the_family_in_real_prose(self):
        """make_train_doc_long(skill="vt"): every document is variable tracking (2-6 hops) in the
        real prose it is given, even with REAL_SHARE 0, at 1,024 tokens."""
        prose = [{"paragraphs": [["The QUICK tool reads FILE from disk.", "It writes to STDOUT when asked."],
                                 ["Options are parsed left to right.", "The last one wins."]]}]
        saved = dict(data_long.REAL_DOCS), data_long.REAL_SHARE
        data_long.REAL_DOCS.clear()
        data_long.REAL_DOCS["train"] = prose
        data_long.REAL_SHARE = 0.0
        try:
            rng = random.Random(3)
            for _ in range(12):
                d = data_long.make_train_doc_long(TOK, rng, 1024, 0.5, skill="vt")
                self.assertEqual(len(d.ids), 1025)
                self.assertEqual(len(d.answers), 1)
                names = d.answers[0]["refs"]
                self.assertTrue(3 <= len(names) <= 7, names)
                text = d.context_text
                self.assertIn("STDOUT", text)
                self.assertNotIn("Track the variables", text.replace("Track the variables:", ""))
                pos = [re.search(r"\b%s\b" % n, text).start() for n in names]
                self.assertEqual(pos, sorted(pos))  # the chain's order
        finally:
            data_long.REAL_DOCS.clear()
            data_long.REAL_DOCS.update(saved[0])
            data_long.REAL_SHARE = saved[1]

    def test_split_streams_disjoint(self):
        import make_long_splits as M
        streams = {M.stream_seed(sp, sd, "single", 4096) for sp, sd in M.SPLIT_SEEDS.items()}
        self.assertEqual(len(streams), 2)
        out = tempfile.mkdtemp(prefix="long_splits_")
        try:
            r = subprocess.run([sys.executable, os.path.join(_REPO, "scripts", "make_long_splits.py"),
                                "--splits", "fresh", "--lengths", "4096", "--n", "1", "--families", "single",
                                "--out", out], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)  # fresh needs --fresh-seed
            r = subprocess.run([sys.executable, os.path.join(_REPO, "scripts", "make_long_splits.py"),
                                "--splits", "dev", "fresh", "--fresh-seed", "99", "--lengths", "4096", "--n", "2",
                                "--families", "single", "vt", "--out", out], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "long-dev", "4096", "single.jsonl")) as f:
                dev = f.read()
            with open(os.path.join(out, "long-fresh-99", "4096", "single.jsonl")) as f:
                fresh = f.read()
            self.assertNotEqual(dev, fresh)
            self.assertEqual(len(dev.splitlines()), 2)
        finally:
            shutil.rmtree(out)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (apt-get install -y python3-torch)")
class PoseTest(unittest.TestCase):
    def test_positions_span_exactly_and_increase(self):
        from train_long import far_positions, pose_positions
        rng = random.Random(7)
        for _ in range(3000):
            T = rng.randint(2, 300)
            S = rng.randint(T, 5000)
            p = pose_positions(rng, T, S)
            self.assertEqual(len(p), T)
            self.assertEqual(p[0], 0)
            self.assertEqual(p[-1], S - 1)
            self.assertTrue(all(b > a for a, b in zip(p, p[1:])))
        self.assertEqual(pose_positions(rng, 5, 5), [0, 1, 2, 3, 4])

        class Doc:
            answers = [{"start": 100}]
        far = far_positions(Doc(), 200, 1000)
        self.assertEqual(far[:52], list(range(52)))
        self.assertEqual(far[52], 52 + 800)

    def test_rope_sees_only_differences(self):
        """Explicit positions 0..T-1 equal the default pass, and a shift by any constant changes
        nothing (RoPE depends on differences only): what lets a PoSE chunk skip."""
        import torch
        from model import Llama, ModelConfig
        torch.manual_seed(0)
        m = Llama(ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                              ffn_dim=64, context_length=4096, rope_base=1e4))
        ids = torch.randint(0, 64, (2, 24))
        with torch.no_grad():
            h0 = m.hidden(ids)
            pos = torch.arange(24).repeat(2, 1)
            h1 = m.hidden(ids, pos)
            h2 = m.hidden(ids, pos + torch.tensor([[1000], [3]]))
            gap = torch.cat([torch.arange(12), torch.arange(12) + 500]).repeat(2, 1)
            h3 = m.hidden(ids, gap)
        self.assertLess(float((h0 - h1).abs().max()), 1e-6)
        self.assertLess(float((h0 - h2).abs().max()), 1e-5)
        self.assertGreater(float((h0[:, 12:] - h3[:, 12:]).abs().max()), 1e-3)  # a skip does change things


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (apt-get install -y python3-torch)")
class GrowDepthTest(unittest.TestCase):
    def test_slots_keep_order_and_spread_insertions(self):
        from train_long import grow_slots
        self.assertEqual(grow_slots(8, 12), [(0, False), (0, True), (1, False), (2, False), (2, True), (3, False),
                                             (4, False), (4, True), (5, False), (6, False), (6, True), (7, False)])
        self.assertEqual([i for i, ins in grow_slots(3, 7) if not ins], [0, 1, 2])
        self.assertEqual(sum(ins for _, ins in grow_slots(3, 7)), 4)

    def test_grown_model_computes_the_same_function_and_then_learns(self):
        """A deeper model grown from a trained one gives its logits to float precision, and a
        training step moves the inserted layers off the identity (their gradients are not zero)."""
        import torch
        from model import Llama, ModelConfig
        from train_long import grow_depth
        torch.manual_seed(1)
        kw = dict(vocab_size=64, d_model=32, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=64,
                  context_length=256, rope_base=1e4)
        small = Llama(ModelConfig(n_layers=3, **kw))
        big = Llama(ModelConfig(n_layers=5, **kw))
        inserted = grow_depth(small.state_dict(), 3, big)
        self.assertEqual(len(inserted), 2)
        ids = torch.randint(0, 64, (2, 40))
        with torch.no_grad():
            a = small(ids)
            b = big(ids)
        self.assertGreater(float(a.abs().max()), 0.1)
        self.assertLess(float((a - b).abs().max()), 1e-5)
        loss = big(ids).float().logsumexp(-1).mean()
        loss.backward()
        for j in inserted:
            self.assertGreater(float(big.blocks[j].wo.weight.grad.abs().max()), 0.0)
            self.assertGreater(float(big.blocks[j].w_down.weight.grad.abs().max()), 0.0)


    def test_query_blocks_equal_the_dense_mask(self):
        """The CPU path's blocked causal attention (long rows) gives the dense masked pass's
        hidden states and gradients, with PoSE positions too."""
        import torch
        import model as M
        torch.manual_seed(2)
        m = M.Llama(M.ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                                  ffn_dim=64, context_length=4096, rope_base=1e4))
        ids = torch.randint(0, 64, (2, 700))
        pos = torch.stack([torch.arange(700), torch.arange(700) * 3])

        def run():
            m.zero_grad()
            h = m.hidden(ids, pos)
            (h ** 2).mean().backward()
            return h.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None]
        self.assertGreater(700, 2 * M.CausalBlocks.size_for(700))  # the blocked path runs
        h1, g1 = run()
        size_for = M.CausalBlocks.size_for
        M.CausalBlocks.size_for = staticmethod(lambda T: 10 ** 9)  # the dense path runs
        try:
            h2, g2 = run()
        finally:
            M.CausalBlocks.size_for = size_for
        self.assertLess(float((h1 - h2).abs().max()), 1e-5)
        for a, b in zip(g1, g2):
            self.assertLess(float((a - b).abs().max()), 1e-5 * max(1.0, float(b.abs().max())))


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (apt-get install -y python3-torch)")
class TrainRoundTripTest(unittest.TestCase):
    def test_toy_train_resume_export(self):
        out = tempfile.mkdtemp(prefix="train_long_")
        try:
            script = os.path.join(_HERE, "train_long.py")
            base = [sys.executable, script, "--toy", "--workers", "0", "--eval-n", "1", "--eval-families", "single",
                    "--out-dir", out, "--gguf-type", "F32"]
            # The loop's own budget (--budget-minutes) is short, the command's (--minutes) long, so a
            # slow start on a loaded machine (torch's import) cannot leave the loop no time at all.
            r = subprocess.run(base + ["--minutes", "2", "--reserve", "0.1", "--budget-minutes", "0.15"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
            import torch
            st1 = torch.load(os.path.join(out, "last.pt"), map_location="cpu")["state"]
            self.assertGreater(st1["step"], 0)
            carry = torch.load(os.path.join(out, "carry.pt"), map_location="cpu")
            self.assertEqual(carry["state"]["step"], st1["step"])
            r = subprocess.run(base + ["--minutes", "2", "--reserve", "0.1", "--budget-minutes", "0.3",
                                       "--resume", os.path.join(out, "last.pt")], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
            self.assertIn("optimizer state restored", r.stdout)
            st2 = torch.load(os.path.join(out, "last.pt"), map_location="cpu")["state"]
            self.assertGreater(st2["step"], st1["step"])
            gguf = os.path.join(out, "primekv-long.gguf")
            self.assertTrue(os.path.getsize(gguf) > 0)
            primekv = find_primekv()
            if primekv:
                r = subprocess.run([sys.executable, os.path.join(_HERE, "check_engine.py"), "--ckpt",
                                    os.path.join(out, "last.pt"), "--tokenizer",
                                    os.path.join(_REPO, "models", "primekv-retrieval.gguf"), "--gguf", gguf,
                                    "--primekv", primekv, "--length", "256"], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
                self.assertIn("PASS", r.stdout)
        finally:
            shutil.rmtree(out)


if __name__ == "__main__":
    unittest.main()
