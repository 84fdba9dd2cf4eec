"""Long documents (4K-32K tokens) for the long-context reference model and its held-out sets
(issue 25).  Built on data.py: the same task families, fact / question templates and filler
styles; data.py itself is not changed, so the first two models' data and the 2K held-out sets
still regenerate byte for byte.

What this module adds:

* **Depth placement in tokens.**  Every planted item (fact, distractor, link, assignment, list)
  gets a depth d drawn uniformly in [0, 1) and lands before the filler sentence where
  d x (filler tokens) falls, so depths are uniform over the document's tokens (data.render
  draws a uniform sentence index instead).  The depth and the token offset of every item are
  recorded (`LongDoc.needles`; the `needles` field of the held-out jsonl lines).
* **Chains with far links.**  Variable-tracking assignments and multi-hop links (a key whose
  value is "the same as" another key's, over 1-3 hops) are placed at sorted depths at least
  `chain_gap` x (filler tokens) apart (default 0.5 / links: half of an even spread), i.e.
  about 4,000 or more tokens apart for a five-item chain at 32K, 2,000 at 16K.
* **Filler for long documents**: data.py's seven v2 styles plus the first model's prose, as one
  style, a repeated paragraph, sentence-level mixing, or sections (the style changes every
  20-400 sentences, like concatenated documents; the default for long training documents).
* **Exact token accounting for the engine's plain-text runner** (src/tokenizer/chat.cc,
  src/session/pipeline.cc): context = BOS + the context's tokens; turn i = the tokens of
  "\\n" + question + "\\n" + answer_prefix; every turn decodes up to max_new_tokens (the
  largest of the sample's turns).  A held-out sample of target L satisfies
      context + sum(turn_i) + turns x max_new_tokens <= L   (multi-turn mode, the largest need)
  and fills it to within one filler sentence.  Every segment starts with a space or newline,
  so segment token counts add up exactly (data.py's invariant); `long_eval_sample` checks the
  sum against one whole-text encode.

Everything is deterministic in the random.Random passed in.
"""

import bisect
import random

import corpus
import data

# ---------------------------------------------------------------------------- filler
FILLER_STYLES_LONG = ["prose1"] + list(data.FILLER_STYLES_V2)  # prose1: the first model's grammar


def filler_sentence(rng, style):
    if style == "prose1":
        return data.prose_sentence(rng)
    return data.filler_sentence_v2(rng, style)


class LongFiller:
    """Source of filler segments (each with its leading separator).

    mode: "fresh" (one style), "repeat" (a paragraph of 1-8 sentences repeated, the noise
    haystack), "mixed" (style switches every 3-15 sentences), "sections" (every 20-400
    sentences), or "heldout-fresh" / "heldout-repeat": exactly data.render's filler (the first
    model's prose, fresh or a 3-6 sentence paragraph, " " or 8% "\\n\\n"), so the long held-out
    families differ from the 2K ones only in length and placement."""

    def __init__(self, rng, mode=None, style=None):
        self.rng = rng
        if mode is None:
            r = rng.random()
            mode = "sections" if r < 0.45 else "mixed" if r < 0.6 else "repeat" if r < 0.8 else "fresh"
        self.mode = mode
        if mode.startswith("heldout-"):
            self.prose = data.Prose(rng, mode[len("heldout-"):])
            return
        self.style = style or rng.choice(FILLER_STYLES_LONG)
        self.left = 0
        self.lines = self.style in ("log", "notes") or rng.random() < 0.15
        if mode == "repeat":
            self.par = [filler_sentence(rng, self.style) for _ in range(rng.randint(1, 8))]
            self.i = 0

    def next(self):
        rng = self.rng
        if self.mode.startswith("heldout-"):
            return ("\n\n" if rng.random() < 0.08 else " ") + self.prose.next()
        if self.mode == "repeat":
            s = self.par[self.i % len(self.par)]
            self.i += 1
        else:
            if self.mode in ("mixed", "sections"):
                if self.left <= 0:
                    lo, hi = (3, 15) if self.mode == "mixed" else (20, 400)
                    self.style, self.left = rng.choice(FILLER_STYLES_LONG), rng.randint(lo, hi)
                    self.lines = self.style in ("log", "notes") or rng.random() < 0.15
                    if self.mode == "sections":
                        self.left -= 1
                        return "\n\n" + filler_sentence(rng, self.style)
                self.left -= 1
            s = filler_sentence(rng, self.style)
        if s.startswith(("[", "-", "*")) or self.lines:
            return "\n" + s
        return ("\n\n" if rng.random() < 0.06 else " ") + s


