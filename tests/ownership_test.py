#!/usr/bin/env python3
"""Who owns what (docs/architecture.md, Owners): window and expiry arithmetic lives in src/kv
(KvRetention) and the model's forward pass; only src/session writes a conversation's record.

Usage: ownership_test.py SOURCE_DIR
Prints every line that breaks a rule and exits 1; the rules' patterns are the greps the
architecture document lists, so a reader can run them by hand.
"""
import os
import re
import sys

RULES = [
    ("window and expiry arithmetic outside src/kv and src/model",
     re.compile(r"\bsliding_window\b|\bExpiredBelow\b|\bNoteExpiredBelow\b|\bDropBefore\b|\bFirstVisible\b"),
     ("src/kv/", "src/model/"),
     # make-model writes the option into the file it makes; it computes nothing with it.
     {"src/cli/make_model_command.cc"}),
    ("a conversation's record written outside src/session",
     re.compile(r"record\(\)\.[a-z_]+\s*(=[^=]|\+\+|--|\.(push_back|assign|clear|resize|insert|swap|emplace))|"
                r"(?<!const )ConversationRecord\s*&\s*\w+\s*=\s*[^;]*record\(\)"),
     ("src/session/",),
     set()),
]


def main():
    root = sys.argv[1]
    bad = 0
    for what, rx, allowed, exempt in RULES:
        for dirpath, _, files in os.walk(os.path.join(root, "src")):
            for fn in files:
                if not fn.endswith((".cc", ".h", ".inc")):
                    continue
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, root)
                if rel.startswith(allowed) or rel in exempt:
                    continue
                with open(path, encoding="utf-8") as f:
                    for i, line in enumerate(f, 1):
                        if rx.search(line):
                            print("%s:%d: %s: %s" % (rel, i, what, line.strip()))
                            bad += 1
    print("%d line(s) break an ownership rule" % bad if bad else "ownership rules hold")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
