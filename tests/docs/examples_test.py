#!/usr/bin/env python3
"""The examples of README.md, docs/python.md and docs/server.md, read from the document itself
and run as written; what each one prints is checked against what the document says it prints.

Usage: examples_test.py --source DIR --build DIR --capi LIB --cc CC DOC
(DOC: README.md | docs/python.md | docs/server.md, relative to --source)

Every fenced block of DOC is run, unless the line directly above it is
  <!-- example: not run (why) -->                      the block is not run, or
  <!-- example: skip `TEXT` (why); skip `TEXT` (why) -->  its commands holding TEXT are not run
(each TEXT must name a command of its block). A command that is not run still has its `--flags`
looked up in its program's --help (or, for a bash script, its text).
- `sh`: command by command in bash (a line ending in `\\` continues). Assignments (`B=...`,
  `export X=...`) carry over to the later commands and blocks of the document, as in one shell.
- `python`: this interpreter (Debian's python3) in that shell's environment.
- `c`: the body of main(), with `text` the prompt of the Python example, compiled as C11 with
  -Wall -Wextra -Werror -pedantic against libprimekv_c; main then prints the ids in `out`.
A block of any other kind must be marked, and so must one whose commands this test has no check
for: every command run is matched by one entry of CHECKS (a pattern and what its output must
be), so a new example fails here until it is checked.

Where: a scratch folder whose repo/ holds links to the repository's top-level entries, with
repo/build/release the build under test and shared/ beside repo/ (the documents' ../shared), so
paths run as written and what the examples write stays in the scratch folder.
Substitutions: `primekv serve` gets `--port P` (a free loopback port) and runs in the background
until its block ends; `localhost:8080` and `127.0.0.1:8080` become port P in later commands;
deploy/cluster.sh reads BASE_PORT (ten free ports) and STATE_DIR from the environment, as
docs/server.md says. Commands that need redis-server or haproxy report skipped without them,
except under CI=true, where that fails (as the cluster tests do).
"""
import argparse
import ast
import glob
import json
import os
import re
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
import server_test  # noqa: E402  (check, run_checks, stop_process)

check = server_test.check
ARGS = None
REPO = None  # the scratch repository the examples run in
STATE = {}   # what one check leaves for a later one (a session id, the cluster's pids)
MARK = re.compile(r"^<!-- example: (.*) -->$")
FENCE = re.compile(r"^```(\S*)\s*$")
SERVE = re.compile(r"((?:\$B|\bprimekv)\s+serve)\b")
# The Python example's prompt: the document, its question, the answer's start.
QUESTION = ("\nWhat is the special magic number for silver-lantern?\n"
            "The special magic number for silver-lantern is")
# upstream llama2.c's documented greedy sample of stories260K (as tests/reference uses it)
STORIES_TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside "
                "in the park.")
REQUIRES = [(r"deploy/cluster\.sh", ("redis-server", "haproxy")),
            (r"tests/cluster/cluster_test\.py", ("redis-server",))]


# ---------------------------------------------------------------------------------------------
# Reading the document

class Block:
    def __init__(self, line, lang, text, marker):
        self.line, self.lang, self.text, self.marker = line, lang, text, marker