# Real prose (corpus.py), by split: set in the training process before its workers fork, so
# every worker reads the same lists without loading the corpus again.
REAL_DOCS = {}
REAL_SHARE = 0.0  # share of long training documents whose filler is real prose


class SectionsFiller:
    """Real prose and generator filler alternating every 20-400 segments, as concatenated
    documents of both kinds."""

    def __init__(self, rng, docs):
        self.rng = rng
        self.sources = [corpus.RealFiller(rng, docs), LongFiller(rng, "sections")]
        self.cur, self.left = 0, rng.randint(20, 400)

    def next(self):
        if self.left <= 0:
            self.cur, self.left = 1 - self.cur, self.rng.randint(20, 400)
            s = self.sources[self.cur].next().lstrip(" \n")
            return "\n\n" + s
        self.left -= 1
        return self.sources[self.cur].next()


def train_filler(rng, real_only=False):
    """The filler of one long training document: real prose (80% alone, 20% in sections with
    the generator's kinds) with probability REAL_SHARE (always with real_only), else
    LongFiller's random mode."""
    docs = REAL_DOCS.get("train")
    if docs and real_only:
        return corpus.RealFiller(rng, docs)
    if docs and rng.random() < REAL_SHARE:
        return corpus.RealFiller(rng, docs) if rng.random() < 0.8 else SectionsFiller(rng, docs)
    return LongFiller(rng)


# ---------------------------------------------------------------------------- new task shapes
LINK_TEMPLATES = [
    "The {L} of {A} is the same as the {L} of {B}.",
    "{A} shares its {L} with {B}.",
    "For {A}, use the {L} of {B}.",
    "{A} has whatever {L} {B} has.",
    "Whatever {L} {B} has, {A} has too.",
    "Note: the {L} for {A} equals the one for {B}.",
]


def task_multihop(rng, hops, n_distract, key_kind="adjnoun", value_kind="number", fact_templates=None,
                  distract_links=0, v2=False):
    """A chain K0 -> K1 -> ... -> Khops, where Khops has a value and each earlier key's value is
    "the same as" the next key's; the question asks K0's value.  Distractor facts (other keys with
    values) and distractor links (between distractor keys) go anywhere.  v2: the second model's
    question wording (training); the held-out family uses the first model's.  Chain items come first in
    t.items and are placed far apart (t.chain_n), in a random order (a link may come before or
    after the fact it points to)."""
    t = data.Task()
    n_keys = hops + 1 + n_distract + 2 * distract_links
    keys = data.unique(rng, lambda: data.make_key(rng, key_kind), n_keys)
    vals = data.unique(rng, lambda: data.make_value(rng, value_kind), 1 + n_distract + distract_links)
    label = data.label_for(rng, value_kind)
    ftmpl = rng.choice(fact_templates or data.FACT_TEMPLATES)
    ltmpl = rng.choice(LINK_TEMPLATES)
    link = lambda a, b: data.fill(ltmpl, L=label, A=a, B=b)
    chain = keys[:hops + 1]
    t.items = [link(chain[i], chain[i + 1]) for i in range(hops)]
    t.items.append(data.fill(ftmpl, L=label, K=chain[-1], V=vals[0]))
    t.roles = ["link"] * hops + ["fact"]
    rest = keys[hops + 1:]
    for j in range(n_distract):
        t.items.append(data.fill(ftmpl, L=label, K=rest[j], V=vals[1 + j]))
        t.roles.append("distractor")
    for j in range(distract_links):  # a second chain that does not lead to the asked key
        a, b = rest[n_distract + 2 * j], rest[n_distract + 2 * j + 1]
        t.items.append(link(a, b))
        t.items.append(data.fill(ftmpl, L=label, K=b, V=vals[1 + n_distract + j]))
        t.roles += ["distractor", "distractor"]
    t.chain_n, t.chain_ordered = hops + 1, False
    t.header = rng.choice(data.HEADERS) if rng.random() < 0.7 else None
    if v2:  # the second model's question templates and answer-prefix placement
        t.qblock.extend(data._qa_v2(rng, label, chain[0], vals[0], "multihop"))
    else:
        t.qblock.extend(data._qa(rng, label, chain[0], vals[0], "multihop"))
    return t


