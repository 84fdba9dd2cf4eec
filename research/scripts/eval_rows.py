"""Reading `primekv eval` rows as research/results/ stores them.

A stored folder keeps its per-sample rows xz-compressed (DIR/results.jsonl.xz, research/README.md);
a fresh run writes DIR/results.jsonl. `open_text(path)` opens whichever of PATH, PATH.xz and
PATH.gz exists (in that order) as text. Rows recorded before the move name their task files
`jsonl:docs/results/...`; `task_key` spells them as they are now (`jsonl:research/results/...`)
so that rows of a regeneration compare with the stored ones. Standard library only.
"""
import gzip
import lzma
import os

OLD_PREFIX = "jsonl:docs/results/"
NEW_PREFIX = "jsonl:research/results/"


def open_text(path):
    """Opens PATH for reading text, or PATH.xz / PATH.gz where only that exists."""
    for p in (path, path + ".xz", path + ".gz"):
        if os.path.exists(p):
            break
    else:
        p = path  # open() below raises FileNotFoundError naming the plain path
    if p.endswith(".xz"):
        return lzma.open(p, "rt", encoding="utf-8")
    if p.endswith(".gz"):
        return gzip.open(p, "rt", encoding="utf-8")
    return open(p, encoding="utf-8")


def open_rows(folder):
    """DIR/results.jsonl of an eval folder, plain or compressed."""
    return open_text(os.path.join(folder, "results.jsonl"))


def task_key(task):
    """A row's task name with the pre-move path of the task sets spelled as now."""
    return NEW_PREFIX + task[len(OLD_PREFIX):] if task.startswith(OLD_PREFIX) else task