def blocks_of(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        mark = MARK.match(lines[i - 1].strip()) if i > 0 else None
        out.append(Block(i + 1, m.group(1), "\n".join(lines[i + 1:j]) + "\n",
                         mark.group(1) if mark else None))
        i = j + 1
    return out


def parse_marker(marker):
    """(reason the block is not run, or None; [(text, why)] of its commands not run)."""
    m = re.fullmatch(r"not run \(([^()]+)\)", marker)
    if m:
        return m.group(1), []
    skips = re.findall(r"skip `([^`]+)` \(([^()]+)\)", marker)
    if not skips or "; ".join("skip `%s` (%s)" % s for s in skips) != marker:
        raise ValueError("unreadable marker <!-- example: %s -->" % marker)
    return None, skips


def commands_of(text):
    """The block's commands as bash reads them (raw) and on one line (flat)."""
    out, cur = [], ""
    for line in text.split("\n"):
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        cur += line + "\n"
        if not line.rstrip().endswith("\\"):
            out.append((cur, re.sub(r"\s*\\\n\s*", " ", cur).strip()))
            cur = ""
    return out


def is_assignment(flat):
    return re.fullmatch(r"(export\s+)?[A-Za-z_]\w*=\S*(\s+#.*)?", flat) is not None


def without_comment(flat):
    return re.sub(r"\s+#\s.*$", "", flat)


# ---------------------------------------------------------------------------------------------
# Where and how the examples run

def free_ports(n, start):
    """A base port from `start` on with n consecutive free loopback ports."""
    for base in range(start, 65000 - n, 37):
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no %d free ports" % n)


def make_scratch(work):
    global REPO
    REPO = os.path.join(work, "repo")
    os.makedirs(os.path.join(REPO, "build"))
    # The tracked entries only: a sessions/ or runs/ that someone's own runs left in the tree
    # is not the examples' to write into.
    try:
        tracked = subprocess.run(["git", "-C", ARGS.source, "ls-files"], capture_output=True,
                                 text=True).stdout.split()
    except OSError:  # no git: every entry
        tracked = []
    names = sorted({t.split("/")[0] for t in tracked}) or os.listdir(ARGS.source)
    for name in names:
        if name != "build" and not name.startswith("."):
            os.symlink(os.path.join(ARGS.source, name), os.path.join(REPO, name))
    os.symlink(ARGS.build, os.path.join(REPO, "build", "release"))
    os.symlink(os.path.realpath(os.path.join(ARGS.source, "..", "shared")),
               os.path.join(work, "shared"))


def block_env(work):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PRIMEKV_LIB")}
    env["BASE_PORT"] = str(STATE["base_port"])
    env["STATE_DIR"] = os.path.join(work, "cluster")
    # calibrate's profile cache (profile=auto reads it): the test's own, so the README's
    # calibrate line measures, and nothing lands in the user's cache
    env["XDG_CACHE_HOME"] = os.path.join(work, "cache")
    return env


def bash(preamble, command, env, timeout=300):
    script = "set -eo pipefail\n" + "".join(p + "\n" for p in preamble) + command
    return subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


class Run:
    """One command's outcome, handed to its check."""

    def __init__(self, flat, proc=None, log=""):
        self.cmd = flat
        self.rc = proc.returncode if proc else 0
        self.out = proc.stdout if proc else ""
        self.err = proc.stderr if proc else ""
        self.log = log

    def ok(self, what):
        check(self.rc == 0, "%s: exit 0 (%d; %s)" % (what, self.rc, self.err.strip()[-300:]))
        return self.rc == 0


def start_server(preamble, flat, raw, env, port, work):
    cmd = SERVE.sub(r"\1 --port %d" % port, raw, count=1)
    log_path = os.path.join(work, "serve-%d.log" % port)
    log = open(log_path, "w")
    script = "".join(p + "\n" for p in preamble) + "exec " + cmd
    proc = subprocess.Popen(["bash", "-c", script], cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.1)
    check(proc.poll() is None, "%s: the server answers /health on port %d" % (flat[:60], port))
    return proc, log, log_path


def missing_tools(flat):
    need = [t for pat, tools in REQUIRES if re.search(pat, flat) for t in tools]
    return sorted(set(t for t in need if not shutil.which(t)))


# ---------------------------------------------------------------------------------------------
# Commands that are not run: their flags must still exist

def flags_exist(preamble, flat, env):
    """Each --flag of a command that is not run appears in its program's --help (primekv
    subcommands, python3 scripts) or in its text (bash scripts)."""
    cwd = "."
    for part in re.split(r"\s*(?:&&|;)\s*", without_comment(flat)):
        flags = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", part))
        sub = re.match(r"((?:\$B|\S*primekv)(?:\s+[a-z][a-z-]*)?)(?![\w-])", part)
        help_text = None
        if re.fullmatch(r"cd \S+", part):
            cwd = part.split()[1]
        elif sub:
            cmd = sub.group(1)
            if cmd.split()[0] == "primekv":  # the installed program (README's Install): the build's
                cmd = "build/release/src/cli/primekv" + cmd[len("primekv"):]
            help_text = bash(preamble, cmd + " --help", env, 60).stdout
        elif re.match(r"python3 \S+\.py", part):
            help_text = bash(preamble, "cd %s && python3 %s --help" % (cwd, part.split()[1]),
                             env, 60).stdout
        elif re.match(r"bash \S+\.sh", part):
            help_text = open(os.path.join(REPO, cwd, part.split()[1])).read()
        if help_text is None or not flags:
            continue
        unknown = sorted(f for f in flags if not re.search(re.escape(f) + r"(?![\w-])",
                                                           help_text))
        check(not unknown, "not run, but its flags exist: %s (unknown: %s)" % (part[:70],
                                                                                unknown))


# ---------------------------------------------------------------------------------------------
# Running a document

def run_sh(block, shell, work, checks):
    skips = parse_marker(block.marker)[1] if block.marker else []
    used = set()
    servers = []
    try:
        for raw, flat in commands_of(block.text):
            if is_assignment(flat):
                shell["preamble"].append(raw.strip())
                continue
            skip = [s for s in skips if s[0] in flat]
            used.update(s[0] for s in skip)
            if skip:
                print("     not run: %s (%s)" % (flat[:70], skip[0][1]))
                flags_exist(shell["preamble"], flat, shell["env"])
                continue
            run_command(raw, flat, shell, work, checks, servers)
    finally:
        for proc, log, log_path, flat in servers:
            server_test.stop_process(proc)
            log.close()
            dispatch(checks, Run(flat, log=open(log_path).read()))
    for text, _ in skips:
        check(text in used, "line %d: skip `%s` names a command of its block" % (block.line,
                                                                                 text))


def run_command(raw, flat, shell, work, checks, servers):
    missing = missing_tools(flat)
    if missing:
        ci = os.environ.get("CI") == "true"
        print(("FAIL " if ci else "     SKIPPED: ") + "%s needs %s (bash scripts/setup.sh "
              "--cluster)" % (flat[:60], " and ".join(missing)))
        if ci:
            check(False, "%s installed (required under CI=true)" % " and ".join(missing))
        dispatch(checks, None, flat)
        return
    if shell.get("port"):
        raw = re.sub(r"\b(localhost|127\.0\.0\.1):8080\b", r"\g<1>:%d" % shell["port"], raw)
    if SERVE.search(flat):
        shell["port"] = free_ports(1, STATE["base_port"] + 10)
        STATE["serve_model"] = flag(flat, "-m")[0]
        proc, log, log_path = start_server(shell["preamble"], flat, raw, shell["env"],
                                           shell["port"], work)
        servers.append((proc, log, log_path, flat))
        return
    print("     run: %s" % flat[:100], flush=True)
    dispatch(checks, Run(flat, bash(shell["preamble"], raw, shell["env"])))


def run_python(block, shell, work, checks):
    path = os.path.join(work, "block-%d.py" % block.line)
    with open(path, "w") as f:
        f.write(block.text)
    print("     run: python block at line %d" % block.line, flush=True)
    proc = bash(shell["preamble"], "exec %s %s" % (shlex.quote(sys.executable), path),
                shell["env"])
    dispatch(checks, Run(block.text, proc))


def run_c(block, shell, work, checks):
    """The fragment as main's body; `text` is the Python example's prompt, read from a file."""
    del shell
    includes = [ln for ln in block.text.split("\n") if ln.startswith("#include")]
    body = [ln for ln in block.text.split("\n") if not ln.startswith("#include")]
    src = ("#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n" +
           "\n".join(includes) + "\nint main(int argc, char** argv) {\n"
           "  static char text[1 << 16];\n  FILE* f = argc > 1 ? fopen(argv[1], \"rb\") : NULL;\n"
           "  if (!f) return 2;\n  text[fread(text, 1, sizeof text - 1, f)] = 0;\n"
           "  fclose(f);\n" + "\n".join(body) +
           "\n  for (size_t i = 0; i < n_out; ++i) printf(\"%d \", (int)out[i]);\n"
           "  printf(\"\\n\");\n  return 0;\n}\n")
    c_path, exe = os.path.join(work, "block-%d.c" % block.line), os.path.join(work, "block-c")
    prompt = os.path.join(work, "prompt.txt")
    with open(c_path, "w") as f:
        f.write(src)
    with open(prompt, "w") as f:
        f.write(demo_prompt())
    lib = os.path.dirname(ARGS.capi)
    cc = subprocess.run([ARGS.cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic",
                         "-I", os.path.join(ARGS.source, "include"), c_path, "-o", exe,
                         "-L", lib, "-lprimekv_c", "-Wl,-rpath," + lib],
                        capture_output=True, text=True, timeout=120)
    check(cc.returncode == 0, "the C block at line %d compiles as C11 with -Wall -Wextra "
          "-Werror -pedantic (%s)" % (block.line, cc.stderr.strip()[-400:]))
    if cc.returncode == 0:
        proc = subprocess.run([exe, prompt], cwd=REPO, capture_output=True, text=True,
                              timeout=300)
        dispatch(checks, Run(block.text, proc))


def dispatch(checks, run, flat=None):
    """Hands the run to the one check whose pattern matches its command."""
    cmd = run.cmd if run else flat
    found = [(pat, fn) for pat, fn in checks if re.search(pat, cmd)]
    check(len(found) == 1, "one check for `%s` (%d: %s)" % (
        cmd.strip()[:70], len(found), [p for p, _ in found]))
    for pat, _ in found:
        STATE.setdefault("matched", set()).add(pat)
    if len(found) == 1 and run is not None:
        found[0][1](run)


def run_document(work):
    make_scratch(work)
    STATE["base_port"] = free_ports(10, 20000 + os.getpid() % 20000)
    shell = {"preamble": [], "env": block_env(work)}
    checks = CHECKS[ARGS.doc]
    runners = {"sh": run_sh, "python": run_python, "c": run_c}
    try:
        for block in blocks_of(os.path.join(ARGS.source, ARGS.doc)):
            where = "%s:%d" % (ARGS.doc, block.line)
            reason = None
            if block.marker:
                reason, _ = parse_marker(block.marker)
            if reason:
                print("     not run: %s (%s)" % (where, reason))
                for raw, flat in commands_of(block.text) if block.lang == "sh" else []:
                    flags_exist(shell["preamble"], flat, shell["env"])
                continue
            check(block.lang in runners, "%s: a ```%s block is run, or marked <!-- example: "
                  "not run (why) -->" % (where, block.lang))
            if block.lang in runners:
                runners[block.lang](block, shell, work, checks)
    finally:
        if glob.glob(os.path.join(shell["env"]["STATE_DIR"], "*.pid")):
            bash([], "deploy/cluster.sh stop", shell["env"], 120)
    for pat, _ in checks:
        check(pat in STATE.get("matched", ()), "the check `%s` found its example" % pat)


# ---------------------------------------------------------------------------------------------
# What the examples must print

def gguf_header(path):
    """(tensor names, metadata key names, {key: int or float value}) read from the file."""
    with open(path, "rb") as f:
        magic, _, n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        assert magic == b"GGUF"
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        ints = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                10: "<Q", 11: "<q", 12: "<d"}
        names, values = [], {}

        def skip(t):
            if t == 8:
                f.seek(struct.unpack("<Q", f.read(8))[0], 1)
            elif t == 9:
                inner, n = struct.unpack("<IQ", f.read(12))
                for _ in range(n):
                    skip(inner)
            else:
                f.seek(sizes[t], 1)
        for _ in range(n_kv):
            key = f.read(struct.unpack("<Q", f.read(8))[0]).decode()
            t = struct.unpack("<I", f.read(4))[0]
            names.append(key)
            if t in ints:
                values[key] = struct.unpack(ints[t], f.read(sizes[t]))[0]
            else:
                skip(t)
        tensors = []
        for _ in range(n_tensors):
            tensors.append(f.read(struct.unpack("<Q", f.read(8))[0]).decode())
            f.seek(8 * struct.unpack("<I", f.read(4))[0] + 12, 1)  # dims, type, offset
        return tensors, names, values