def task_near_key(rng, n_near=5):
    """research/scripts/make_eval_splits.py's near_key family (first model's templates)."""
    t = data.Task()
    keys = data.asked_and_near_keys(rng, n_near)
    vals = data.unique(rng, lambda: data.make_value(rng, "number"), len(keys))
    label = data.label_for(rng, "number")
    tmpl = rng.choice(data.FACT_TEMPLATES)
    t.items = [data.fill(tmpl, L=label, K=k, V=v) for k, v in zip(keys, vals)]
    t.header = rng.choice(data.HEADERS) if rng.random() < 0.7 else None
    t.qblock.extend(data._qa(rng, label, keys[0], vals[0], "near_key", tmpl=tmpl, echo=0.35))
    return t


# ---------------------------------------------------------------------------- placement
def spaced_depths(rng, k, gap):
    """k sorted depths, uniform in [0, 1) subject to consecutive gaps of at least gap."""
    gap = min(gap, 1.0 / max(1, k))
    span = 1.0 - (k - 1) * gap
    u = sorted(rng.random() * span for _ in range(k))
    return [x + i * gap for i, x in enumerate(u)]


def item_depths(rng, task, chain_gap):
    """Depth per item of task.items (chain items spaced, the rest iid uniform; ordered tasks keep
    their item order)."""
    n = len(task.items)
    cn = getattr(task, "chain_n", 0)
    if getattr(task, "ordered", False) and cn == 0 and n > 1 and chain_gap > 0 and getattr(task, "spread", False):
        cn = n
    depths = [None] * n
    if cn:
        ds = spaced_depths(rng, cn, chain_gap / max(1, cn - 1) if chain_gap else 0.0)
        if not getattr(task, "chain_ordered", True):
            rng.shuffle(ds)
        depths[:cn] = ds
    for i in range(cn, n):
        depths[i] = rng.random()
    if getattr(task, "ordered", False) and not cn:
        depths = sorted(depths)
    return depths


class LongDoc:
    """A placed long document: context segments, the question block and where every item is."""

    def __init__(self):
        self.segments = []  # context segments in order (the first has its leading " ")
        self.needles = []  # dicts: role, depth (requested), token (offset in the context's tokens, BOS = 0)
        self.context_tokens = 0  # BOS included
        self.filler_tokens = 0


