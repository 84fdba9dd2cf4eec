#!/usr/bin/env python3
"""Session file bytes and save time of one conversation (1,556 context tokens, one turn) for
each cache type and press, through the C API (docs/server.md, session files).

    PYTHONPATH=python PRIMEKV_LIB=build/release/src/capi/libprimekv_c.so \\
        /usr/bin/python3 research/scripts/session_file_sizes.py models/primekv-retrieval.gguf OUTDIR

Run it with the library of an older build (format version 1) for the before column.
"""
import os
import sys
import time

import primekv


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    model, out = sys.argv[1], sys.argv[2]
    m = primekv.Model(model)
    ids = [(7 * i) % 1900 + 3 for i in range(1556)]
    os.makedirs(out, exist_ok=True)
    print("| cache | press | ratio | KB | save ms |\n|---|---|---|---|---|")
    for q8 in (False, True):
        for press, ratio in (("none", 0.0), ("primekv", 0.75), ("primekv", 0.9)):
            s = m.session(press=press, ratio=ratio, mode="multiturn", threads=2, kv_q8=q8,
                          ctx_size=2048)
            s.feed_context(ids)
            s.end_turn()
            t0 = time.time()
            s.save(out, "s")
            ms = (time.time() - t0) * 1000
            kb = os.path.getsize(os.path.join(out, "s.pkvs")) / 1000
            print("| %s | %s | %.2f | %.1f | %.1f |" % ("q8_0" if q8 else "f16", press, ratio, kb, ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