def kv_shape(model):
    """(layers, KV heads, bytes of one f16 cache entry: key, value and an i32 position)."""
    _, _, v = gguf_header(model)
    arch = "llama"
    head_dim = v[arch + ".embedding_length"] // v[arch + ".attention.head_count"]
    return v[arch + ".block_count"], v[arch + ".attention.head_count_kv"], 2 * head_dim * 2 + 4


def needles():
    """examples/demo-context.txt's keys and their numbers: the answers its questions have."""
    text = open(os.path.join(ARGS.source, "examples", "demo-context.txt")).read()
    return dict(re.findall(r"The special magic number for ([\w-]+) is: (\d+)\.", text))


def asked(question):
    """The key of examples/demo-context.txt a question asks about, and its number."""
    m = re.search(r"for ([\w-]+)\?", question)
    key = m.group(1) if m else None
    check(key in needles(), "the question asks about a key of examples/demo-context.txt "
          "(%s): %r" % (sorted(needles()), question[-120:]))
    return key, needles().get(key)


def says(text, number):
    """The number as a whole word: 48291633 is not 4829163."""
    return re.search(r"(?<!\d)%s(?!\d)" % number, text or "") is not None


def demo_prompt():
    return open(os.path.join(ARGS.source, "examples", "demo-context.txt")).read() + QUESTION


