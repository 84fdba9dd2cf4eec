#!/usr/bin/python3
"""Real English prose from the documentation Debian installs (issue 65), for the long model's
filler and held-out sets.

    /usr/bin/python3 tools/train/corpus.py build              # scan, split, write the cache
    /usr/bin/python3 tools/train/corpus.py stats              # documents and characters per split

Sources, each document tagged with the package that owns the file (from /var/lib/dpkg/info/*.list):
  man     section 1-8 manual pages (roff, macros and escapes stripped)
  info    GNU info manuals (menus, node headers and indented examples dropped)
  doc     README, NEWS, FAQ, *.txt, *.md and HTML under /usr/share/doc (changelogs and copyright
          files are never read)
  license /usr/share/common-licenses: never trained on; a held-out family of its own

Split by whole package: sha1("primekv-corpus:" + package) mod 100 is 0-4 -> dev, 5-9 -> test,
the rest -> train; license texts are "license" whatever their package.  Any paragraph that reads
like license boilerplate is dropped from every split but "license", so no license text is
trained on through a README that quotes one.

Only paragraphs that read as prose are kept: at least 60 characters, mostly letters and spaces,
at least one sentence end, few symbols.  Text is folded to printable ASCII (the tokenizer's
base characters; anything else would cost a byte token per byte) and whitespace is collapsed, so
every filler segment starts with " " or "\\n" and segment token counts add up (data.py's
invariant).

The cache (default ~/.cache/primekv/corpus-v1.json.gz, or $PRIMEKV_CORPUS) is a list of
{"package", "kind", "path", "split", "paragraphs": [[sentence, ...], ...]}.  It depends on the
packages installed: `stats` prints a digest of the list so two machines can be compared.
"""

import argparse
import glob
import gzip
import hashlib
import html.parser
import json
import os
import re
import sys
import unicodedata

CACHE = os.environ.get("PRIMEKV_CORPUS", os.path.expanduser("~/.cache/primekv/corpus-v1.json.gz"))
SPLITS = ("train", "dev", "test", "license")

LICENSE_RE = re.compile(
    r"general public license|without any warranty|permission is hereby granted|licensed under|"
    r"redistribution and use in source|free software foundation|merchantability|"
    r"license, or \(at your option\)|the above copyright notice|creative commons|"
    r"all rights reserved|copyright \(c\)|spdx-license", re.I)

_FOLD = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": " - ",
         "\u2026": "...", "\u00a0": " ", "\u2010": "-", "\u2011": "-", "\u00ab": '"', "\u00bb": '"'}


def split_of(package):
    h = int(hashlib.sha1(("primekv-corpus:" + package).encode()).hexdigest(), 16) % 100
    return "dev" if h < 5 else "test" if h < 10 else "train"


def fold(text):
    text = "".join(_FOLD.get(c, c) for c in text)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if 32 <= ord(c) < 127 or c in "\n\t")
    return text


_SENT_RE = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z(\"'])")


def sentences(par):
    """A paragraph's sentences; a long one is cut at word boundaries near 300 characters."""
    out = []
    for s in _SENT_RE.split(par):
        s = s.strip()
        while len(s) > 400:
            cut = s.rfind(" ", 0, 300)
            if cut < 100:
                cut = 300
            out.append(s[:cut].strip())
            s = s[cut:].strip()
        if s:
            out.append(s)
    return out


def prose_like(par):
    if len(par) < 60:
        return False
    letters = sum(c.isalpha() or c == " " for c in par)
    if letters < 0.85 * len(par):
        return False
    if not re.search(r"[a-z][.!?]", par):
        return False
    words = par.split()
    if len(words) < 10 or sum(len(w) > 25 for w in words) > 1:
        return False
    if sum(c in "{}<>=|_/\\$#@`*[]" for c in par) > 0.02 * len(par):
        return False
    return True


def clean_paragraphs(raw_pars, keep_license=False):
    out = []
    for p in raw_pars:
        p = re.sub(r"\s+", " ", fold(p)).strip()
        if not prose_like(p):
            continue
        if not keep_license and LICENSE_RE.search(p):
            continue
        ss = sentences(p)
        if ss:
            out.append(ss)
    return out


# ---------------------------------------------------------------------------- readers
def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read(4 << 20)
    except (OSError, EOFError):
        return None
    if b"\0" in data[:4096]:
        return None
    return data.decode("utf-8", errors="replace")


