"""GGUF v2/v3 reader and minimal v3 writer, with numpy dequantizers.

Written from the GGUF spec (ggml docs/gguf.md) and ggml's block layouts as
summarised in /work/shared/notes/model-files.md §1-§2; independent of
kvevict's C++. Little-endian files only.

Reader:  f = read_gguf(path)
         f.version, f.alignment, f.metadata {key: value}, f.value_types
         {key: (type, element_type or None)}, f.tensors [TensorInfo],
         f.data_start, f.raw(name) -> bytes, f.tensor(name) -> float32 ndarray
         in PyTorch order (dims reversed: shape = ne[::-1]).
Writer:  write_gguf(path, kv, tensors) with kv a list of (key, type, value),
         type an int value-type id or (ARRAY, element type) for arrays, and
         tensors a list of (name, ne, ggml type id, raw bytes).
Dequantizers: dequantize(type_id, raw bytes, n_elements) -> float32 ndarray.
"""
import mmap
import struct
from dataclasses import dataclass

import numpy as np

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types (notes §1.2).
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
VALUE_TYPE_NAMES = {
    UINT8: "UINT8", INT8: "INT8", UINT16: "UINT16", INT16: "INT16", UINT32: "UINT32", INT32: "INT32",
    FLOAT32: "FLOAT32", BOOL: "BOOL", STRING: "STRING", ARRAY: "ARRAY", UINT64: "UINT64", INT64: "INT64",
    FLOAT64: "FLOAT64",
}
# Fixed-size scalar value types: struct code and numpy dtype.
_SCALAR = {
    UINT8: ("<B", "<u1"), INT8: ("<b", "<i1"), UINT16: ("<H", "<u2"), INT16: ("<h", "<i2"),
    UINT32: ("<I", "<u4"), INT32: ("<i", "<i4"), FLOAT32: ("<f", "<f4"), BOOL: ("<?", "<u1"),
    UINT64: ("<Q", "<u8"), INT64: ("<q", "<i8"), FLOAT64: ("<d", "<f8"),
}

# ggml tensor types this reference knows: id -> (name, elements per block, bytes per block).
F32, F16, Q4_0, Q5_0, Q8_0, Q4_K, Q6_K, BF16 = 0, 1, 2, 6, 8, 12, 14, 30
GGML_TYPES = {
    F32: ("F32", 1, 4),
    F16: ("F16", 1, 2),
    Q4_0: ("Q4_0", 32, 18),
    Q5_0: ("Q5_0", 32, 22),
    Q8_0: ("Q8_0", 32, 34),
    Q4_K: ("Q4_K", 256, 144),
    Q6_K: ("Q6_K", 256, 210),
    BF16: ("BF16", 1, 2),
}
TYPE_BY_NAME = {v[0]: k for k, v in GGML_TYPES.items()}


def type_name(type_id):
    return GGML_TYPES[type_id][0] if type_id in GGML_TYPES else f"type{type_id}"


def tensor_nbytes(type_id, ne):
    """Bytes a tensor of this type and shape occupies (rows of whole blocks)."""
    _, blck, size = GGML_TYPES[type_id]
    if ne[0] % blck:
        raise ValueError(f"{type_name(type_id)}: ne[0]={ne[0]} is not a multiple of {blck}")
    rows = int(np.prod(ne[1:], dtype=np.int64)) if len(ne) > 1 else 1
    return ne[0] // blck * size * rows


# --------------------------------------------------------------------------
# Dequantizers (notes §2.2-§2.3, Q5_0 from the brief), vectorised over blocks.
# --------------------------------------------------------------------------

def _f16(a):
    return a.astype(np.float32)


def _blocks(raw, dtype, n, blck):
    if n % blck:
        raise ValueError(f"{n} elements is not a multiple of the block size {blck}")
    nb = n // blck
    if len(raw) != nb * dtype.itemsize:
        raise ValueError(f"expected {nb * dtype.itemsize} bytes for {n} elements, got {len(raw)}")
    return np.frombuffer(raw, dtype=dtype, count=nb)


