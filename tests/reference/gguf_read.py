#!/usr/bin/python3
"""Standalone GGUF (v2/v3) reader for the numpy reference forward pass.

Written from the format description only; it shares no code with the C++ engine so that the
two can check each other. Tensors come back as float64 arrays of shape reversed(ne), so a
matrix stored with ne = [in, out] is returned as (out, in) and `x @ W.T` applies it.
"""

import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value type codes.
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL = 0, 1, 2, 3, 4, 5, 6, 7
T_STRING, T_ARRAY, T_U64, T_I64, T_F64 = 8, 9, 10, 11, 12

_SCALAR_FORMATS = {
    T_U8: "<B",
    T_I8: "<b",
    T_U16: "<H",
    T_I16: "<h",
    T_U32: "<I",
    T_I32: "<i",
    T_F32: "<f",
    T_BOOL: "<?",
    T_U64: "<Q",
    T_I64: "<q",
    T_F64: "<d",
}
_SCALAR_DTYPES = {
    T_U8: np.uint8,
    T_I8: np.int8,
    T_U16: np.dtype("<u2"),
    T_I16: np.dtype("<i2"),
    T_U32: np.dtype("<u4"),
    T_I32: np.dtype("<i4"),
    T_F32: np.dtype("<f4"),
    T_BOOL: np.bool_,
    T_U64: np.dtype("<u8"),
    T_I64: np.dtype("<i8"),
    T_F64: np.dtype("<f8"),
}

# ggml tensor type codes handled here, with (elements per block, bytes per block).
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 8, 30
BLOCK_LAYOUT = {
    GGML_F32: (1, 4),
    GGML_F16: (1, 2),
    GGML_BF16: (1, 2),
    GGML_Q8_0: (32, 2 + 32),
    GGML_Q4_0: (32, 2 + 16),
}
TYPE_NAMES = {GGML_F32: "F32", GGML_F16: "F16", GGML_Q4_0: "Q4_0", GGML_Q8_0: "Q8_0",
              GGML_BF16: "BF16"}


class GGUFError(Exception):
    pass


class _Cursor:
    """Bounded little-endian reads from a byte buffer."""

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError(f"truncated file: need {n} bytes at offset {self.pos}")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, vtype):
        fmt = _SCALAR_FORMATS[vtype]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def u32(self):
        return self.scalar(T_U32)

    def u64(self):
        return self.scalar(T_U64)

    def string(self):
        n = self.u64()
        return bytes(self.take(n)).decode("utf-8", errors="replace")

    def value(self, vtype):
        if vtype in _SCALAR_FORMATS:
            return self.scalar(vtype)
        if vtype == T_STRING:
            return self.string()
        if vtype == T_ARRAY:
            etype = self.u32()
            count = self.u64()
            if etype in _SCALAR_DTYPES:
                dt = np.dtype(_SCALAR_DTYPES[etype])
                raw = self.take(count * dt.itemsize)
                return np.frombuffer(raw, dtype=dt, count=count).tolist()
            return [self.value(etype) for _ in range(count)]
        raise GGUFError(f"unknown metadata value type {vtype} at offset {self.pos}")


def _f16_from(raw_u8, offsets):
    """float16 values stored at byte columns `offsets` of a (n, block_bytes) uint8 array."""
    lo = raw_u8[:, offsets].astype(np.uint16)
    hi = raw_u8[:, offsets + 1].astype(np.uint16)
    return (lo | (hi << 8)).view(np.float16)