def place(tok, rng, task, budget, filler, chain_gap=0.5, sep_newline=0.2):
    """Head, items and filler whose tokens (BOS included) are at most budget; None if the fixed
    parts do not fit.  Filler is drawn until the next sentence no longer fits (up to 8 tries for
    a shorter one), so the context lands within a sentence of the budget."""
    out = LongDoc()
    head = [" " + task.header] if task.header else []
    items = [("\n" if rng.random() < sep_newline else " ") + s for s in task.items]
    roles = getattr(task, "roles", None) or [getattr(task, "role", "fact")] * len(items)
    n_head = sum(data.ntok(tok, s) for s in head)
    n_items = [data.ntok(tok, s) for s in items]
    # (without a header, the first segment may need the document's leading space: one token)
    left = budget - 1 - n_head - sum(n_items) - (0 if head else 1)
    if left < 0:
        return None
    fill, cum, tries = [], [0], 0
    while tries < 8 and left > 2:
        s = filler.next()
        n = data.ntok(tok, s)
        if n > left:
            tries += 1
            continue
        fill.append(s)
        left -= n
        cum.append(cum[-1] + n)
    F = cum[-1]
    depths = item_depths(rng, task, chain_gap)
    slots = [bisect.bisect_left(cum, d * F) for d in depths]  # insert before filler[slot]
    order = sorted(range(len(items)), key=lambda i: (slots[i], depths[i]))
    segs = list(head)
    tokens = 1 + n_head
    j = 0
    for f_i in range(len(fill) + 1):
        while j < len(order) and slots[order[j]] == f_i:
            i = order[j]
            out.needles.append({"role": roles[i], "depth": round(depths[i], 4), "token": tokens,
                                "text": task.items[i], "tokens": n_items[i]})
            segs.append(items[i])
            tokens += n_items[i]
            j += 1
        if f_i < len(fill):
            segs.append(fill[f_i])
            tokens += cum[f_i + 1] - cum[f_i]
    if segs and not segs[0].startswith(" "):
        # The document's add_space_prefix: the context text is what follows that space.
        old = data.ntok(tok, segs[0])
        segs[0] = " " + segs[0]
        delta = data.ntok(tok, segs[0]) - old
        tokens += delta
        for nd in out.needles:
            if nd["token"] > 1:
                nd["token"] += delta
    out.segments, out.context_tokens, out.filler_tokens = segs, tokens, F
    return out


def context_text(ld):
    t = "".join(ld.segments)
    return t[1:] if t.startswith(" ") else t


# ---------------------------------------------------------------------------- held-out samples
HELDOUT_FAMILIES = data.EVAL_FAMILIES + ["near_key", "drift", "multihop"]


def heldout_task(rng, family):
    """(task, filler mode) with the 2K held-out families' fixed settings (data._make_eval_doc,
    research/scripts/make_eval_splits.py), plus multihop (2 hops, 3 distractor facts, one
    distractor chain)."""
    fresh = "heldout-fresh"
    if family == "single":
        return data.task_kv(rng, 1, 1, "single", key_kind="adjnoun", value_kind="number"), fresh
    if family == "single_uuid":
        return data.task_kv(rng, 1, 1, "single_uuid", key_kind="adjnoun", value_kind="uuid"), fresh
    if family == "multikey":
        return data.task_kv(rng, 4, 1, "multikey", key_kind="adjnoun", value_kind="number"), fresh
    if family == "dense":
        return data.task_kv(rng, 1, 1, "dense", key_kind="adjnoun", value_kind="number", dense=True), fresh
    if family == "multivalue":
        return data.task_multivalue(rng, 4, 0, key_kind="adjnoun", value_kind="number"), fresh
    if family == "multiquery":
        return data.task_kv(rng, 4, 1, "multiquery", key_kind="adjnoun", value_kind="number", multi=1.0,
                            multi_m=4), fresh
    if family == "vt":
        t = data.task_vt(rng, 4, 1)
        t.role = "assign"
        t.spread = True  # the five assignments at least 0.5/4 of the filler apart
        return t, "heldout-repeat"
    if family == "multiturn":
        return data.task_kv(rng, 8, 4, "multiturn", key_kind="adjnoun", value_kind="number"), fresh
    if family == "near_key":
        return task_near_key(rng), "heldout-repeat"
    if family == "drift":
        return data.task_kv(rng, 12, 6, "drift", key_kind="adjnoun", value_kind="number"), fresh
    if family == "multihop":
        return task_multihop(rng, 2, 3, distract_links=1), fresh
    raise ValueError(family)


def split_prompt(text):
    """As research/scripts/make_eval_splits.py: the answer prefix is the text after the last
    '? ', '. ' or ': ' of the turn's prompt."""
    body = text[1:] if text.startswith("\n") else text
    cut = max(body.rfind("? "), body.rfind(". "), body.rfind(": "))
    if cut < 0:
        return body, ""
    return body[:cut + 1], body[cut + 2:]