_Q8_0 = np.dtype([("d", "<f2"), ("qs", "i1", 32)])
_Q4_0 = np.dtype([("d", "<f2"), ("qs", "u1", 16)])
_Q5_0 = np.dtype([("d", "<f2"), ("qh", "<u4"), ("qs", "u1", 16)])
_Q4_K = np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qs", "u1", 128)])
_Q6_K = np.dtype([("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "<f2")])
assert (_Q8_0.itemsize, _Q4_0.itemsize, _Q5_0.itemsize, _Q4_K.itemsize, _Q6_K.itemsize) == (34, 18, 22, 144, 210)


def deq_f32(raw, n):
    return np.frombuffer(raw, dtype="<f4", count=n).astype(np.float32)


def deq_f16(raw, n):
    return np.frombuffer(raw, dtype="<f2", count=n).astype(np.float32)


def deq_bf16(raw, n):
    bits = np.frombuffer(raw, dtype="<u2", count=n).astype(np.uint32) << 16
    return bits.view(np.float32)


def deq_q8_0(raw, n):
    b = _blocks(raw, _Q8_0, n, 32)
    return (_f16(b["d"])[:, None] * b["qs"].astype(np.float32)).reshape(-1)


def deq_q4_0(raw, n):
    b = _blocks(raw, _Q4_0, n, 32)
    qs = b["qs"]
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int32) - 8   # elements 0..15, then 16..31
    return (_f16(b["d"])[:, None] * q.astype(np.float32)).reshape(-1)


def deq_q5_0(raw, n):
    b = _blocks(raw, _Q5_0, n, 32)
    qs = b["qs"].astype(np.uint32)
    qh = b["qh"].astype(np.uint32)[:, None]
    j = np.arange(32, dtype=np.uint32)[None, :]
    high = (qh >> j) & 1                                                   # bit j of qh: 5th bit of element j
    low = np.concatenate([qs & 0xF, qs >> 4], axis=1)
    q = (low | (high << 4)).astype(np.int32) - 16
    return (_f16(b["d"])[:, None] * q.astype(np.float32)).reshape(-1)


def q4_k_scale_min(scales):
    """scales [nb, 12] u8 -> (sc, m), each [nb, 8] int32: the 6-bit scale and
    min of each of the 8 sub-blocks."""
    s = scales.astype(np.int32)
    sc = np.empty((s.shape[0], 8), np.int32)
    m = np.empty_like(sc)
    sc[:, :4] = s[:, 0:4] & 63
    m[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, m


def deq_q4_k(raw, n):
    b = _blocks(raw, _Q4_K, n, 256)
    nb = b.shape[0]
    sc, m = q4_k_scale_min(b["scales"])
    qs = b["qs"].reshape(nb, 4, 32)
    # group g: low nibbles -> sub-block 2g, high nibbles -> sub-block 2g+1
    q = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(nb, 8, 32).astype(np.float32)
    d = _f16(b["d"])[:, None] * sc.astype(np.float32)                     # [nb, 8]
    mn = _f16(b["dmin"])[:, None] * m.astype(np.float32)
    return (d[:, :, None] * q - mn[:, :, None]).reshape(-1)


def deq_q6_k(raw, n):
    b = _blocks(raw, _Q6_K, n, 256)
    nb = b.shape[0]
    ql = b["ql"].reshape(nb, 2, 2, 32)          # [block, half, first/second 32 bytes, l]
    qh = b["qh"].reshape(nb, 2, 32)             # [block, half, l]
    q = np.empty((nb, 2, 4, 32), np.int32)
    q[:, :, 0] = (ql[:, :, 0] & 0xF) | (((qh >> 0) & 3) << 4)    # element l
    q[:, :, 1] = (ql[:, :, 1] & 0xF) | (((qh >> 2) & 3) << 4)    # element l + 32
    q[:, :, 2] = (ql[:, :, 0] >> 4) | (((qh >> 4) & 3) << 4)     # element l + 64
    q[:, :, 3] = (ql[:, :, 1] >> 4) | (((qh >> 6) & 3) << 4)     # element l + 96
    q = (q.reshape(nb, 256) - 32).astype(np.float32)
    scale = np.repeat(b["scales"].astype(np.float32), 16, axis=1)   # scales[e // 16]
    return ((_f16(b["d"])[:, None] * scale) * q).reshape(-1)


DEQUANTIZERS = {F32: deq_f32, F16: deq_f16, BF16: deq_bf16, Q8_0: deq_q8_0, Q4_0: deq_q4_0,
                Q5_0: deq_q5_0, Q4_K: deq_q4_k, Q6_K: deq_q6_k}


def dequantize(type_id, raw, n):
    if type_id not in DEQUANTIZERS:
        raise NotImplementedError(f"no dequantizer for ggml type {type_id}")
    return DEQUANTIZERS[type_id](raw, n)


# --------------------------------------------------------------------------
# Reader
# --------------------------------------------------------------------------

@dataclass
class TensorInfo:
    name: str
    ne: list
    type_id: int
    offset: int

    @property
    def n_elements(self):
        return int(np.prod(self.ne, dtype=np.int64))

    @property
    def nbytes(self):
        return tensor_nbytes(self.type_id, self.ne)


class GGUFError(ValueError):
    pass


class _Cursor:
    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise GGUFError(f"truncated file: need {n} bytes at offset {self.pos}")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, t):
        code = _SCALAR[t][0]
        size = struct.calcsize(code)
        (v,) = struct.unpack(code, self.take(size))
        if t == BOOL and self.buf[self.pos - 1] not in (0, 1):
            raise GGUFError(f"BOOL value {self.buf[self.pos - 1]} at offset {self.pos - 1}")
        return v

    def u32(self):
        return self.scalar(UINT32)

    def u64(self):
        return self.scalar(UINT64)

    def string(self):
        n = self.u64()
        return bytes(self.take(n)).decode("utf-8")

    def value(self, t):
        """-> (value, element type for arrays or None)"""
        if t == STRING:
            return self.string(), None
        if t == ARRAY:
            et = self.u32()
            count = self.u64()
            if et in _SCALAR:
                dt = np.dtype(_SCALAR[et][1])
                arr = np.frombuffer(self.take(count * dt.itemsize), dtype=dt)
                vals = [bool(x) for x in arr] if et == BOOL else arr.tolist()
                return vals, et
            if et == STRING:
                return [self.string() for _ in range(count)], et
            if et == ARRAY:
                return [self.value(ARRAY)[0] for _ in range(count)], et
            raise GGUFError(f"unknown array element type {et}")
        if t in _SCALAR:
            return self.scalar(t), None
        raise GGUFError(f"unknown metadata value type {t}")


class GGUFFile:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            self._buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        c = _Cursor(memoryview(self._buf))
        if bytes(c.take(4)) != MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (bad magic)")
        self.version = c.u32()
        if self.version not in (2, 3):
            raise GGUFError(f"{path}: unsupported GGUF version {self.version}")
        n_tensors = c.u64()
        n_kv = c.u64()
        self.metadata = {}
        self.value_types = {}
        self.key_order = []
        for _ in range(n_kv):
            key = c.string()
            t = c.u32()
            v, et = c.value(t)
            if key in self.metadata:
                raise GGUFError(f"duplicate key {key}")
            self.metadata[key] = v
            self.value_types[key] = (t, et)
            self.key_order.append(key)
        self.tensors = []
        for _ in range(n_tensors):
            name = c.string()
            nd = c.u32()
            if nd > 4:
                raise GGUFError(f"{name}: {nd} dims")
            ne = [c.u64() for _ in range(nd)]
            tid = c.u32()
            off = c.u64()
            self.tensors.append(TensorInfo(name, ne, tid, off))
        self.alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise GGUFError(f"alignment {self.alignment} is not a power of two")
        self.tensor_info_end = c.pos
        self.data_start = _align(c.pos, self.alignment) if self.tensors else c.pos
        self.by_name = {t.name: t for t in self.tensors}
        for t in self.tensors:
            if t.offset % self.alignment:
                raise GGUFError(f"{t.name}: offset {t.offset} not aligned to {self.alignment}")
            if t.type_id in GGML_TYPES and self.data_start + t.offset + t.nbytes > len(self._buf):
                raise GGUFError(f"{t.name}: data past the end of the file")

    def raw(self, name):
        t = self.by_name[name]
        start = self.data_start + t.offset
        return bytes(self._buf[start:start + t.nbytes])

    def tensor(self, name):
        """Dequantized float32 array, PyTorch order (shape = reversed ne)."""
        t = self.by_name[name]
        flat = dequantize(t.type_id, self.raw(name), t.n_elements)
        return flat.reshape(tuple(reversed(t.ne)))

    def __contains__(self, name):
        return name in self.by_name


def read_gguf(path):
    return GGUFFile(path)


def _align(x, a):
    return (x + a - 1) // a * a


# --------------------------------------------------------------------------
# Writer (v3 by default; v2 has the same layout)
# --------------------------------------------------------------------------

def _enc_string(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _enc_value(t, v):
    if isinstance(t, tuple):            # (ARRAY, element type); element type may itself be a tuple
        assert t[0] == ARRAY
        et = t[1]
        et_id = et[0] if isinstance(et, tuple) else et
        out = struct.pack("<IQ", et_id, len(v))
        if et_id in _SCALAR:
            return out + np.asarray(v, dtype=_SCALAR[et_id][1]).tobytes()
        return out + b"".join(_enc_value(et, x) for x in v)
    if t == STRING:
        return _enc_string(v)
    if t in _SCALAR:
        return struct.pack(_SCALAR[t][0], v)
    raise ValueError(f"cannot encode value type {t}")


def write_gguf(path, kv, tensors=(), version=3):
    """kv: [(key, type, value)]; tensors: [(name, ne, type_id, raw bytes)].
    Alignment comes from a general.alignment entry in kv, else 32."""
    alignment = DEFAULT_ALIGNMENT
    for key, t, v in kv:
        if key == "general.alignment":
            alignment = int(v)
    out = bytearray(MAGIC + struct.pack("<IQQ", version, len(tensors), len(kv)))
    for key, t, v in kv:
        out += _enc_string(key)
        out += struct.pack("<I", t[0] if isinstance(t, tuple) else t)
        out += _enc_value(t, v)
    offset = 0
    offsets = []
    for name, ne, tid, raw in tensors:
        if tid in GGML_TYPES and len(raw) != tensor_nbytes(tid, ne):
            raise ValueError(f"{name}: {len(raw)} bytes for ne={ne} {type_name(tid)}")
        offsets.append(offset)
        offset = _align(offset + len(raw), alignment)
    for (name, ne, tid, raw), off in zip(tensors, offsets):
        out += _enc_string(name) + struct.pack("<I", len(ne))
        out += struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", tid, off)
    if tensors:
        out += b"\0" * (_align(len(out), alignment) - len(out))
        data_start = len(out)
        for (name, ne, tid, raw), off in zip(tensors, offsets):
            out += b"\0" * (data_start + off - len(out))
            out += raw
    with open(path, "wb") as f:
        f.write(out)


def f32_tensor(name, array):
    """(name, ne, F32, bytes) for a numpy array in PyTorch order."""
    a = np.ascontiguousarray(array, dtype="<f4")
    return (name, list(reversed(a.shape)), F32, a.tobytes())