def cli(*args):
    out = subprocess.run([os.path.join(ARGS.build, "src", "cli", "primekv"), *args], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    return out.stdout


def token_count(model, text):
    return len(json.loads(cli("tokenize", "-m", model, "-p", text, "--json"))["ids"])


def flag(cmd, name):
    words = shlex.split(without_comment(cmd))
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w == name]


def keeps(tokens, ratio):
    """Entries per head a compression of `tokens` by `ratio` may keep (rounding either way)."""
    x = tokens * (1 - ratio)
    return {int(x), -int(-x)}


def check_inspect(run):
    if not run.ok("inspect"):
        return
    words = shlex.split(without_comment(run.cmd))
    path = os.path.join(REPO, words[words.index("inspect") + 1])
    tensors, names, _ = gguf_header(path)
    check(("metadata: %d keys" % len(names)) in run.out and
          ("tensors: %d" % len(tensors)) in run.out,
          "inspect prints the file's %d metadata keys and %d tensors" % (len(names),
                                                                        len(tensors)))
    missing = [n for n in names if not re.search(r"^\s+%s\s" % re.escape(n), run.out, re.M)]
    check(not missing, "every metadata key is listed (missing: %s)" % missing)
    table = re.findall(r"^  (\S+) +[A-Z][A-Z0-9_]* +\[", run.out.split("tensors:", 1)[-1], re.M)
    check(table == tensors, "the tensor table lists the file's tensors in order (%d rows)" %
          len(table))