def qblock_turns(tok, qblock):
    """[(question, answer_prefix, refs, max_new_tokens)] from a task's question block."""
    turns, pending = [], ""
    for x in qblock:
        if x[0] == "ctx":
            pending += x[1]
        else:
            q, prefix = split_prompt(pending)
            refs = list(x[3]) if len(x) > 3 else [x[1]]
            turns.append((q, prefix, refs, len(tok.encode_segment(" " + x[1])) + 4))
            pending = ""
    return turns


def turn_tokens(tok, question, prefix):
    """The plain-text runner's turn: Encode("\\n" + question + "\\n" + prefix, no BOS); the
    tokenizer's add_space_prefix puts U+2581 before the newline."""
    return len(tok.encode("\n" + question + "\n" + prefix, bos=False))


def sample_need(ctx_tokens, turn_toks, max_new):
    """Positions the engine needs in multi-turn mode (ConversationPositions), the largest mode."""
    return ctx_tokens + sum(turn_toks) + len(turn_toks) * max_new


def long_eval_sample(tok, rng, family, length, check=True, filler_docs=None):
    """One held-out sample (a dict in the jsonl:PATH format, without id) of at most `length`
    positions, or None when the fixed parts do not fit.  filler_docs: corpus documents whose
    real prose replaces the family's generator filler."""
    if family == "freq":
        return freq_sample(tok, rng, length, check)
    task, mode = heldout_task(rng, family)
    turns = qblock_turns(tok, task.qblock)
    max_new = max(t[3] for t in turns)
    ttoks = [turn_tokens(tok, q, p) for q, p, _, _ in turns]
    budget = length - sum(ttoks) - len(ttoks) * max_new
    src = corpus.RealFiller(rng, filler_docs) if filler_docs else LongFiller(rng, mode)
    if task.dense:  # the dense family: every filler line is a distractor fact
        src.next = lambda: ("\n\n" if rng.random() < 0.08 else " ") + task.dense()
    ld = place(tok, rng, task, budget, src, chain_gap=0.5)
    if ld is None:
        return None
    ctx = context_text(ld)
    if check:
        assert len(tok.encode(ctx)) == ld.context_tokens, (len(tok.encode(ctx)), ld.context_tokens)
    refs_all = {r for t in turns for r in t[2]}
    needles = []
    for nd in ld.needles:
        asked = any(r in nd["text"] for r in refs_all)
        if family == "multihop":
            asked = nd["role"] != "distractor"
        needles.append({"depth": nd["depth"], "token": nd["token"], "role": nd["role"], "asked": asked})
    need = sample_need(ld.context_tokens, ttoks, max_new)
    assert need <= length, (need, length)
    return {"context": ctx,
            "turns": [{"question": q, "answer_prefix": p, "answers": refs, "max_new_tokens": mn}
                      for q, p, refs, mn in turns],
            "metric": "string_match_all", "family": family, "target_tokens": length,
            "tokens": {"context": ld.context_tokens, "turns": ttoks, "max_new_tokens": max_new, "need": need},
            "needles": needles}


