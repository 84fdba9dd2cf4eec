"""Deterministic synthetic training/evaluation data for the PrimeKV reference model.

Documents are prose-like haystacks from a seeded grammar with planted facts (key -> value),
distractor facts, variable-tracking chains and word lists, followed by questions whose
answers carry the loss.  All templates and wording are our own; they deliberately differ
from RULER's so that an evaluation with RULER's templates measures generalisation.

A document is built as a list of segments; every segment starts with a character that is
not an ASCII letter (a space or newline), so the token ids of the document equal the
concatenation of the segments' ids (see tokenizer.py) and token counts are exact.
"""

import random
import string

import words as W
from tokenizer import BOS, EOS

NUMBER_LABELS = ["code", "number", "pin", "serial number", "access code", "lucky number", "combination"]
WORD_LABELS = ["password", "word", "nickname", "secret word", "codename"]
ID_LABELS = ["id", "token", "reference", "tracking id", "ticket"]


# ---------------------------------------------------------------------------- atoms
def pseudo_word(rng, syl=None):
    n = syl or rng.choice([2, 2, 3, 3, 4])
    return "".join(rng.choice(W.ONSETS) + rng.choice(W.NUCLEI) + rng.choice(W.CODAS) for _ in range(n))


def make_number(rng, digits=None):
    d = digits or rng.choice([4, 5, 6, 7, 7, 7, 7])
    return str(rng.randint(10 ** (d - 1), 10 ** d - 1))


def make_uuid(rng):
    h = "%032x" % rng.getrandbits(128)
    return "-".join((h[:8], h[8:12], h[12:16], h[16:20], h[20:]))


def make_upper(rng, n=None):
    return "".join(rng.choice(string.ascii_uppercase) for _ in range(n or rng.choice([3, 4, 5, 5, 5, 6])))


def make_key(rng, kind):
    if kind == "adjnoun":
        return rng.choice(W.ADJECTIVES) + "-" + rng.choice(W.NOUNS)
    if kind == "pseudo":
        w = pseudo_word(rng)
        return w.capitalize() if rng.random() < 0.3 else w
    if kind == "phrase":
        return "the " + rng.choice(W.ADJECTIVES) + " " + rng.choice(W.NOUNS)
    if kind == "upper":
        return make_upper(rng)
    if kind == "uuid":
        return make_uuid(rng)
    if kind == "person":
        return rng.choice(W.PEOPLE) + " " + pseudo_word(rng, 2).capitalize()
    if kind == "noun":  # single-token keys: the easiest matching, used early in training
        return rng.choice(W.NOUNS)
    if kind == "name":
        return rng.choice(W.PEOPLE)
    raise ValueError(kind)


KEY_KINDS = ["adjnoun", "adjnoun", "pseudo", "phrase", "upper", "uuid", "person"]


def make_value(rng, kind):
    if kind == "number":
        return make_number(rng)
    if kind == "word":
        r = rng.random()
        if r < 0.4:
            return rng.choice(W.NOUNS + W.ADJECTIVES)
        if r < 0.7:
            return pseudo_word(rng)
        return rng.choice(W.ADJECTIVES) + "-" + rng.choice(W.NOUNS)
    if kind == "uuid":
        return make_uuid(rng)
    if kind == "upper":
        return make_upper(rng)
    if kind == "word1":  # one token
        return rng.choice(W.NOUNS + W.ADJECTIVES)
    if kind == "short":
        return make_number(rng, rng.choice([3, 4]))
    raise ValueError(kind)


VALUE_KINDS = ["number"] * 6 + ["word"] * 2 + ["uuid"] * 2 + ["upper"]


def label_for(rng, value_kind):
    if value_kind == "number":
        return rng.choice(NUMBER_LABELS)
    if value_kind == "word":
        return rng.choice(WORD_LABELS)
    return rng.choice(ID_LABELS)


def unique(rng, fn, n, avoid=()):
    out, seen = [], set(avoid)
    while len(out) < n:
        x = fn()
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def join_and(items):
    if len(items) == 1:
        return items[0]
    if len(items) == 2:
        return items[0] + " and " + items[1]
    return ", ".join(items[:-1]) + " and " + items[-1]


# ---------------------------------------------------------------------------- prose
def _pl(n):
    return n + "es" if n.endswith(("s", "x", "ch", "sh")) else n + "s"


def prose_sentence(rng):
    a = lambda: rng.choice(W.ADJECTIVES)
    n = lambda: rng.choice(W.NOUNS)
    p = lambda: rng.choice(W.PEOPLE)
    t = rng.randrange(14)
    if t == 0:
        return f"The {a()} {n()} {rng.choice(W.PAST_VERBS)} {rng.choice(W.PREPOSITIONS)} the {n()}."
    if t == 1:
        return f"{p()} {rng.choice(W.PAST_VERBS)} the {a()} {n()} in the {rng.choice(W.TIMES)}."
    if t == 2:
        return f"In the {rng.choice(W.TIMES)}, the {n()} was {a()}."
    if t == 3:
        return f"A {n()} {rng.choice(W.INTRANS_PAST)} {rng.choice(W.ADVERBS)}."
    if t == 4:
        return f"{p()} and {p()} {rng.choice(W.INTRANS_PAST)} {rng.choice(W.PREPOSITIONS)} the {a()} {n()}."
    if t == 5:
        return f"There was a {a()} {n()} {rng.choice(W.PREPOSITIONS)} the {n()}."
    if t == 6:
        return f"Every {rng.choice(W.TIMES)} the {_pl(n())} {rng.choice(W.INTRANS_PAST)} {rng.choice(W.ADVERBS)}."
    if t == 7:
        return f"The {n()} is {a()} and the {n()} is {a()}."
    if t == 8:
        return f"{p()} said that the {n()} {rng.choice(W.PAST_VERBS)} the {a()} {n()}."
    if t == 9:
        return f"Nobody knew why the {n()} was so {a()}."
    if t == 10:
        return f"{p()} wanted to {rng.choice(W.VERBS)} the {n()}, but the {n()} was too {a()}."
    if t == 11:
        return f"Then the {a()} {_pl(n())} {rng.choice(W.INTRANS_PAST)} {rng.choice(W.ADVERBS)} {rng.choice(W.PREPOSITIONS)} the {n()}."
    if t == 12:
        return f"It was a {a()} {rng.choice(W.TIMES)}, and {p()} {rng.choice(W.INTRANS_PAST)}."
    return f"Why would {p()} {rng.choice(W.VERBS)} a {a()} {n()}?"


class Prose:
    """A haystack source: either fresh grammar sentences or a short paragraph repeated."""

    def __init__(self, rng, mode):
        self.rng, self.mode = rng, mode
        if mode == "repeat":
            self.par = [prose_sentence(rng) for _ in range(rng.randint(3, 6))]
            self.i = 0

    def next(self):
        if self.mode == "repeat":
            s = self.par[self.i % len(self.par)]
            self.i += 1
            return s
        return prose_sentence(self.rng)