def check_stories(run):
    if run.ok("stories260K greedy"):
        check(run.out.startswith(STORIES_TEXT), "stories260K continues \"Once upon a time\" as "
              "llama2.c's documented sample: %r" % run.out[:120])


def check_chat_json(run):
    if not run.ok("generate --chat-template chatml --json"):
        return
    j = json.loads(run.out)
    model = flag(run.cmd, "-m")[0]
    # ChatML as its authors define it, written out here, tokenized by the model's vocabulary
    wrapped = "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n" % flag(run.cmd, "-p")[0]
    want = json.loads(cli("tokenize", "-m", model, "-p", wrapped, "--json"))["ids"]
    check(j.get("prompt_tokens") == want, "the prompt is the user's message in ChatML (%d "
          "tokens: %s...)" % (len(want), j.get("prompt_tokens", [])[:8]))
    check(isinstance(j.get("text"), str) and j.get("tokens") and
          all(isinstance(t, int) for t in j["tokens"]) and isinstance(j.get("kv"), dict),
          "the JSON holds the answer's text, its token ids and the cache report")


def check_list_presses(run):
    if not run.ok("list-presses"):
        return
    names = [ln.split()[0] for ln in run.out.split("\n\n")[0].split("\n")[1:] if ln.strip()]
    # the presses the README's examples and text name
    named = {"none", "primekv", "snapkv", "keydiff", "streamingllm", "kvzip", "adakv:<press>"}
    check(named <= set(names), "list-presses lists %s (%s)" % (sorted(named), names))


def check_kv_report(run):
    """The README's definitions of `generate --json`'s `kv` fields, in bytes and entries."""
    if not run.ok("generate --press primekv --ratio 0.5 --json"):
        return
    j = json.loads(run.out)
    kv, ratio = j["kv"], float(flag(run.cmd, "--ratio")[0])
    layers, heads, entry = kv_shape(os.path.join(REPO, flag(run.cmd, "-m")[0]))
    prompt, answer = len(j["prompt_tokens"]), len(j["tokens"])
    kept = kv["kept_per_layer"]
    check(kv["bytes_before"] == prompt * layers * heads * entry,
          "bytes_before is the uncompressed context: %d tokens x %d layers x %d heads x %d "
          "bytes (%d)" % (prompt, layers, heads, entry, kv["bytes_before"]))
    check(len(kept) == layers and all(k // heads in keeps(prompt, ratio) and k % heads == 0
                                      for k in kept) and sum(kept) * entry == kv["bytes_after"],
          "kept_per_layer keeps %s of %d per head, summed over heads, = bytes_after (%s, %d)" % (
              keeps(prompt, ratio), prompt, kept, kv["bytes_after"]))
    final = kv["final"]["entries_per_layer"]
    check(final == [k + heads * (answer - 1) for k in kept] and
          kv["final"]["bytes"] == sum(final) * entry,
          "final: the kept entries plus the answer's tokens but its last (%s, %d bytes)" % (
              final, kv["final"]["bytes"]))
    check(kv["bytes_peak"] == max(kv["bytes_before"], kv["final"]["bytes"]) and
          kv["compressions"] == 1, "bytes_peak %d is the largest, after 1 compression (%d)" % (
              kv["bytes_peak"], kv["compressions"]))


def check_answers(run):
    """Each --question about examples/demo-context.txt is answered with the document's number,
    and the cache keeps 1 - ratio of the context."""
    if not run.ok("generate --question"):
        return
    for i, q in enumerate(flag(run.cmd, "--question")):
        key, number = asked(q)
        got = re.search(r"^\[A%d\] (.*)$" % (i + 1), run.out, re.M)
        check(got and says(got.group(1), number), "answer %d names %s's number %s: %r" % (
            i + 1, key, number, got.group(1) if got else run.out[-200:]))
    m = re.search(r"KV (\d+) -> (\d+) bytes \(press .*?, ratio ([\d.]+)", run.err)
    ratio = float(flag(run.cmd, "--ratio")[0])
    check(m and abs(int(m.group(2)) / int(m.group(1)) - (1 - ratio)) < 0.02,
          "the compressed cache holds %.2f of the context's bytes (%s)" % (
              1 - ratio, m.group(0) if m else run.err[-200:]))


