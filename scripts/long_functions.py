#!/usr/bin/python3
"""Print the longest function bodies in C++ sources, longest first.

Usage: scripts/long_functions.py [--max N] [--top K] [DIR_OR_FILE ...]   (default: src)
Exits 1 when some function is longer than --max lines (default 80), so CI can use it.

A function is a top-level or namespace/class-level brace block whose opening line looks
like a signature (ends with ')' or ') const' or an initializer list, not a type
declaration). Lines are counted from the signature's first line to the closing brace.
"""
import argparse
import os
import re
import sys

SKIP_HEAD = re.compile(r"^\s*(namespace|class|struct|enum|union|extern)\b")


def strip_code(text):
    """Blank out comments, string and char literals, keeping newlines."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i)
                j = n if end < 0 else end + len(m.group(1)) + 2
                out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
            else:
                out.append(c); i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def functions(path):
    text = strip_code(open(path, encoding="utf-8", errors="replace").read())
    lines = text.split("\n")
    stack = []  # (kind, start_line, name)
    found = []
    line_no = 0
    pos_line = [0]
    for ln in lines:
        pos_line.append(pos_line[-1] + len(ln) + 1)
    idx = 0
    for i, ch in enumerate(text):
        while idx + 1 < len(pos_line) and pos_line[idx + 1] <= i:
            idx += 1
        if ch == "{":
            head = text[max(0, i - 600):i]
            head = head[max(head.rfind(";"), head.rfind("{"), head.rfind("}")) + 1:]
            h = " ".join(head.split())
            is_fn = (not any(k for k, _, _ in stack if k == "fn")
                     and not SKIP_HEAD.match(h)
                     and re.search(r"\)\s*(const|noexcept|override|final|mutable|->\s*[\w:<>,\s*&]+|:\s*.*)?\s*$", h)
                     and not re.match(r"^\s*(if|for|while|switch|catch|do|else)\b", h)
                     and h.count("(") == h.count(")")
                     and "=" not in h.split("(")[0])
            if is_fn:
                start = idx - head.lstrip().count("\n")
                m = re.search(r"([\w:~<>]+)\s*\(", h)
                stack.append(("fn", start + 1, m.group(1) if m else h[:40]))
            else:
                stack.append(("blk", idx + 1, ""))
        elif ch == "}" and stack:
            kind, start, name = stack.pop()
            if kind == "fn":
                found.append((idx + 1 - start + 1, path, start, name))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="*", default=["src"])
    ap.add_argument("--max", type=int, default=80)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    files = []
    for p in a.paths:
        if os.path.isfile(p):
            files.append(p)
        for root, _, names in os.walk(p):
            files += [os.path.join(root, f) for f in names if f.endswith((".cc", ".h", ".cpp"))]
    allf = sorted((f for p in sorted(set(files)) for f in functions(p)), reverse=True)
    for length, path, start, name in allf[: a.top]:
        print(f"{length:5d}  {path}:{start}  {name}")
    over = [f for f in allf if f[0] > a.max]
    print(f"{len(allf)} functions; {len(over)} over {a.max} lines")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