# ---------------------------------------------------------------------------- templates
FACT_TEMPLATES = [
    "Remember: the {L} for {K} is {V}.",
    "Note that the {L} of {K} is {V}.",
    "The {L} assigned to {K} is {V}.",
    "Keep in mind that {K} has the {L} {V}.",
    "For {K}, the {L} is {V}.",
    "Record: {K} -> {V}.",
    "Important: {K} uses the {L} {V}.",
    "The {L} that belongs to {K} reads {V}.",
    "{K} was given the {L} {V}.",
    "Fact: {K} = {V}.",
    "Write this down: {K}, {L} {V}.",
    "The {L} {V} is for {K}.",
    "{V} is the {L} of {K}.",
]

# (question, answer prefix) pairs; the answer follows the prefix after a space.
QUESTION_TEMPLATES = [
    ("Q: What is the {L} for {K}?", "A:"),
    ("Question: what {L} does {K} have?", "Answer:"),
    ("What was the {L} of {K}?", "The {L} of {K} was"),
    ("Tell me the {L} for {K}.", "The {L} for {K} is"),
    ("Which {L} belongs to {K}?", "It is"),
    ("Recall the {L} of {K}.", "{K}:"),
    ("Q: {K} -> ?", "A:"),
    ("Do you remember the {L} that goes with {K}?", "Yes, the {L} that goes with {K} is"),
    ("Look back at the text. What {L} was given to {K}?", "Answer:"),
    ("Please give the {L} assigned to {K}.", "The {L} assigned to {K} is"),
]

MULTI_VALUE_QUESTIONS = [
    ("Q: List every {L} given for {K}.", "A:"),
    ("Which {L}s appear for {K}? Give all of them.", "All {L}s of {K}:"),
    ("What are all the {L}s for {K}?", "The {L}s for {K} are"),
]

MULTI_QUERY_QUESTIONS = [
    ("Q: What are the {L}s for {KS}?", "A:"),
    ("Give the {L}s of {KS}.", "Here they are:"),
    ("Which {L}s belong to {KS}?", "Answer:"),
]

HEADERS = [
    "Read the text below. Some records are hidden in it, and questions about them follow at the end.",
    "The following notes contain facts worth remembering.",
    "Here is a long story. Pay attention to every code and name in it.",
    "Below is a document. Afterwards you will be quizzed on its details.",
    "Study this text closely; there will be questions.",
    "Memorize the records scattered through this passage.",
]

QUESTION_INTROS = ["Now answer the questions.", "Questions:", "Time for the quiz.", "Answer from memory."]

VT_ASSIGN = [
    ("Let {X} be {V}.", "Let {Y} be {X}."),
    ("{X} := {V}", "{Y} := {X}"),
    ("Set {X} to {V}.", "Set {Y} to {X}."),
    ("Put {V} into {X}.", "Copy {X} into {Y}."),
    ("{X} holds {V}.", "{Y} holds the same as {X}."),
]
VT_QUESTIONS = [
    ("Which names hold the value {V}?", "Names:"),
    ("Q: List every variable that ends up equal to {V}.", "A:"),
    ("Follow the assignments. Which variables carry {V}?", "They are"),
]

FREQ_QUESTIONS = [
    ("Which {N} words occur most often in the list?", "Most frequent:"),
    ("Q: Name the {N} most common words above.", "A:"),
    ("Count the words. Which {N} come up the most?", "The top {N} are"),
]


def fill(t, **kw):
    for k, v in kw.items():
        t = t.replace("{" + k + "}", v)
    return t


# ---------------------------------------------------------------------------- document builder
class Doc:
    def __init__(self, tok, ctx_weight):
        self.tok = tok
        self.ctx_weight = ctx_weight
        self.ids = [BOS]
        self.weights = [0.0]
        self.answers = []  # dicts: start, end (token indices), text, family
        self.text = ""
        self.context_text = None  # the text before the question block (set by render)
        self.turns = []  # (prompt text, reference strings, gold answer) per question

    def add(self, seg, weight=None):
        assert seg and not (seg[0].isascii() and seg[0].isalpha()), seg
        if not self.text and not seg.startswith(" "):
            seg = " " + seg  # the document's add_space_prefix
        ids = self.tok.encode_segment(seg)
        w = self.ctx_weight if weight is None else weight
        self.ids.extend(ids)
        self.weights.extend([w] * len(ids))
        self.text += seg

    def add_answer(self, ans, family, refs=None, end=".", ans_weight=1.0):
        """refs: the strings an evaluation looks for in a prediction (default: the answer)."""
        start = len(self.ids)
        self.add(" " + ans, ans_weight)
        self.answers.append({"start": start, "end": len(self.ids), "text": ans, "family": family,
                             "refs": list(refs) if refs else [ans]})
        if end:
            self.add(end, ans_weight)

    def finish(self, length):
        """Pad with EOS (weight 0) to length+1 tokens (inputs + next-token targets)."""
        assert len(self.ids) <= length + 1, (len(self.ids), length)
        pad = length + 1 - len(self.ids)
        self.ids.extend([EOS] * pad)
        self.weights.extend([0.0] * pad)
        return self

    def plain_text(self):
        return self.text[1:] if self.text.startswith(" ") else self.text


def ntok(tok, seg):
    return len(tok.encode_segment(seg))


class Task:
    """Facts to plant (inserted in order at random haystack positions) and a question block."""

    def __init__(self):
        self.header = None
        self.items = []  # strings (sentence text, starting with no space)
        self.ordered = False
        self.qblock = []  # list of ("ctx", text) / ("ans", text, family)
        self.dense = None  # callable producing distractor sentences instead of prose


def render(tok, rng, task, length, ctx_weight, prose_mode, ans_weight=1.0):
    """Fill a haystack around the task's items so the document has at most length+1 tokens."""
    doc = Doc(tok, ctx_weight)
    fixed = 1
    head = [" " + task.header] if task.header else []
    item_segs = [(" " if rng.random() < 0.8 else "\n") + s for s in task.items]
    q_segs = task.qblock
    fixed += sum(ntok(tok, s) for s in head) + sum(ntok(tok, s) for s in item_segs)
    fixed += sum(ntok(tok, x[1] if x[0] == "ctx" else " " + x[1]) + (1 if x[0] == "ans" else 0) for x in q_segs)
    budget = length + 1 - fixed - 2
    if budget < 0:
        return None
    filler = []
    src = Prose(rng, prose_mode)
    while True:
        s = task.dense() if task.dense else src.next()
        s = ("\n\n" if rng.random() < 0.08 else " ") + s
        n = ntok(tok, s)
        if n > budget:
            break
        budget -= n
        filler.append(s)
    # Positions of the items among the filler sentences.
    pos = sorted(rng.randint(0, len(filler)) for _ in item_segs)
    if not task.ordered:
        rng.shuffle(item_segs)
    body = []
    j = 0
    for i in range(len(filler) + 1):
        while j < len(pos) and pos[j] == i:
            body.append(item_segs[j])
            j += 1
        if i < len(filler):
            body.append(filler[i])
    for s in head:
        doc.add(s)
    for s in body:
        doc.add(s)
    doc.context_text = doc.plain_text()
    pending = ""
    for x in q_segs:
        if x[0] == "ctx":
            doc.add(x[1])
            pending += x[1]
        else:
            doc.add_answer(x[1], x[2], refs=x[3] if len(x) > 3 else None, ans_weight=ans_weight)
            # (prompt text since the previous answer, reference strings, the gold answer)
            doc.turns.append((pending, doc.answers[-1]["refs"], x[1]))
            pending = ""
    return doc.finish(length)