def check_calibrate(run):
    if not run.ok("calibrate"):
        return
    out = json.load(open(os.path.join(REPO, flag(run.cmd, "-o")[0])))
    layers, heads, _ = kv_shape(os.path.join(REPO, flag(run.cmd, "-m")[0]))
    if flag(run.cmd, "--tasks"):
        files = [t[len("jsonl:"):] for t in flag(run.cmd, "--tasks")[0].split(",")]
        contexts = sum(1 for f in files for ln in open(os.path.join(REPO, f)) if ln.strip())
    else:  # the built-in contexts: --samples of them (32 unless given)
        contexts = int((flag(run.cmd, "--samples") or ["32"])[0])
    check(out.get("format") == "primekv-budget-profile" and out.get("n_layers") == layers and
          out.get("n_kv_heads") == heads and out.get("contexts") == contexts,
          "a budget profile of %d layers x %d KV heads over the %d contexts" % (
              layers, heads, contexts))
    ratios = out.get("ratios", [])
    check([round(r, 2) for r in ratios] == [round(0.05 * i, 2) for i in range(1, 20)],
          "ratios 0.05 .. 0.95")
    for r, shares in zip(ratios, out.get("fractions", [])):
        flat = [x for layer in shares for x in layer]
        mean = sum(flat) / len(flat)
        if not (len(flat) == layers * heads and all(0 <= x <= 1 for x in flat) and
                abs(mean - (1 - r)) < 0.01):
            check(False, "at ratio %.2f the heads' shares average %.3f, not %.2f" % (
                r, mean, 1 - r))
            return
    check(True, "at every ratio the heads' shares average 1 - ratio")


def check_serve(run):
    """After the server stopped: the line it printed when it began listening."""
    m = re.search(r"listening on http://127\.0\.0\.1:\d+ \(press (\S+), ratio ([\d.]+), (\w+)\)",
                  run.log)
    check(m is not None, "serve printed where it listens: %r" % run.log[-300:])
    if m and "# 127.0.0.1:8080, primekv at 0.75" in run.cmd:
        check(m.group(1, 2) == ("primekv", "0.75"), "the default press is primekv at 0.75 "
              "(%s)" % m.group(0))
    if m and "--session-dir sessions" in run.cmd:
        sid = STATE.get("session")
        path = os.path.join(REPO, "sessions", "%s.pkvs" % sid)
        check(sid and os.path.exists(path) and open(path, "rb").read(8) == b"PKVSESS1",
              "--session-dir sessions holds the curl's session %s" % sid)


def check_curl(run):
    """An OpenAI chat completion whose answer is the document's, and the answer of
    `primekv generate --chat` with the same press and ratio (docs/server.md, Endpoints)."""
    if not run.ok("curl"):
        return
    j = json.loads(run.out)
    body = json.loads(re.search(r"-d '(.*)'", run.cmd).group(1))
    choice = (j.get("choices") or [{}])[0]
    text = choice.get("message", {}).get("content")
    check(j.get("object") == "chat.completion" and re.fullmatch(r"chatcmpl-[0-9a-f]{32}",
                                                                 j.get("id", "")) and
          choice.get("message", {}).get("role") == "assistant" and
          choice.get("finish_reason") in ("stop", "length") and
          re.fullmatch(r"s[0-9a-f]{32}", j.get("session", "")),
          "a chat.completion with its id, role, finish_reason and session: %s" % run.out[:200])
    u = j.get("usage", {})
    check(u.get("total_tokens") == u.get("prompt_tokens", 0) + u.get("completion_tokens", -1)
          and u.get("completion_tokens", 99) <= body["max_tokens"] and
          isinstance(u.get("prompt_tokens_details", {}).get("cached_tokens"), int),
          "usage counts the prompt and the answer: %s" % u)
    timings = j.get("primekv", {}).get("timings", {})
    check(all(isinstance(timings.get(k), (int, float)) for k in ("prefill_ms", "compress_ms",
                                                                  "decode_ms")),
          "primekv.timings has prefill, compress and decode ms: %s" % timings)
    key, number = asked(body["messages"][-1]["content"])
    check(says(text, number), "the answer is %s's number: %r" % (key, text))
    ref = json.loads(cli("generate", "-m", STATE["serve_model"], "--chat", "-p",
                         body["messages"][-1]["content"], "-n", str(body["max_tokens"]),
                         "--temp", "0", "--press", "primekv", "--ratio", "0.75", "--json"))
    check(ref["text"] == text, "primekv generate --chat answers the same: %r" % ref["text"])
    STATE["session"] = j.get("session")


def check_one_liner(run):
    """README's Python line prints the answer and the cache's bytes: 25% of the context kept
    per head (ratio 0.75), plus the answer's tokens but its last."""
    if not run.ok("the Python one-liner"):
        return
    m = re.fullmatch(r"(.*) (\d+)\n", run.out, re.S)
    check(m and says(m.group(1), needles()["silver-lantern"]), "it prints silver-lantern's "
          "number: %r" % run.out)
    model = "models/primekv-retrieval.gguf"
    layers, heads, entry = kv_shape(os.path.join(REPO, model))
    n = int(re.search(r"generate\((\d+)\)", run.cmd).group(1))
    want = {layers * heads * (k + n - 1) * entry for k in keeps(token_count(model,
                                                                              demo_prompt()), 0.75)}
    check(m and int(m.group(2)) in want, "kv_bytes %s is one of %s" % (
        m.group(2) if m else None, sorted(want)))