_ROFF_ESC = [
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""), (re.compile(r"\\s[+-]?\d+"), ""),
    (re.compile(r"\\\*(\[[^\]]*\]|\(..|.)"), ""), (re.compile(r"\\\((em|en)"), " - "),
    (re.compile(r"\\\((aq|cq)"), "'"), (re.compile(r"\\\((lq|rq|dq)"), '"'),
    (re.compile(r"\\\(..|\\\[[^\]]*\]"), ""), (re.compile(r"\\[-]"), "-"), (re.compile(r"\\[&|^%c]"), ""),
    (re.compile(r"\\e"), "\\\\"), (re.compile(r"\\ "), " "),
]


def roff_paragraphs(text):
    pars, cur = [], []

    def flush():
        if cur:
            pars.append(" ".join(cur))
            cur.clear()

    for line in text.split("\n"):
        if line.startswith(('.\\"', "'\\\"", '\\"')):
            continue
        if line.startswith((".", "'")):
            m = re.match(r"[.'](\S+)\s*(.*)", line)
            if not m:
                continue
            mac, rest = m.group(1), m.group(2)
            if mac in ("B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM", "SB"):
                rest = rest.replace('"', "")
                cur.append(rest)
            elif mac in ("SH", "SS", "TH", "TP", "IP", "HP", "nf", "EX", "TS"):
                flush()
                if mac in ("nf", "EX", "TS"):
                    cur.append("\0")  # literal blocks: the paragraph is dropped
            else:
                flush()
            continue
        for rx, rep in _ROFF_ESC:
            line = rx.sub(rep, line)
        if not line.strip():
            flush()
        else:
            cur.append(line.strip())
    flush()
    return [p for p in pars if "\0" not in p]


def info_paragraphs(text):
    pars = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.split("\n")
        if any(l.startswith(("\x1f", "File: ", "* ", "Tag Table", "End Tag Table")) for l in lines):
            continue
        if sum(l.startswith("     ") for l in lines) > len(lines) / 2:
            continue  # an example
        pars.append(" ".join(l.strip() for l in lines))
    return pars


def plain_paragraphs(text):
    pars = []
    in_code = False
    for block in re.split(r"\n\s*\n", text):
        if block.lstrip().startswith("```"):
            in_code = not in_code if block.count("```") % 2 else in_code
            continue
        if in_code:
            continue
        lines = [l for l in block.split("\n") if l.strip()]
        if not lines or sum(l.startswith(("    ", "\t", "$ ", "# ", ">")) for l in lines) > len(lines) / 2:
            continue
        pars.append(" ".join(re.sub(r"^[#*+\- ]+", "", l.strip()) for l in lines).replace("`", ""))
    return pars