# ---------------------------------------------------------------------------- task families
def _facts(rng, n_keys, key_kind=None, value_kind=None):
    kk = key_kind or rng.choice(KEY_KINDS)
    vk = value_kind or rng.choice(VALUE_KINDS)
    keys = unique(rng, lambda: make_key(rng, kk), n_keys)
    return keys, vk, kk


def _fact_sentence(rng, tmpl, label, k, v):
    return fill(tmpl, L=label, K=k, V=v)


def echo_prefix(tmpl):
    """The fact template's own words up to the value, when the value follows the key."""
    i, j = tmpl.find("{K}"), tmpl.find("{V}")
    return tmpl[:j].rstrip() if 0 <= i < j else None


def _qa(rng, label, k, v, family, tmpl=None, echo=0.0, templates=QUESTION_TEMPLATES, sep="\n"):
    q, a = rng.choice(templates)
    e = echo_prefix(tmpl) if tmpl else None
    if e and rng.random() < echo:
        a = e
    return [("ctx", sep + fill(q, L=label, K=k)), ("ctx", " " + fill(a, L=label, K=k)), ("ans", v, family)]


def task_kv(rng, n_keys, n_questions, family, key_kind=None, value_kind=None, multi=0.0,
            fact_tmpl=None, dense=False, multi_m=None, echo=0.35):
    """n_keys facts (one label/template per doc), n_questions sequential questions (multi-turn:
    each answer is in the context of the next question). multi: probability that a question
    is a multi-query one."""
    t = Task()
    keys, vk, kk = _facts(rng, n_keys, key_kind, value_kind)
    vals = unique(rng, lambda: make_value(rng, vk), n_keys)
    label = label_for(rng, vk)
    tmpl = fact_tmpl or rng.choice(FACT_TEMPLATES)
    t.items = [_fact_sentence(rng, tmpl, label, k, v) for k, v in zip(keys, vals)]
    t.header = rng.choice(HEADERS) if rng.random() < 0.7 else None
    if dense:
        def distractor():
            k = make_key(rng, kk)
            while k in keys:
                k = make_key(rng, kk)
            return _fact_sentence(rng, tmpl, label, k, make_value(rng, vk))
        t.dense = distractor
    if rng.random() < 0.5:
        t.qblock.append(("ctx", "\n\n" + rng.choice(QUESTION_INTROS)))
    order = list(range(n_keys))
    rng.shuffle(order)
    for qi in range(n_questions):
        if n_keys >= 2 and rng.random() < multi:
            m = multi_m or rng.randint(2, min(4, n_keys))
            sel = rng.sample(range(n_keys), m)
            q, a = rng.choice(MULTI_QUERY_QUESTIONS)
            ks = join_and([keys[i] for i in sel])
            t.qblock.append(("ctx", "\n" + fill(q, L=label, KS=ks)))
            t.qblock.append(("ctx", " " + fill(a, L=label)))
            if rng.random() < 0.7:
                ans = "; ".join(f"{keys[i]}: {vals[i]}" for i in sel)
            else:
                ans = ", ".join(vals[i] for i in sel)
            t.qblock.append(("ans", ans, "multiquery", [vals[i] for i in sel]))
        else:
            i = order[qi % n_keys]
            t.qblock.extend(_qa(rng, label, keys[i], vals[i], family, tmpl=tmpl, echo=echo))
    return t


def task_multivalue(rng, n_values, n_distract, key_kind=None, value_kind=None):
    t = Task()
    vk = value_kind or rng.choice(["number"] * 3 + ["word", "uuid"])
    kk = key_kind or rng.choice(KEY_KINDS)
    keys = unique(rng, lambda: make_key(rng, kk), 1 + n_distract)
    label = label_for(rng, vk)
    tmpl = rng.choice(FACT_TEMPLATES)
    vals = unique(rng, lambda: make_value(rng, vk), n_values + n_distract)
    main = [_fact_sentence(rng, tmpl, label, keys[0], v) for v in vals[:n_values]]
    others = [_fact_sentence(rng, tmpl, label, k, v) for k, v in zip(keys[1:], vals[n_values:])]
    # The main key's values keep their order (the answer lists them in order of appearance);
    # the distractors are interleaved at random.
    slots = [0] * len(main) + [1] * len(others)
    rng.shuffle(slots)
    it_main, it_other = iter(main), iter(others)
    t.items = [next(it_main) if s == 0 else next(it_other) for s in slots]
    t.ordered = True
    t.header = rng.choice(HEADERS) if rng.random() < 0.7 else None
    q, a = rng.choice(MULTI_VALUE_QUESTIONS)
    t.qblock = [("ctx", "\n" + fill(q, L=label, K=keys[0])), ("ctx", " " + fill(a, L=label, K=keys[0])),
                ("ans", ", ".join(vals[:n_values]), "multivalue", vals[:n_values])]
    return t