def check_python_example(run):
    """docs/python.md: the answers, the cache after the first turn, the saved file, presses()."""
    if not run.ok("docs/python.md's Python example"):
        return
    lines, model = run.out.split("\n"), "models/primekv-retrieval.gguf"
    question = re.search(r'^question = "(.*)"$', run.cmd, re.M)
    key, number = asked(question.group(1) if question else "")
    m = re.fullmatch(r"(.*) (\d+) (\d+) (\{.*\})", lines[0])
    check(m and says(m.group(1), number), "first answer: %s's number (%r)" % (key, lines[0]))
    if m:
        layers, heads, entry = kv_shape(os.path.join(REPO, model))
        n = int(re.search(r"answer = s\.generate\((\d+)", run.cmd).group(1))
        prompt = token_count(model, demo_prompt())
        entries, timings = int(m.group(3)), ast.literal_eval(m.group(4))
        check(entries in {layers * heads * (k + n) for k in keeps(prompt, 0.75)} and
              int(m.group(2)) == entries * entry,
              "%d entries (25%% of %d context tokens per head, plus %d answer tokens) of %d "
              "bytes each: kv_bytes %s" % (entries, prompt, n, entry, m.group(2)))
        check(timings.get("prefill_tokens") == prompt and timings.get("decode_tokens") == n and
              timings.get("compressions") == 1, "timings count the turn: %s" % timings)
    other = re.search(r'question\.replace\("([\w-]+)", "([\w-]+)"\)', run.cmd)
    key, number = asked(question.group(1).replace(*other.groups()) if question and other else "")
    check(len(lines) > 2 and says(lines[1], number), "the second turn answers %s's number (%r)" % (
        key, lines[1:2]))
    presses = cli("list-presses").split("\n\n")[0].split("\n")[1:]
    want = [ln.split()[0] for ln in presses if ln.strip()]
    check(len(lines) > 3 and lines[2] == repr(want), "presses() are list-presses' names: %s" %
          lines[2:3])
    saved = os.path.join(REPO, "sessions", "demo.pkvs")
    check(os.path.exists(saved) and open(saved, "rb").read(8) == b"PKVSESS1",
          "sessions/demo.pkvs is a session file")


def check_c_example(run):
    """The C fragment's tokens are `primekv generate`'s for its press and ratio, and answer."""
    if not run.ok("docs/python.md's C example"):
        return
    ids = [int(x) for x in run.out.split()]
    n = re.search(r"g\.max_tokens = (\d+);", run.cmd).group(1)
    ref = json.loads(cli("generate", "-m", "models/primekv-retrieval.gguf", "-p", demo_prompt(),
                         "-n", n, "--temp", "0", "--press", "primekv",
                         "--ratio", "0.75", "--json"))
    check(ids and ids == ref["tokens"], "its %d tokens are generate's: %s" % (len(ids), ids))
    check(says(ref["text"], needles()["silver-lantern"]), "which answer silver-lantern's "
          "number: %r" % ref["text"])


def check_cluster_start(run):
    """The ports the comment names, moved by BASE_PORT: `:8080` is BASE_PORT."""
    if not run.ok("deploy/cluster.sh start"):
        return
    base = STATE["base_port"]
    ports = [int(p) - 8080 + base for p in re.findall(r"\b(\d{4})\b", run.cmd.split("#", 1)[1])]
    found = [int(p) for p in re.findall(r"\b(\d{4,5})\b", run.out)]
    check(ports and all(p in found for p in ports), "start reports the ports its comment "
          "names (%s, from %d): %s" % (ports, base, run.out.strip()))


def check_cluster_status(run):
    if not run.ok("deploy/cluster.sh status"):
        return
    procs = dict(re.findall(r"^(\S+): running \(pid (\d+)\)$", run.out, re.M))
    check(sorted(procs) == sorted(["redis", "r1", "r2", "r3", "haproxy", "haproxy-lb2"]),
          "status: every process running (%s)" % run.out.strip())
    ups = re.findall(r"^haproxy: (r\d) UP$", run.out, re.M)
    check(sorted(ups) == ["r1", "r2", "r3"], "and HAProxy sees r1, r2, r3 up")
    STATE["cluster_pids"] = [int(p) for p in procs.values()]


def gone(pid):
    try:
        return open("/proc/%d/status" % pid).read().find("State:\tZ") >= 0
    except OSError:
        return True


def check_cluster_stop(run):
    if not run.ok("deploy/cluster.sh stop"):
        return
    pids = STATE.get("cluster_pids", [])
    left = [p for p in pids if not gone(p)]
    check("cluster: stopped" in run.out and pids and not left,
          "when stop returns, the %d processes status listed have exited (left: %s)" % (
              len(pids), left))