def dequantize(raw, ggml_type, n_elements):
    """Converts the raw bytes of one tensor to a flat float64 array of n_elements values."""
    if ggml_type not in BLOCK_LAYOUT:
        raise GGUFError(f"unsupported ggml type {ggml_type}")
    block_elems, block_bytes = BLOCK_LAYOUT[ggml_type]
    if n_elements % block_elems:
        raise GGUFError(f"{n_elements} elements is not a multiple of block size {block_elems}")
    n_blocks = n_elements // block_elems
    need = n_blocks * block_bytes
    if len(raw) < need:
        raise GGUFError(f"tensor data truncated: need {need} bytes, have {len(raw)}")
    raw = np.frombuffer(raw, dtype=np.uint8, count=need)
    if ggml_type == GGML_F32:
        return raw.view("<f4").astype(np.float64)
    if ggml_type == GGML_F16:
        return raw.view("<f2").astype(np.float64)
    if ggml_type == GGML_BF16:
        # bf16 is the top half of an f32.
        bits = raw.view("<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    blocks = raw.reshape(n_blocks, block_bytes)
    d = _f16_from(blocks, np.array([0])).astype(np.float64)  # (n_blocks, 1)
    if ggml_type == GGML_Q8_0:
        q = blocks[:, 2:].view(np.int8).astype(np.float64)  # (n_blocks, 32)
        return (d * q).reshape(-1)
    # Q4_0: element j (< 16) is the low nibble of byte j, element j + 16 the high nibble.
    packed = blocks[:, 2:]
    lo = (packed & 0x0F).astype(np.float64) - 8.0
    hi = (packed >> 4).astype(np.float64) - 8.0
    q = np.concatenate([lo, hi], axis=1)  # (n_blocks, 32)
    return (d * q).reshape(-1)


class TensorInfo:
    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = ne  # ne[0] varies fastest
        self.ggml_type = ggml_type
        self.offset = offset  # relative to the start of the data section

    @property
    def n_elements(self):
        n = 1
        for d in self.ne:
            n *= d
        return n

    @property
    def n_bytes(self):
        block_elems, block_bytes = BLOCK_LAYOUT.get(self.ggml_type, (1, 0))
        return self.n_elements // block_elems * block_bytes

    @property
    def shape(self):
        return tuple(reversed(self.ne))


class GGUFFile:
    """A parsed GGUF file: `metadata` dict, `infos` dict and lazily dequantised tensors."""

    def __init__(self, path):
        self.path = path
        self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        cur = _Cursor(memoryview(self.buf))
        if bytes(cur.take(4)) != GGUF_MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (bad magic)")
        self.version = cur.u32()
        if self.version not in (2, 3):
            raise GGUFError(f"{path}: unsupported GGUF version {self.version}")
        n_tensors = cur.u64()
        n_kv = cur.u64()
        self.metadata = {}
        self.metadata_types = {}
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.u32()
            self.metadata[key] = cur.value(vtype)
            self.metadata_types[key] = vtype
        self.infos = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.u32()
            if n_dims > 4:
                raise GGUFError(f"tensor {name}: {n_dims} dims")
            ne = [cur.u64() for _ in range(n_dims)]
            ggml_type = cur.u32()
            offset = cur.u64()
            self.infos[name] = TensorInfo(name, ne, ggml_type, offset)
        align = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        if align <= 0:
            raise GGUFError(f"bad alignment {align}")
        self.data_start = (cur.pos + align - 1) // align * align
        for info in self.infos.values():
            end = self.data_start + info.offset + info.n_bytes
            if end > len(self.buf):
                raise GGUFError(f"tensor {info.name} runs past the end of the file")

    def tensor(self, name):
        """The named tensor as float64 with shape reversed(ne)."""
        info = self.infos[name]
        start = self.data_start + info.offset
        raw = self.buf[start:start + info.n_bytes]
        return dequantize(raw, info.ggml_type, info.n_elements).reshape(info.shape)

    def has(self, name):
        return name in self.infos

    def tensors(self):
        return {name: self.tensor(name) for name in self.infos}


def read_gguf(path):
    """Returns (metadata dict, {name: float64 array of shape reversed(ne)})."""
    f = GGUFFile(path)
    return f.metadata, f.tensors()


def main(argv):
    f = GGUFFile(argv[1])
    print(f"GGUF v{f.version}, {len(f.metadata)} keys, {len(f.infos)} tensors, "
          f"data at {f.data_start}")
    for k, v in f.metadata.items():
        if isinstance(v, list) and len(v) > 8:
            v = f"[{len(v)} items: {v[:4]} ...]"
        print(f"  {k} = {v}")
    for info in f.infos.values():
        print(f"  {info.name} {TYPE_NAMES.get(info.ggml_type, info.ggml_type)} ne={info.ne}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
