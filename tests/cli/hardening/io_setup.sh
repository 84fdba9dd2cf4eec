#!/bin/sh
# Fixtures for io.table: deep manifests, huge inputs, GGUF files with hostile metadata, and a
# convert whose output is larger than what may be held in memory. Usage: io_setup.sh DIR BIN MODEL
set -eu
T="$1"; BIN="$2"
cd "$T"
head -c 4096 /dev/zero > tensors.bin
# JSON nested 200,000 deep in each field of a convert manifest.
python3 - << 'PY'
deep = "[" * 200000 + "]" * 200000
def manifest(name, meta_value='1', ne='[4]', dtype='"F32"', data='"tensors.bin"', offset='0'):
    with open(name, "w") as f:
        f.write('{"data": %s, "metadata": [{"key": "a", "type": "uint8", "value": %s}],'
                ' "tensors": [{"name": "t", "ne": %s, "dtype": %s, "offset": %s}]}\n'
                % (data, meta_value, ne, dtype, offset))
manifest("deep_value.json", meta_value=deep)
manifest("deep_ne.json", ne=deep)
manifest("deep_dtype.json", dtype=deep)
manifest("deep_data.json", data=deep)
manifest("deep_offset.json", offset=deep)
# Rows of 4 floats: no K-quant block fits.
manifest("narrow.json", ne="[4, 4]")
# 300 matrices of 1024 x 1024 floats, all at offset 0 of one 4 MiB blob: a 1.2 GB output file.
with open("big.json", "w") as f:
    f.write('{"data": "big.bin", "metadata": [], "tensors": [%s]}\n' % ",".join(
        '{"name": "t%d", "ne": [1024, 1024], "offset": 0}' % i for i in range(300)))
with open("big.bin", "wb") as f:
    f.write(b"\0" * (4 << 20))

import struct
def gguf(name, kvs):
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
    for key, payload in kvs:
        out += struct.pack("<Q", len(key)) + key + payload
    with open(name, "wb") as f:
        f.write(out)
def string(s):
    return struct.pack("<IQ", 8, len(s)) + s
# One u8 array of 25 million elements (25 MB on disk).
gguf("big_array.gguf", [(b"big", struct.pack("<IIQ", 9, 0, 25000000) + b"\0" * 25000000)])
# A key with an embedded NUL, and a value with terminal escape sequences and a C1 control.
gguf("nul_key.gguf", [(b"general.architecture\0evil", string(b"llama")),
                      (b"general.name", string(b"\x1b[2J\x1b]0;pwned\x07\xc2\x9b31m ok"))])
# 50 MB of text for a model with a 512-token context.
with open("ctx50m.txt", "w") as f:
    f.write("Lily and Ben went to the park. " * (50 * 1000 * 1000 // 31))
# A context with a NUL in it: the echo must show what follows.
with open("nul_ctx.txt", "wb") as f:
    f.write(b"Lily\0and Ben went to the park")
PY
ln -s loop_a.gguf loop_b.gguf
ln -s loop_b.gguf loop_a.gguf
mkdir -p out
