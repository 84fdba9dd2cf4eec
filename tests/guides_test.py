#!/usr/bin/env python3
"""The contributor guides (docs/adding-an-architecture.md, docs/adding-a-weight-type.md) list
every file and function to touch; this checks that they still exist, so a guide that goes stale
fails CI.

    tests/guides_test.py SOURCE_DIR GUIDE...

Outside fenced code blocks, one block at a time (a list item with its indented continuation
lines, or a paragraph):

- A backticked token that names a path (it holds a "/" or ends in a source or document suffix)
  exists: from the repository root, or under include/ or src/ as an #include names it.
- Every other backticked token after a path in the same block occurs in the file the nearest
  path before it names: an identifier as a whole word; anything else literally, or, for
  `Class::member` and `module.name`, each part as a whole word.
- A list item that starts with a backticked token starts with a path.
- Relative markdown links resolve, and README.md names each guide.

The checker first runs itself on a small made-up tree with a stale guide and fails unless it
reports every stale entry.
"""

import os
import re
import sys
import tempfile

PATH_SUFFIX = re.compile(r"\.(cc|h|inc|py|md|txt|sh|json|cmake|map)$")
IDENT = re.compile(r"^[A-Za-z_]\w*$")
DOTTED = re.compile(r"^[A-Za-z_]\w*((::|\.)[A-Za-z_]\w*)+$")
TICKS = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def is_path(token):
    if " " in token or token.startswith("-"):
        return False
    return "/" in token or PATH_SUFFIX.search(token) is not None


def resolve(root, token):
    """The existing file or folder a path token names, or None."""
    for base in ("", "include", "src"):
        candidate = os.path.join(root, base, token)
        if os.path.exists(candidate):
            return candidate
    return None


def blocks(text):
    """(first line number, text) of each list item or paragraph outside code fences."""
    out, current, start, fenced = [], [], 0, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            if current:
                out.append((start, "\n".join(current)))
                current = []
            continue
        if fenced:
            continue
        new_item = re.match(r"^\s*([-*]|\d+\.)\s", line) is not None and not line.startswith("  ")
        if not line.strip() or new_item or line.startswith("#"):
            if current:
                out.append((start, "\n".join(current)))
            current = []
            if not line.strip():
                continue
        if not current:
            start = number
        current.append(line)
    if current:
        out.append((start, "\n".join(current)))
    return out


def occurs(token, text):
    def word(t):
        return re.search(r"(?<![\w])" + re.escape(t) + r"(?![\w])", text) is not None

    if IDENT.match(token):
        return word(token)
    if token in text:
        return True
    if DOTTED.match(token):
        return all(word(part) for part in re.split(r"::|\.", token))
    return False


def check_block(root, guide, line, block):
    errors = []
    current = None  # (token, path of the file named last)
    item = re.match(r"^\s*[-*]\s+`", block) is not None
    for k, token in enumerate(TICKS.findall(block)):
        if is_path(token):
            found = resolve(root, token)
            if found is None:
                errors.append("%s:%d: `%s` does not exist" % (guide, line, token))
            current = (token, found)
            continue
        if k == 0 and item:
            errors.append("%s:%d: the item starts with `%s`, which is not a path" %
                          (guide, line, token))
        if current is None or current[1] is None:
            continue
        if os.path.isdir(current[1]):
            errors.append("%s:%d: `%s` follows the folder `%s`; name the file" %
                          (guide, line, token, current[0]))
            continue
        with open(current[1], encoding="utf-8", errors="replace") as f:
            if not occurs(token, f.read()):
                errors.append("%s:%d: `%s` is not in %s" % (guide, line, token, current[0]))
    for target in LINK.findall(block):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = os.path.join(os.path.dirname(os.path.join(root, guide)), target.split("#")[0])
        if not os.path.exists(path):
            errors.append("%s:%d: the link %s does not resolve" % (guide, line, target))
    return errors


def check_guide(root, guide):
    path = os.path.join(root, guide)
    if not os.path.isfile(path):
        return ["%s: no such guide" % guide]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    errors = []
    for line, block in blocks(text):
        errors += check_block(root, guide, line, block)
    readme = os.path.join(root, "README.md")
    if os.path.isfile(readme):
        with open(readme, encoding="utf-8") as f:
            if guide not in f.read():
                errors.append("%s: README.md does not name it" % guide)
    return errors


def selftest():
    """The checker on a made-up tree: a stale guide must give exactly the expected errors."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "src", "m"))
        os.makedirs(os.path.join(root, "include", "p", "m"))
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "src", "m", "a.cc"), "w") as f:
            f.write("int ReadThing(); struct Model { void Forward(); }; // --flag\n")
        with open(os.path.join(root, "include", "p", "m", "b.h"), "w") as f:
            f.write("enum class Kind { kA };\n")
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write("docs/g.md\n")
        with open(os.path.join(root, "docs", "g.md"), "w") as f:
            f.write("# G\n\nIntro `not checked` before any path.\n\n"
                    "- `src/m/a.cc`: `ReadThing`, `Model::Forward`, `--flag`,\n"
                    "  `GoneFunction` on a continuation line.\n"
                    "- `p/m/b.h`: `Kind`, `Read`.\n"
                    "- `src/m/gone.cc`: `Anything`.\n"
                    "- `Orphan` first.\n\n"
                    "```\n`src/in/a/fence.cc`\n```\n\n"
                    "See [a](missing.md) and [b](../README.md).\n")
        got = check_guide(root, "docs/g.md")
        want = ["docs/g.md:5: `GoneFunction` is not in src/m/a.cc",
                "docs/g.md:7: `Read` is not in p/m/b.h",
                "docs/g.md:8: `src/m/gone.cc` does not exist",
                "docs/g.md:9: the item starts with `Orphan`, which is not a path",
                "docs/g.md:15: the link missing.md does not resolve"]
        if got != want:
            print("selftest: the checker reported\n  %s\nbut should report\n  %s" %
                  ("\n  ".join(got), "\n  ".join(want)))
            return False
    return True


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    if not selftest():
        return 1
    root = argv[1]
    errors = []
    for guide in argv[2:]:
        errors += check_guide(root, guide)
    for e in errors:
        print(e)
    if errors:
        print("%d stale entries: update the guide with the code it describes" % len(errors))
        return 1
    print("%d guides checked" % (len(argv) - 2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
