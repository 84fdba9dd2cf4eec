#!/usr/bin/env python3
"""The build enforces the module layering (docs/architecture.md): a module's sources compile
with an include root that holds only the public headers of the modules it declares, so an
undeclared include fails to build.

For each row (module, header, allowed) this takes the compile command of one of the module's
own sources from compile_commands.json, compiles a one-line probe `#include "<header>"` with
it (-fsyntax-only), and checks that it builds exactly when allowed. The allowed rows are the
controls: the probe and the command work, so a refused row fails for the include alone.

    tests/layering_test.py BUILD_DIR
"""

import json
import os
import shlex
import subprocess
import sys
import tempfile

# (module library, header, may include)
ROWS = [
    ("util", "primekv/util/dtype.h", True),
    ("util", "primekv/gguf/gguf.h", False),
    ("util", "primekv/quant/quant.h", False),
    ("quant", "primekv/util/dtype.h", True),
    ("quant", "primekv/gguf/gguf.h", False),
    ("kv", "primekv/quant/quant.h", True),
    ("kv", "primekv/gguf/gguf.h", False),
    ("kv", "primekv/model/model.h", False),
    ("tokenizer", "primekv/gguf/gguf.h", True),
    ("tokenizer", "primekv/quant/quant.h", False),
    ("model", "primekv/gguf/gguf.h", True),
    ("model", "primekv/press/press.h", False),
    ("press", "primekv/model/model.h", True),
    ("press", "primekv/session/session.h", False),
    ("session", "primekv/press/compressor.h", True),
    ("session", "primekv/server/server.h", False),
    ("session", "primekv/eval/eval.h", False),
    ("eval", "primekv/tokenizer/tokenizer.h", True),
    ("eval", "primekv/model/model.h", False),
    ("gguf", "primekv/util/dtype.h", True),
    ("gguf", "primekv/quant/quant.h", False),
    ("attention", "primekv/kv/kv_cache.h", True),
    ("attention", "primekv/model/model.h", False),
    ("eval_runner", "primekv/session/pipeline.h", True),
    ("eval_runner", "primekv/server/server.h", False),
    ("server", "primekv/session/conversation.h", True),
    ("server", "primekv/eval/eval_runner.h", False),
]
# Every module of docs/architecture.md's table has rows; the programs on top (cli, capi) see
# all of include/ by design, so they have none.


def command_for(entries, module):
    marker = "/primekv_%s.dir/" % module
    for e in entries:
        args = e.get("arguments") or shlex.split(e["command"])
        out = args[args.index("-o") + 1] if "-o" in args else ""
        # A unity build compiles its .cxx files with the module's command.
        if marker in "/" + out and e["file"].endswith((".cc", ".cxx")):
            return e["directory"], args
    return None, None


def probe(directory, args, header, tmp):
    src = os.path.join(tmp, "probe.cc")
    with open(src, "w") as f:
        f.write('#include "%s"\n' % header)
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ", "-c"):
            skip = True
            continue
        if a in ("-MD", "-MMD") or a.endswith((".cc", ".cxx")):
            continue
        out.append(a)
    out += ["-fsyntax-only", src]
    r = subprocess.run(out, cwd=directory, capture_output=True, text=True)
    return r.returncode == 0, r.stderr


def main():
    build = sys.argv[1]
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    failures = passed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for module, header, allowed in ROWS:
            directory, args = command_for(entries, module)
            if args is None:
                print("FAIL %s: no compile command for primekv_%s" % (module, module))
                failures += 1
                continue
            ok, err = probe(directory, args, header, tmp)
            good = ok == allowed
            if not good:
                failures += 1
            else:
                passed += 1
            reason = "" if ok else " (" + next((l for l in err.splitlines() if "error" in l), err[:120]).strip() + ")"
            print("%s %s includes %s: %s%s" % ("ok  " if good else "FAIL", module, header,
                                               "builds" if ok else "refused", reason))
    print("%d passed, %d failed" % (passed, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