def freq_sample(tok, rng, length, check=True, n_top=3):
    """The word-frequency family at any length: the longest word list (data.task_freq) whose
    sample fits, found by doubling then bisection on the word count."""
    sub_seed = rng.random()

    def build(nw):
        t = data.task_freq(random.Random(sub_seed), n_top, nw)
        ctx = (t.header + t.body)
        turns = qblock_turns(tok, t.qblock)
        max_new = max(x[3] for x in turns)
        ctx_tok = len(tok.encode(ctx))
        ttoks = [turn_tokens(tok, q, p) for q, p, _, _ in turns]
        return ctx, turns, ctx_tok, ttoks, max_new, sample_need(ctx_tok, ttoks, max_new)

    lo, hi, best = 8, 16, None
    while True:  # doubling
        b = build(hi)
        if b[5] > length:
            break
        best, lo, hi = (hi, b), hi, hi * 2
    hi -= 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        b = build(mid)
        if b[5] <= length:
            best, lo = (mid, b), mid
        else:
            hi = mid - 1
    if best is None:
        return None
    # The need is not monotonic in the word count (the list's counts are drawn anew for each
    # count): probe 16 counts above the bisection's answer and keep the fullest that fits.
    top = best[0]
    for k in range(1, 17):
        b = build(top + max(1, top * k // 64))
        if b[5] <= length and b[5] > best[1][5]:
            best = (top + max(1, top * k // 64), b)
    ctx, turns, ctx_tok, ttoks, max_new, need = best[1]
    return {"context": ctx,
            "turns": [{"question": q, "answer_prefix": p, "answers": refs, "max_new_tokens": mn}
                      for q, p, refs, mn in turns],
            "metric": "string_match_all", "family": "freq", "target_tokens": length,
            "tokens": {"context": ctx_tok, "turns": ttoks, "max_new_tokens": max_new, "need": need},
            "needles": []}


# ---------------------------------------------------------------------------- training documents
TRAIN_FAMILIES_LONG = {
    "multikey": 2.0,  # many facts, near-duplicate keys mixed in
    "near_key": 2.0,
    "multiturn": 3.0,  # up to 24 facts, 8 questions in a random order (drift)
    "multihop": 1.5,
    "vt": 1.5,
    "multivalue": 0.7,
    "multiquery": 0.7,
    "dense": 0.5,
    "copy": 0.8,  # a list planted anywhere, repeated at the end
}


def make_train_doc_long(tok, rng, length, difficulty, ctx_weight=0.02, value_first=0.35, short_share=0.4,
                        skill=None):
    """A training document of length+1 tokens (data.Doc: ids, weights, answers).  Documents up to
    2,048 tokens are data.make_train_doc_v2's with probability short_share (what the second
    model learned from); the rest come from this module's long placement.  skill: a family
    name: a document of that family alone, in real prose, at full difficulty (skill rows)."""
    if skill is not None:
        for _ in range(20):
            d = _make_train_doc_long(tok, rng, length, 1.0, ctx_weight, value_first, skill)
            if d is not None:
                return d
        raise RuntimeError("could not fit a %s document into %d tokens" % (skill, length))
    if length <= 2048 and rng.random() < short_share:
        return data.make_train_doc_v2(tok, rng, length, difficulty, ctx_weight, value_first=value_first)
    for _ in range(20):
        d = _make_train_doc_long(tok, rng, length, difficulty, ctx_weight, value_first)
        if d is not None:
            return d
        difficulty *= 0.7
    if length <= 2048:
        # A curriculum's shortest rows (128 tokens at toy scale) can be too short for any long
        # placement; the short generator is built for them.
        return data.make_train_doc_v2(tok, rng, length, difficulty, ctx_weight, value_first=value_first)
    raise RuntimeError("could not fit a long document into %d tokens" % length)


def _make_train_doc_long(tok, rng, length, difficulty, ctx_weight, value_first, skill=None):
    names = list(TRAIN_FAMILIES_LONG)
    fam = skill or rng.choices(names, weights=[TRAIN_FAMILIES_LONG[n] for n in names])[0]
    scale = max(1.0, length / 2048) ** 0.5  # more facts in longer documents (x4 at 32K)
    nmax = lambda lo, hi: max(lo, int(round(lo + (hi - lo) * difficulty * min(1.0, scale / 4) + (scale - 1))))
    echo = 0.25
    if fam == "multikey":
        n = rng.randint(2, nmax(4, 24))
        t = data.task_kv_v2(rng, n, rng.randint(1, min(n, 8)), "multikey", echo=echo, value_first=value_first,
                            near=rng.choice([0, 2, 3, 4]) if n >= 4 else 0)
    elif fam == "near_key":
        n = rng.randint(3, nmax(4, 12))
        t = data.task_kv_v2(rng, n, rng.randint(1, min(n, 4)), "near_key", near=rng.randint(2, n), echo=echo,
                            value_first=value_first)
    elif fam == "multiturn":
        n = rng.randint(4, nmax(6, 24))
        t = data.task_kv_v2(rng, n, rng.randint(2, min(8, n)), "multiturn", multi=0.1, echo=echo,
                            value_first=value_first, near=rng.choice([0, 0, 2, 3]))
    elif fam == "multihop":
        t = task_multihop(rng, rng.randint(1, 3), rng.randint(0, nmax(1, 8)), key_kind=rng.choice(data.KEY_KINDS_V2),
                          value_kind=rng.choice(data.VALUE_KINDS), fact_templates=data.FACT_TEMPLATES_V2,
                          distract_links=rng.randint(0, 2), v2=True)
    elif fam == "vt":
        # Skill rows are short, so their hops are not scaled by length: 2-6, held-out asks 4.
        hops = rng.randint(2, 6) if skill else rng.randint(1, nmax(2, 8))
        t = data.task_vt(rng, hops, rng.choice([1, 1, 2]))
        t.spread = rng.random() < 0.8
    elif fam == "multivalue":
        t = data.task_multivalue(rng, rng.randint(2, 4), rng.randint(0, nmax(0, 10)))
    elif fam == "multiquery":
        n = rng.randint(2, nmax(2, 12))
        t = data.task_kv_v2(rng, n, rng.randint(1, 3), "multikey", multi=1.0, echo=echo, value_first=value_first)
    elif fam == "dense":
        n = rng.randint(1, nmax(1, 6))
        t = data.task_kv_v2(rng, n, rng.randint(1, n), "dense", dense=True, echo=echo, value_first=value_first)
    else:
        t = data.task_copy(rng, min(length, 2048))
    return render_doc(tok, rng, t, length, train_filler(rng, real_only=skill is not None), ctx_weight,
                      chain_gap=rng.choice([0.0, 0.3, 0.5, 0.7]), sep_newline=0.3)


def render_doc(tok, rng, t, length, src, ctx_weight, chain_gap=0.5, sep_newline=0.2):
    """A data.Doc of length+1 tokens (BOS, context, question block with supervised answers, EOS
    padding) with the task's items placed by depth; doc.needles records them.  None if the fixed
    parts do not fit."""
    if t.dense:
        src.next = lambda: ("\n" if rng.random() < 0.5 else " ") + t.dense()
    # The document = BOS + context + question block with answers; the question block's cost:
    qcost = sum(data.ntok(tok, x[1] if x[0] == "ctx" else " " + x[1]) + (1 if x[0] == "ans" else 0)
                for x in t.qblock)
    ld = place(tok, rng, t, length + 1 - qcost - 2, src, chain_gap=chain_gap, sep_newline=sep_newline)
    if ld is None:
        return None
    doc = data.Doc(tok, ctx_weight)
    for s in ld.segments:
        doc.add(s)
    doc.context_text = doc.plain_text()
    doc.needles = ld.needles
    pending = ""
    for x in t.qblock:
        if x[0] == "ctx":
            doc.add(x[1])
            pending += x[1]
        else:
            doc.add_answer(x[1], x[2], refs=x[3] if len(x) > 3 else None)
            doc.turns.append((pending, doc.answers[-1]["refs"], x[1]))
            pending = ""
    return doc.finish(length)


def eval_doc_long(tok, rng, family, length, filler_docs=None):
    """A held-out-shaped document as a data.Doc (teacher-forced evaluation during training);
    freq is left out (its list has no placement).  filler_docs: real prose as the filler."""
    for _ in range(10):
        t, mode = heldout_task(rng, family)
        src = corpus.RealFiller(rng, filler_docs) if filler_docs else LongFiller(rng, mode)
        d = render_doc(tok, rng, t, length, src, 0.0)
        if d is not None:
            return d
    return None