class _HtmlText(html.parser.HTMLParser):
    BLOCK = {"p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6", "td", "tr", "dt", "dd", "br", "table",
             "section", "blockquote", "title"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.pars, self.cur, self.skip = [], [], 0

    def handle_starttag(self, tag, attrs):
        if tag in ("pre", "script", "style", "code", "tt", "kbd", "samp"):
            self.skip += 1
        if tag in self.BLOCK:
            self._flush()

    def handle_endtag(self, tag):
        if tag in ("pre", "script", "style", "code", "tt", "kbd", "samp"):
            self.skip = max(0, self.skip - 1)
            if tag in ("code", "tt", "kbd", "samp"):
                self.cur.append("\0")  # a paragraph quoting code is not prose
        if tag in self.BLOCK:
            self._flush()

    def handle_data(self, d):
        if not self.skip:
            self.cur.append(d)

    def _flush(self):
        if self.cur:
            p = " ".join(self.cur)
            if "\0" not in p:
                self.pars.append(p)
            self.cur = []


def html_paragraphs(text):
    p = _HtmlText()
    try:
        p.feed(text)
        p.close()
    except Exception:  # noqa: BLE001  (malformed HTML: keep what was read)
        pass
    p._flush()
    return p.pars


# ---------------------------------------------------------------------------- scan
def file_owners():
    owners = {}
    for lst in glob.glob("/var/lib/dpkg/info/*.list"):
        pkg = os.path.basename(lst)[:-5].split(":")[0]
        try:
            with open(lst, errors="replace") as f:
                for line in f:
                    owners[line.rstrip("\n")] = pkg
        except OSError:
            pass
    return owners


DOC_NAME_RE = re.compile(r"(README|NEWS|FAQ|TODO|HACKING|CONTRIBUTING|USAGE|INSTALL|MANUAL|GUIDE)"
                         r"[^/]*$|\.(txt|md|rst|html?)(\.gz)?$", re.I)


def candidates():
    for sec in range(1, 9):
        for p in sorted(glob.glob("/usr/share/man/man%d/*" % sec)):
            yield "man", p
    for p in sorted(glob.glob("/usr/share/info/*.info*")):
        yield "info", p
    for root, _, files in os.walk("/usr/share/doc"):
        for fn in sorted(files):
            low = fn.lower()
            if low.startswith(("changelog", "copyright")) or not DOC_NAME_RE.search(fn):
                continue
            yield "doc", os.path.join(root, fn)
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        yield "license", p


def build(path=CACHE, log=print):
    owners = file_owners()
    docs = []
    seen = set()
    for kind, p in candidates():
        real = os.path.realpath(p)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        text = read_text(real)
        if not text:
            continue
        if kind == "man":
            raw = roff_paragraphs(text)
        elif kind == "info":
            raw = info_paragraphs(text)
        elif p.lower().rstrip(".gz").endswith((".html", ".htm")):
            raw = html_paragraphs(text)
        else:
            raw = plain_paragraphs(text)
        pars = clean_paragraphs(raw, keep_license=(kind == "license"))
        if not pars:
            continue
        pkg = owners.get(p) or owners.get(real)
        if pkg is None and p.startswith("/usr/share/doc/"):
            pkg = p.split("/")[4]
        pkg = pkg or "unknown"
        split = "license" if kind == "license" else split_of(pkg)
        docs.append({"package": pkg, "kind": kind, "path": p, "split": split, "paragraphs": pars})
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with gzip.open(tmp, "wt") as f:
        json.dump(docs, f)
    os.replace(tmp, path)
    log("corpus: %d documents -> %s" % (len(docs), path))
    return docs


def load(path=CACHE, build_missing=True):
    if not os.path.exists(path):
        if not build_missing:
            raise FileNotFoundError(path)
        return build(path)
    with gzip.open(path, "rt") as f:
        return json.load(f)


def stats(docs):
    rows = {}
    for d in docs:
        r = rows.setdefault(d["split"], {"documents": 0, "packages": set(), "chars": 0, "sentences": 0})
        r["documents"] += 1
        r["packages"].add(d["package"])
        r["chars"] += sum(len(s) + 1 for p in d["paragraphs"] for s in p)
        r["sentences"] += sum(len(p) for p in d["paragraphs"])
    digest = hashlib.sha256(json.dumps(sorted((d["path"], d["split"]) for d in docs)).encode()).hexdigest()[:16]
    return {k: {"documents": v["documents"], "packages": len(v["packages"]), "chars": v["chars"],
                "sentences": v["sentences"]} for k, v in sorted(rows.items())}, digest


# ---------------------------------------------------------------------------- filler
class RealFiller:
    """Filler segments of real prose: consecutive sentences of one document from a random
    paragraph on, the next document after "\\n\\n" when one runs out (concatenated documents,
    as a long context of real text is)."""

    def __init__(self, rng, docs):
        self.rng, self.docs = rng, docs
        self._new_doc()

    def _new_doc(self):
        d = self.docs[self.rng.randrange(len(self.docs))]
        self.pars = d["paragraphs"]
        self.pi = self.rng.randrange(len(self.pars))
        self.si = 0
        self.par_start = True

    def next(self):
        if self.pi >= len(self.pars):
            self._new_doc()
        s = self.pars[self.pi][self.si]
        sep = "\n\n" if self.par_start else " "
        self.par_start = False
        self.si += 1
        if self.si >= len(self.pars[self.pi]):
            self.pi, self.si, self.par_start = self.pi + 1, 0, True
        return sep + s


def by_split(docs):
    out = {s: [] for s in SPLITS}
    for d in docs:
        out[d["split"]].append(d)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["build", "stats"])
    ap.add_argument("--cache", default=CACHE)
    args = ap.parse_args()
    docs = build(args.cache) if args.command == "build" else load(args.cache)
    table, digest = stats(docs)
    print(json.dumps({"cache": args.cache, "digest": digest, "splits": table}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