def check_bench_slots(run):
    """docs/server.md: tokens/s and tokens per CPU-second for 1 and 4 slots, per-repeat ratios
    and their medians, the same answers with either (the script's exit status)."""
    if not run.ok("bench_slots.py"):
        return
    out = json.loads(run.out[run.out.rindex("\n{") + 1:])
    repeat = int(flag(run.cmd, "--repeat")[0])
    best = out.get("best_runs", [])
    check([r.get("slots") for r in best] == [1, 4] and
          all(r.get("tokens_per_s", 0) > 0 and r.get("tokens_per_cpu_s", 0) > 0 for r in best),
          "the best run of 1 and of 4 slots, in tokens/s and tokens per CPU-s")
    check(len(out.get("per_repeat_ratios", [])) == repeat and
          out.get("median_cpu_efficiency_ratio", 0) > 1 and best and
          best[-1].get("mean_decode_batch", 0) > 2,
          "%d repeats' ratios; 4 slots batch (mean batch %s) and make more tokens per CPU-s "
          "(median ratio %s)" % (repeat, best[-1].get("mean_decode_batch") if best else None,
                                 out.get("median_cpu_efficiency_ratio")))


def doc_table_after(block_pattern):
    text = open(os.path.join(ARGS.source, ARGS.doc)).read()
    rest = text[text.index(block_pattern):]
    rows = [ln for ln in rest.split("\n") if ln.startswith("|")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[:8]], text


def check_cluster_measure(run):
    """docs/server.md (Measured, cluster): the table below the command, its rows in order, the
    turns' token counts the text gives and the KiB per session since format version 3."""
    if not run.ok("cluster_test.py measure"):
        return
    printed = [[c.strip() for c in ln.strip("|").split("|")] for ln in run.out.split("\n")
               if ln.startswith("|")]
    doc, text = doc_table_after("cluster_test.py --primekv")
    check(printed and all(any(p.startswith(c) for p in printed[0]) for c in doc[0]),
          "the printed table has the document's columns %s" % doc[0])
    rows = [r for r in printed[2:]]
    want = [(r[0], r[1], float(r[2])) for r in doc[2:]]
    check([(r[0], r[1], float(r[2])) for r in rows] == want, "its rows are the document's: %s" %
          want)
    tokens = re.search(r"\(([\d,]+) tokens\), then 12[\s\S]*?holds ([\d,]+) tokens", text)
    first_last = "%s / %s" % tuple(g.replace(",", "") for g in tokens.groups())
    check(all(r[3] == first_last for r in rows), "each conversation's turns hold %s tokens" %
          first_last)
    kib = re.search(r"one turn's delta: (\d+) KiB without compression,\s+(\d+) at 0\.75 and "
                    r"(\d+) at 0\.9", text)
    want_kib = [int(k) for k in kib.groups()] * 2 if kib else []
    got_kib = [float(r[4]) for r in rows]
    check(kib and len(got_kib) == 6 and all(abs(g - w) <= 0.02 * w for g, w in
                                            zip(got_kib, want_kib)),
          "KiB per session %s, as the text gives %s" % (got_kib, want_kib))


CHECKS = {
    "README.md": [
        (r"\binspect ", check_inspect),
        (r"stories260K\.gguf -p \"Once upon a time\" -n 64 --temp 0$", check_stories),
        (r"--chat-template chatml --json", check_chat_json),
        (r"\blist-presses\b", check_list_presses),
        (r"stories260K\.gguf .*--press primekv --ratio 0\.5 --json", check_kv_report),
        (r"\bgenerate .*--question", check_answers),
        (r"\bcalibrate ", check_calibrate),
        (r"\bserve ", check_serve),
        (r"^curl .*/v1/chat/completions", check_curl),
        (r"^/usr/bin/python3 -c 'import primekv", check_one_liner),
    ],
    "docs/python.md": [
        (r"^import primekv\n", check_python_example),
        (r"#include \"primekv\.h\"", check_c_example),
    ],
    "docs/server.md": [
        (r"\bserve ", check_serve),
        (r"^curl .*/v1/chat/completions", check_curl),
        (r"deploy/cluster\.sh start", check_cluster_start),
        (r"deploy/cluster\.sh status", check_cluster_status),
        (r"deploy/cluster\.sh stop", check_cluster_stop),
        (r"tests/server/bench_slots\.py", check_bench_slots),
        (r"tests/cluster/cluster_test\.py .* measure", check_cluster_measure),
    ],
}


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--capi", required=True, help="libprimekv_c.so")
    ap.add_argument("--cc", default="cc")
    ap.add_argument("doc", choices=sorted(CHECKS))
    ARGS = ap.parse_args()
    ARGS.source, ARGS.build = os.path.abspath(ARGS.source), os.path.abspath(ARGS.build)
    return server_test.run_checks("primekv-docs-examples-", run_document)


if __name__ == "__main__":
    sys.exit(main())