def task_copy(rng, length, kind=None, dense=False):
    """A list planted early and repeated at the end (every token of the repeat is supervised):
    the plain copying that retrieval builds on."""
    t = Task()
    kind = kind or rng.choice(["number", "number", "word", "uuid", "upper", "fact", "word1"])
    per = {"number": 8, "word": 3, "uuid": 34, "upper": 6, "fact": 16, "word1": 2}[kind]
    n = rng.randint(2, max(2, min(32, length // (3 * per))))
    if dense:  # the list fills most of the document
        n = max(2, int(length * rng.uniform(0.3, 0.45)) // per)
    if kind == "word1":  # distinct one-token words: copying by single-token matching
        items = rng.sample(W.NOUNS + W.ADJECTIVES, n)
        sep = rng.choice([", ", " "])
    elif kind == "fact":
        label = label_for(rng, "number")
        tmpl = rng.choice(FACT_TEMPLATES)
        items = [fill(tmpl, L=label, K=make_key(rng, rng.choice(KEY_KINDS[:4])), V=make_number(rng)) for _ in range(n)]
        sep = " "
    else:
        items = [make_value(rng, kind) for _ in range(n)]
        sep = rng.choice([", ", "; ", " "])
    text = sep.join(items)
    head = rng.choice(["List:", "Sequence:", "Items:", "Keep this:"])
    t.items = [head + " " + text + "."]
    t.header = rng.choice(HEADERS) if rng.random() < 0.3 and not dense else None
    q = rng.choice(["Repeat the list.", "Write the items again, in order.", "Copy the sequence from above."])
    t.qblock = [("ctx", "\n" + q), ("ctx", "\n" + head), ("ans", text, "copy")]
    return t


def task_vt(rng, n_hops, n_chains):
    t = Task()
    assign, copy = rng.choice(VT_ASSIGN)
    nlen = rng.choice([3, 4, 5, 5, 5])
    names = unique(rng, lambda: make_upper(rng, nlen), (n_hops + 1) * n_chains)
    values = unique(rng, lambda: make_number(rng, 5), n_chains)
    chains = [names[c * (n_hops + 1):(c + 1) * (n_hops + 1)] for c in range(n_chains)]
    stmts = []
    for c, ch in enumerate(chains):
        s = [fill(assign, X=ch[0], V=values[c])] + [fill(copy, Y=ch[i + 1], X=ch[i]) for i in range(n_hops)]
        stmts.append(s)
    # Interleave chains while keeping each chain's order.
    items = []
    idx = [0] * n_chains
    while any(idx[c] < len(stmts[c]) for c in range(n_chains)):
        c = rng.choice([c for c in range(n_chains) if idx[c] < len(stmts[c])])
        items.append(stmts[c][idx[c]])
        idx[c] += 1
    t.items = items
    t.ordered = True
    t.header = "Track the variables: each line gives one a value." if rng.random() < 0.5 else None
    c = rng.randrange(n_chains)
    q, a = rng.choice(VT_QUESTIONS)
    t.qblock = [("ctx", "\n" + fill(q, V=values[c])), ("ctx", " " + a), ("ans", ", ".join(chains[c]), "vt", chains[c])]
    return t


def task_freq(rng, n_top, length_words):
    """A word list where n_top words are clearly the most frequent."""
    t = Task()
    pool = rng.choice([W.NOUNS, W.ADJECTIVES, None])
    nvocab = max(n_top + 2, length_words // 2)
    if pool is None:
        vocab = unique(rng, lambda: pseudo_word(rng, 2), nvocab)
    else:
        vocab = rng.sample(pool, min(len(pool), nvocab))
        vocab += unique(rng, lambda: pseudo_word(rng, 2), nvocab - len(vocab), avoid=vocab)
    top, rest = vocab[:n_top], vocab[n_top:]
    hi = rng.randint(4, 8)
    counts = {w: hi + rng.randint(0, 2) for w in top}
    total_top = sum(counts.values())
    k = max(0, length_words - total_top)
    lo_max = max(1, min(hi - 2, 2))
    for w in rest:
        if k <= 0:
            break
        c = rng.randint(1, lo_max)
        counts[w] = c
        k -= c
    seq = [w for w, c in counts.items() for _ in range(c)]
    rng.shuffle(seq)
    style = rng.randrange(3)
    if style == 0:
        body = " " + ", ".join(seq) + "."
    elif style == 1:
        body = "".join(f" {i + 1}. {w}" for i, w in enumerate(seq))
    else:
        body = "".join(f"\n- {w}" for w in seq)
    t.header = "Here is a list of words." if rng.random() < 0.5 else "Look at these words; some repeat."
    t.body = body
    ordered = sorted(top, key=lambda w: (-counts[w], seq.index(w)))
    q, a = rng.choice(FREQ_QUESTIONS)
    t.qblock = [("ctx", "\n" + fill(q, N=str(n_top))), ("ctx", " " + fill(a, N=str(n_top))),
                ("ans", ", ".join(ordered), "freq", ordered)]
    return t


def render_freq(tok, rng, length, ctx_weight, n_top=None):
    """Largest word list that fits (step search)."""
    n_top = n_top or rng.choice([1, 2, 3, 3, 5])
    lo, hi = 8, 600
    best = None
    # Tokens per word is roughly 1-3; search the word count.
    sub_seed = rng.random()
    for _ in range(8):
        mid = (lo + hi) // 2
        sub = random.Random(sub_seed)
        t = task_freq(sub, n_top, mid)
        doc = Doc(tok, ctx_weight)
        doc.add(" " + t.header)
        doc.add(t.body)
        doc.context_text = doc.plain_text()
        pending = ""
        for x in t.qblock:
            if x[0] == "ctx":
                doc.add(x[1])
                pending += x[1]
            else:
                doc.add_answer(x[1], x[2], refs=x[3])
                doc.turns.append((pending, doc.answers[-1]["refs"], x[1]))
                pending = ""
        if len(doc.ids) <= length + 1:
            best, lo = doc, mid + 1
        else:
            hi = mid - 1
        if lo > hi:
            break
    return best.finish(length) if best else None


# ---------------------------------------------------------------------------- sampling
TRAIN_FAMILIES = {
    # name: weight
    "single": 2.0,
    "multikey": 3.0,
    "dense": 1.5,
    "multivalue": 1.0,
    "multiquery": 1.0,
    "multiturn": 3.0,
    "vt": 1.5,
    "freq": 0.6,
    "copy": 1.0,
}


def make_train_doc(tok, rng, length, difficulty, ctx_weight=0.02, families=None):
    """difficulty in [0, 1] scales the number of facts and hops.  Retries with easier
    settings when the sampled task does not fit the length."""
    for _ in range(20):
        d = _make_train_doc(tok, rng, length, difficulty, ctx_weight, families)
        if d is not None:
            return d
        difficulty *= 0.7
    raise RuntimeError("could not fit a document into %d tokens" % length)


def _make_train_doc(tok, rng, length, difficulty, ctx_weight, families):
    fams = dict(families or TRAIN_FAMILIES)
    # Early on: more plain copying and single-token keys, and prefixes that echo the fact.
    easy = 1.0 - difficulty
    if "copy" in fams:
        fams["copy"] = fams["copy"] * (0.5 + 3.0 * easy)
    kk = rng.choice(["noun", "noun", "name"]) if rng.random() < 0.6 * easy else None
    echo = 0.3 + 0.4 * easy
    names = list(fams)
    fam = rng.choices(names, weights=[fams[n] for n in names])[0]
    if difficulty < 0.35 and rng.random() < 0.8 * (0.35 - difficulty) / 0.35:
        # Warm-up tasks in the style of multi-query associative recall: one-token keys and
        # values, every fact asked, or copying a list of distinct one-token words.
        if rng.random() < 0.4:
            t = task_copy(rng, length, kind=rng.choice(["word1", "word1", "number", "upper"]), dense=True)
        else:
            n = rng.randint(max(2, length // 40), max(2, min(16, length // 16)))
            t = task_kv(rng, n, n, "mqar", key_kind=rng.choice(["noun", "name"]) if n <= 10 else "noun",
                        value_kind=rng.choice(["word1", "short"]), echo=0.6)
            t.header = None
        return render(tok, rng, t, length, ctx_weight, "fresh")
    prose = "repeat" if rng.random() < 0.25 else "fresh"
    # Short documents hold fewer facts; a rough cap of one fact per 24 tokens.
    cap = max(1, length // 24)
    dmax = lambda lo, hi: min(cap, max(lo, int(round(lo + (hi - lo) * difficulty))))
    if kk == "name":
        cap = min(cap, 10)
    if fam == "single":
        t = task_kv(rng, 1, rng.randint(1, 2), "single", key_kind=kk, echo=echo)
    elif fam == "multikey":
        n = rng.randint(2, dmax(2, 16))
        t = task_kv(rng, n, rng.randint(1, min(n, 8)), "multikey", key_kind=kk, echo=echo)
    elif fam == "dense":
        n = rng.randint(1, dmax(1, 4))
        t = task_kv(rng, n, rng.randint(1, n), "dense", dense=True, key_kind=kk, echo=echo)
    elif fam == "multivalue":
        t = task_multivalue(rng, rng.randint(2, 4), rng.randint(0, dmax(0, 6)), key_kind=kk)
    elif fam == "multiquery":
        n = rng.randint(2, dmax(2, 10))
        t = task_kv(rng, n, rng.randint(1, 3), "multikey", multi=1.0, key_kind=kk, echo=echo)
    elif fam == "multiturn":
        n = rng.randint(2, dmax(3, 16))
        t = task_kv(rng, n, rng.randint(2, 8), "multiturn", multi=0.2, key_kind=kk, echo=echo)
    elif fam == "copy":
        t = task_copy(rng, length)
    elif fam == "vt":
        hops = rng.randint(1, dmax(1, 5))
        t = task_vt(rng, hops, rng.choice([1, 1, 2]) if length >= 256 else 1)
        prose = "repeat" if rng.random() < 0.6 else "fresh"
    else:
        return render_freq(tok, rng, length, ctx_weight)
    return render(tok, rng, t, length, ctx_weight, prose)


# Evaluation families: fixed settings, our own templates (RULER-like shapes).
EVAL_FAMILIES = ["single", "single_uuid", "multikey", "dense", "multivalue", "multiquery", "vt", "freq", "multiturn"]


def make_eval_doc(tok, rng, family, length):
    """None when the family's fixed setting does not fit the length (after a few draws)."""
    for _ in range(10):
        d = _make_eval_doc(tok, rng, family, length)
        if d is not None:
            return d
    return None


def _make_eval_doc(tok, rng, family, length):
    if family == "single":
        t = task_kv(rng, 1, 1, "single", key_kind="adjnoun", value_kind="number")
        return render(tok, rng, t, length, 0.0, "fresh")
    if family == "single_uuid":
        t = task_kv(rng, 1, 1, "single_uuid", key_kind="adjnoun", value_kind="uuid")
        return render(tok, rng, t, length, 0.0, "fresh")
    if family == "multikey":
        t = task_kv(rng, 4, 1, "multikey", key_kind="adjnoun", value_kind="number")
        return render(tok, rng, t, length, 0.0, "fresh")
    if family == "dense":
        t = task_kv(rng, 1, 1, "dense", key_kind="adjnoun", value_kind="number", dense=True)
        return render(tok, rng, t, length, 0.0, "fresh")
    if family == "multivalue":
        t = task_multivalue(rng, 4, 0, key_kind="adjnoun", value_kind="number")
        return render(tok, rng, t, length, 0.0, "fresh")
    if family == "multiquery":
        t = task_kv(rng, 4, 1, "multiquery", key_kind="adjnoun", value_kind="number", multi=1.0, multi_m=4)
        return render(tok, rng, t, length, 0.0, "fresh")
    if family == "vt":
        t = task_vt(rng, 4, 1)
        return render(tok, rng, t, length, 0.0, "repeat")
    if family == "freq":
        return render_freq(tok, rng, length, 0.0, n_top=3)
    if family == "multiturn":
        t = task_kv(rng, 8, 4, "multiturn", key_kind="adjnoun", value_kind="number")
        return render(tok, rng, t, length, 0.0, "fresh")
    raise ValueError(family)


def tokenizer_corpus(seed, n_docs=200):
    """Text for training the tokenizer: the generator's own wording."""
    rng = random.Random(seed)
    out = []
    for _ in range(n_docs):
        out.append(" ".join(prose_sentence(rng) for _ in range(20)))
        out.append("\n".join(prose_sentence(rng) for _ in range(5)))
        # Random strings (uuids, upper-case names) stay out: their letter pairs are noise.
        vk = rng.choice(["number", "word"])
        kk = rng.choice(["adjnoun", "pseudo", "phrase", "person"])
        label = label_for(rng, vk)
        for tm in FACT_TEMPLATES:
            out.append(fill(tm, L=label, K=make_key(rng, kk), V=make_value(rng, vk)))
        for q, a in QUESTION_TEMPLATES + MULTI_VALUE_QUESTIONS + MULTI_QUERY_QUESTIONS:
            out.append(fill(q, L=label, K=make_key(rng, kk), KS=make_key(rng, kk)) + " " + fill(a, L=label, K="x"))
        for a, c in VT_ASSIGN:
            out.append(fill(a, X="X", V=make_number(rng, 5)) + " " + fill(c, X="X", Y="Y"))
        for q, a in VT_QUESTIONS + FREQ_QUESTIONS:
            out.append(fill(q, V="1", N="3") + " " + fill(a, N="3"))
        out.extend(HEADERS + QUESTION_INTROS)
        out.append("\n".join(q for q, a in QUESTION_TEMPLATES + VT_QUESTIONS + FREQ_QUESTIONS))
        out.append("\n".join(["List:", "Sequence:", "Items:", "Keep this:", "Repeat the list.", "Copy the sequence from above.", "Write the items again, in order."]))
        out.append(" ".join(pseudo_word(rng) for _ in range(10)))
    return out


# ============================================================================ second model ("v2")
# Training data of the second reference model (models/primekv-retrieval-2.md).  Everything above
# is unchanged, so the first model's recipe and the held-out sets
# (research/scripts/make_eval_splits.py, tools/train/make_heldout.py) draw the same documents.
# v2 adds variety, not the evaluation's wording: more filler kinds (reports, logs with times and
# counts, dialogue, notes, lists, short or long repeated paragraphs, topic switches), more fact
# and question templates and labels,
# facts of one document in several templates, answer prefixes on the question's line or the
# next one (the engine's plain-text runner puts them on the next line), and distractor facts
# whose keys share words with the asked key (near duplicates) in every key kind.

FACT_TEMPLATES_V2 = FACT_TEMPLATES + [
    "Please remember that the {L} for {K} is {V}.",
    "According to the records, {K} has {L} {V}.",
    "The {L} of {K}: {V}.",
    "Entry for {K} ({L}): {V}.",
    "Do not forget: {K} goes with {V}.",
    "It was noted that the {L} for {K} is {V}.",
    "{K} -- {L} {V}.",
    "As agreed, {K} keeps the {L} {V}.",
    "The register lists {K} with the {L} {V}.",
    "Someone wrote that {K} had the {L} {V}.",
    "For the record, the {L} of {K} equals {V}.",
    "Memo: {L} for {K} = {V}.",
    "The {L} given to {K} was {V}.",
    "{K}'s {L} is {V}.",
    "Under {K}, the ledger shows {V}.",
    "We set the {L} for {K} to {V}.",
    "Key {K}, value {V}.",
    "Item {K} carries the {L} {V}.",
]

QUESTION_TEMPLATES_V2 = QUESTION_TEMPLATES + [
    ("What is the {L} of {K}?", "The {L} of {K} is"),
    ("Find the {L} for {K} in the text.", "Found:"),
    ("According to the text, which {L} does {K} have?", "{K} has the {L}"),
    ("Q: {L} of {K}?", "A:"),
    ("Which value was recorded for {K}?", "The value is"),
    ("I need the {L} for {K}.", "Here it is:"),
    ("Name the {L} that was given to {K}.", "The {L} was"),
    ("From the passage: what {L} belongs to {K}?", "Answer:"),
    ("What did the text say the {L} for {K} was?", "It said"),
    ("{K}: what is its {L}?", "Its {L} is"),
    ("Search the document for {K}. What {L} is listed?", "Listed {L}:"),
    ("Give only the {L} of {K}.", "Answer:"),
]

NUMBER_LABELS_V2 = NUMBER_LABELS + ["room number", "account number", "order number", "locker code",
                                    "badge number", "batch number", "secret number", "magic number"]
WORD_LABELS_V2 = WORD_LABELS + ["passphrase", "keyword", "motto", "call sign", "secret name"]
ID_LABELS_V2 = ID_LABELS + ["key", "identifier", "voucher", "permit", "license"]

HEADERS_V2 = HEADERS + [
    "A record of the season follows. Facts are buried in it.",
    "Below are assorted notes from the archive.",
    "The following report mixes ordinary news with a few entries to remember.",
    "Read carefully. Questions come after the document.",
    "This is a long log. Some lines matter later.",
]

QUESTION_INTROS_V2 = QUESTION_INTROS + ["Now the questions.", "Please answer.", "Quiz:", "Answer briefly."]


# Facts that state the value before the key: the model must find the key and answer with the
# number before it, which the first training stage under-weighted (its held-out failures were
# mostly these).  Used by the continuation stage (make_train_doc_v2(value_first=...)).
VALUE_FIRST_TEMPLATES = [
    "The {L} {V} is for {K}.",
    "{V} is the {L} of {K}.",
    "The {L} {V} belongs to {K}.",
    "{V} was the {L} given to {K}.",
    "{V}: that is the {L} of {K}.",
    "A {L} of {V} was assigned to {K}.",
    "The value {V} goes with {K}.",
    "{V} is what {K} uses as its {L}.",
    "It is {V} that serves as the {L} for {K}.",
    "The {L} {V} was recorded for {K}.",
]


def label_for_v2(rng, value_kind):
    if value_kind == "number":
        return rng.choice(NUMBER_LABELS_V2)
    if value_kind == "word":
        return rng.choice(WORD_LABELS_V2)
    return rng.choice(ID_LABELS_V2)


def _clock(rng):
    return "%d:%02d" % (rng.randint(1, 12), rng.choice(range(0, 60, 5)))


def filler_sentence_v2(rng, style):
    """One filler sentence in one of several styles (none of the evaluation generators' text)."""
    a = lambda: rng.choice(W.ADJECTIVES)
    n = lambda: rng.choice(W.NOUNS)
    p = lambda: rng.choice(W.PEOPLE)
    if style == "prose":
        return prose_sentence(rng)
    if style == "report":
        t = rng.randrange(8)
        if t == 0:
            return f"The {rng.choice(W.TOPICS)} this {rng.choice(W.TIMES)} was {a()}, and the {n()} stayed {a()}."
        if t == 1:
            return f"The {rng.choice(W.ROLES)} from the {n()} said the {rng.choice(W.TOPICS)} would improve."
        if t == 2:
            return f"Reports from the {a()} {n()} mention a {a()} {n()} near the {n()}."
        if t == 3:
            return f"On {rng.choice(W.WEEKDAYS)} the {rng.choice(W.ROLES)} {rng.choice(W.PAST_VERBS)} the {n()}."
        if t == 4:
            return f"In {rng.choice(W.MONTHS)} the {_pl(n())} of the {n()} were {a()}."
        if t == 5:
            return f"Most of the {rng.choice(W.TOPICS)} happened {rng.choice(W.PREPOSITIONS)} the {a()} {n()}."
        if t == 6:
            return f"The {rng.choice(W.ROLES)} and the {rng.choice(W.ROLES)} disagreed about the {n()}."
        return f"Nothing {a()} was seen at the {n()} that {rng.choice(W.TIMES)}."
    if style == "log":
        t = rng.randrange(4)
        if t == 0:
            return f"[{_clock(rng)}] {rng.choice(W.UNITS)} {rng.choice(W.LOG_EVENTS)} at the {n()}."
        if t == 1:
            return f"[{_clock(rng)}] the {rng.choice(W.ROLES)} {rng.choice(W.LOG_EVENTS)} {rng.randint(2, 40)} {rng.choice(W.UNITS)}."
        if t == 2:
            return f"{rng.choice(W.WEEKDAYS)}: {rng.choice(W.TOPICS)} {rng.choice(W.LOG_EVENTS)}, all {a()}."
        return f"Shift {rng.randint(1, 4)}: {p()} {rng.choice(W.LOG_EVENTS)} the {n()}."
    if style == "dialogue":
        t = rng.randrange(4)
        if t == 0:
            return f'{p()} said: "The {n()} is {a()} today."'
        if t == 1:
            return f'"Did you see the {a()} {n()}?" asked {p()}.'
        if t == 2:
            return f'{p()}: "I will {rng.choice(W.VERBS)} the {n()} {rng.choice(W.ADVERBS)}."'
        return f'"Not yet," {p()} answered, "the {n()} is still {a()}."'
    if style == "notes":
        t = rng.randrange(4)
        if t == 0:
            return f"- {rng.choice(W.VERBS)} the {a()} {n()}"
        if t == 1:
            return f"* {n()} and {n()} by {rng.choice(W.WEEKDAYS)}"
        if t == 2:
            return f"- ask {p()} about the {n()}"
        return f"* {rng.randint(2, 30)} {rng.choice(W.UNITS)} of {_pl(n())}"
    if style == "simple":  # short "The X is Y." sentences, the noise-paragraph style
        t = rng.randrange(3)
        if t == 0:
            return f"The {n()} is {a()}."
        if t == 1:
            return f"The {_pl(n())} are {a()}."
        return f"{rng.choice(['Here', 'There'])} the {n()} {rng.choice(W.INTRANS_PAST)}."
    raise ValueError(style)


FILLER_STYLES_V2 = ["prose", "prose", "report", "log", "dialogue", "notes", "simple"]


class FillerV2:
    """Haystack source for v2: one style or a mix that switches style every few sentences, or a
    paragraph of 1-8 sentences (any style) repeated."""

    def __init__(self, rng):
        self.rng = rng
        r = rng.random()
        self.mode = "repeat" if r < 0.3 else ("mixed" if r < 0.55 else "fresh")
        self.style = rng.choice(FILLER_STYLES_V2)
        self.left = 0
        if self.mode == "repeat":
            self.par = [filler_sentence_v2(rng, self.style) for _ in range(rng.randint(1, 8))]
            self.i = 0

    def next(self):
        rng = self.rng
        if self.mode == "repeat":
            s = self.par[self.i % len(self.par)]
            self.i += 1
            return s
        if self.mode == "mixed":
            if self.left <= 0:
                self.style, self.left = rng.choice(FILLER_STYLES_V2), rng.randint(3, 15)
            self.left -= 1
        s = filler_sentence_v2(rng, self.style)
        return s


def render_v2(tok, rng, task, length, ctx_weight, ans_weight=1.0):
    """render() with a v2 filler (lines of notes/logs/dialogue go on their own line)."""
    doc = Doc(tok, ctx_weight)
    fixed = 1
    head = [" " + task.header] if task.header else []
    item_segs = [(" " if rng.random() < 0.7 else "\n") + s for s in task.items]
    fixed += sum(ntok(tok, s) for s in head) + sum(ntok(tok, s) for s in item_segs)
    fixed += sum(ntok(tok, x[1] if x[0] == "ctx" else " " + x[1]) + (1 if x[0] == "ans" else 0) for x in task.qblock)
    budget = length + 1 - fixed - 2
    if budget < 0:
        return None
    src = FillerV2(rng)
    lines = src.style in ("log", "notes") or rng.random() < 0.15
    filler = []
    while True:
        s = task.dense() if task.dense else src.next()
        if s.startswith(("[", "-", "*")) or lines:
            s = "\n" + s
        else:
            s = ("\n\n" if rng.random() < 0.06 else " ") + s
        n = ntok(tok, s)
        if n > budget:
            break
        budget -= n
        filler.append(s)
    pos = sorted(rng.randint(0, len(filler)) for _ in item_segs)
    if not task.ordered:
        rng.shuffle(item_segs)
    body, j = [], 0
    for i in range(len(filler) + 1):
        while j < len(pos) and pos[j] == i:
            body.append(item_segs[j])
            j += 1
        if i < len(filler):
            body.append(filler[i])
    for s in head + body:
        doc.add(s)
    doc.context_text = doc.plain_text()
    pending = ""
    for x in task.qblock:
        if x[0] == "ctx":
            doc.add(x[1])
            pending += x[1]
        else:
            doc.add_answer(x[1], x[2], refs=x[3] if len(x) > 3 else None, ans_weight=ans_weight)
            doc.turns.append((pending, doc.answers[-1]["refs"], x[1]))
            pending = ""
    return doc.finish(length)


def asked_and_near_keys(rng, n_near):
    """The held-out near_key family's keys: an asked adjective-noun key first, then n_near
    distinct distractors that share its adjective or its noun."""
    adj, noun = rng.choice(W.ADJECTIVES), rng.choice(W.NOUNS)
    keys, seen = [adj + "-" + noun], {adj + "-" + noun}
    while len(keys) < 1 + n_near:
        k = (adj + "-" + rng.choice(W.NOUNS)) if rng.random() < 0.5 else (rng.choice(W.ADJECTIVES) + "-" + noun)
        if k not in seen:
            seen.add(k)
            keys.append(k)
    return keys


def near_keys(rng, kind, n):
    """n distinct keys of one kind where most share a word (or a prefix) with the first."""
    first = make_key(rng, kind)
    keys, seen = [first], {first}
    tries = 0
    while len(keys) < n and tries < 50 * n:
        tries += 1
        if rng.random() < 0.2:
            k = make_key(rng, kind)  # an unrelated key now and then
        elif kind == "adjnoun":
            a, b = first.split("-", 1)
            k = (a + "-" + rng.choice(W.NOUNS)) if rng.random() < 0.5 else (rng.choice(W.ADJECTIVES) + "-" + b)
        elif kind == "phrase":
            ws = first.split()
            k = ("the " + ws[1] + " " + rng.choice(W.NOUNS)) if rng.random() < 0.5 else (
                "the " + rng.choice(W.ADJECTIVES) + " " + ws[2])
        elif kind == "person":
            f, s = first.split(" ", 1)
            k = (f + " " + pseudo_word(rng, 2).capitalize()) if rng.random() < 0.6 else (rng.choice(W.PEOPLE) + " " + s)
        elif kind == "pseudo":
            k = first[:max(2, len(first) // 2)] + pseudo_word(rng, rng.choice([1, 2]))
        elif kind == "upper":
            k = first[:rng.randint(1, max(1, len(first) - 1))] + make_upper(rng, rng.randint(1, 3))
        elif kind == "uuid":
            k = first[:rng.choice([4, 8, 13])] + make_uuid(rng)[rng.choice([4, 8, 13]):]
            k = k[:36] if len(k) >= 36 else make_uuid(rng)
        else:
            k = make_key(rng, kind)
        if k not in seen:
            seen.add(k)
            keys.append(k)
    while len(keys) < n:
        k = make_key(rng, kind)
        if k not in seen:
            seen.add(k)
            keys.append(k)
    return keys


KEY_KINDS_V2 = ["adjnoun", "adjnoun", "adjnoun", "pseudo", "phrase", "upper", "uuid", "person"]


def _qa_v2(rng, label, k, v, family, tmpl=None, echo=0.0):
    q, a = rng.choice(QUESTION_TEMPLATES_V2)
    e = echo_prefix(tmpl) if tmpl else None
    if e and rng.random() < echo:
        a = e
    sep = "\n" if rng.random() < 0.6 else " "
    return [("ctx", "\n" + fill(q, L=label, K=k)), ("ctx", sep + fill(a, L=label, K=k)), ("ans", v, family)]


def task_kv_v2(rng, n_keys, n_questions, family, key_kind=None, value_kind=None, near=0, multi=0.0,
               dense=False, echo=0.3, value_first=0.0):
    """task_kv with v2 templates: the first `near` keys share words with each other (near
    duplicates), the rest are unrelated; one template per document or (30%) one per fact;
    questions visit the facts in a random order and may come back to one already asked."""
    t = Task()
    kk = key_kind or rng.choice(KEY_KINDS_V2)
    vk = value_kind or rng.choice(VALUE_KINDS)
    keys = near_keys(rng, kk, near) if near else []
    seen = set(keys)
    while len(keys) < n_keys:
        k = make_key(rng, kk)
        if k not in seen:
            seen.add(k)
            keys.append(k)
    keys = keys[:n_keys]
    vals = unique(rng, lambda: make_value(rng, vk), n_keys)
    label = label_for_v2(rng, vk)
    per_fact = rng.random() < 0.3
    pool = FACT_TEMPLATES_V2
    if value_first and rng.random() < value_first:
        pool = VALUE_FIRST_TEMPLATES
    tmpl0 = rng.choice(pool)
    tmpls = [rng.choice(pool) if per_fact else tmpl0 for _ in keys]
    t.items = [fill(tm, L=label, K=k, V=v) for tm, k, v in zip(tmpls, keys, vals)]
    t.header = rng.choice(HEADERS_V2) if rng.random() < 0.6 else None
    if dense:
        def distractor():
            k = near_keys(rng, kk, 2)[1] if rng.random() < 0.5 else make_key(rng, kk)
            while k in seen:
                k = make_key(rng, kk)
            return fill(rng.choice(tmpls), L=label, K=k, V=make_value(rng, vk))
        t.dense = distractor
    if rng.random() < 0.4:
        t.qblock.append(("ctx", "\n\n" + rng.choice(QUESTION_INTROS_V2)))
    # Near-duplicate documents ask one of the near keys first.
    order = list(range(n_keys))
    rng.shuffle(order)
    if near and rng.random() < 0.8:
        i0 = rng.randrange(min(near, n_keys))
        order.remove(i0)
        order.insert(0, i0)
    for qi in range(n_questions):
        if n_keys >= 2 and rng.random() < multi:
            m = rng.randint(2, min(4, n_keys))
            sel = rng.sample(range(n_keys), m)
            q, a = rng.choice(MULTI_QUERY_QUESTIONS)
            ks = join_and([keys[i] for i in sel])
            t.qblock.append(("ctx", "\n" + fill(q, L=label, KS=ks)))
            t.qblock.append(("ctx", ("\n" if rng.random() < 0.6 else " ") + fill(a, L=label)))
            ans = "; ".join(f"{keys[i]}: {vals[i]}" for i in sel) if rng.random() < 0.7 else ", ".join(vals[i] for i in sel)
            t.qblock.append(("ans", ans, "multiquery", [vals[i] for i in sel]))
        else:
            i = order[qi] if qi < n_keys and rng.random() < 0.9 else rng.randrange(n_keys)
            t.qblock.extend(_qa_v2(rng, label, keys[i], vals[i], family, tmpl=tmpls[i], echo=echo))
    return t


TRAIN_FAMILIES_V2 = {
    "single": 1.0,
    "multikey": 2.5,
    "near_key": 3.0,
    "dense": 1.0,
    "multivalue": 1.0,
    "multiquery": 1.0,
    "multiturn": 3.0,
    "vt": 1.0,
    "freq": 0.3,
    "copy": 0.5,
}


def make_train_doc_v2(tok, rng, length, difficulty, ctx_weight=0.02, value_first=0.0):
    """value_first: share of key-value documents whose facts state the value first (0 in the
    first stage; the continuation stage used 0.35)."""
    for _ in range(20):
        d = _make_train_doc_v2(tok, rng, length, difficulty, ctx_weight, value_first)
        if d is not None:
            return d
        difficulty *= 0.7
    raise RuntimeError("could not fit a document into %d tokens" % length)


def _make_train_doc_v2(tok, rng, length, difficulty, ctx_weight, value_first=0.0):
    # A quarter of the documents come from the first model's generator (its filler and
    # templates), so nothing it learned from is left out.
    if rng.random() < 0.25:
        # (its warm-up tasks are sized for documents up to 512 tokens)
        d = difficulty if length <= 512 else max(difficulty, 0.35)
        return _make_train_doc(tok, rng, length, d, ctx_weight, None)
    fams = dict(TRAIN_FAMILIES_V2)
    easy = 1.0 - difficulty
    fams["copy"] *= 0.5 + 3.0 * easy
    names = list(fams)
    fam = rng.choices(names, weights=[fams[n] for n in names])[0]
    kk = rng.choice(["noun", "name"]) if rng.random() < 0.4 * easy else None
    echo = 0.2 + 0.4 * easy
    cap = max(1, length // 24)
    dmax = lambda lo, hi: min(cap, max(lo, int(round(lo + (hi - lo) * difficulty))))
    if kk is not None and fam == "near_key":
        kk = None  # one-word keys have no near duplicates
    if fam == "single":
        t = task_kv_v2(rng, 1, rng.randint(1, 2), "single", key_kind=kk, echo=echo, value_first=value_first)
    elif fam == "multikey":
        n = rng.randint(2, dmax(2, 16))
        t = task_kv_v2(rng, n, rng.randint(1, min(n, 8)), "multikey", key_kind=kk, echo=echo, value_first=value_first,
                       near=rng.choice([0, 0, 2, 3]) if n >= 3 else 0)
    elif fam == "near_key":
        n = rng.randint(2, dmax(3, 10))
        t = task_kv_v2(rng, n, rng.randint(1, min(n, 4)), "near_key", near=rng.randint(2, n), echo=echo, value_first=value_first)
    elif fam == "dense":
        n = rng.randint(1, dmax(1, 4))
        t = task_kv_v2(rng, n, rng.randint(1, n), "dense", dense=True, key_kind=kk, echo=echo, value_first=value_first)
    elif fam == "multivalue":
        t = task_multivalue(rng, rng.randint(2, 4), rng.randint(0, dmax(0, 6)), key_kind=kk)
    elif fam == "multiquery":
        n = rng.randint(2, dmax(2, 10))
        t = task_kv_v2(rng, n, rng.randint(1, 3), "multikey", multi=1.0, key_kind=kk, echo=echo, value_first=value_first)
    elif fam == "multiturn":
        n = rng.randint(2, dmax(3, 16))
        t = task_kv_v2(rng, n, rng.randint(2, min(8, max(2, n))), "multiturn", multi=0.1, key_kind=kk,
                       echo=echo, value_first=value_first, near=rng.choice([0, 0, 0, 2, 3]) if n >= 3 else 0)
    elif fam == "copy":
        t = task_copy(rng, length)
    elif fam == "vt":
        hops = rng.randint(1, dmax(1, 5))
        t = task_vt(rng, hops, rng.choice([1, 1, 2]) if length >= 256 else 1)
    else:
        return render_freq(tok, rng, length, ctx_weight)
    return render_v2(tok, rng, t, length, ctx_weight)
