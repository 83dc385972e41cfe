"""safetensors reader (one file, or a folder with model.safetensors.index.json
and its shards) for F32/F16/BF16, and a minimal writer for the self-test.

From the safetensors README (notes §5.1-§5.2): u64 LE header size N, N bytes
of JSON {name: {dtype, shape, data_offsets: [begin, end)}} (+ optional
__metadata__), then the byte buffer; row-major, little-endian."""
import json
import os
import struct

import numpy as np

_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


class SafetensorsError(ValueError):
    pass


def read_file(path):
    """-> ({name: float32 ndarray}, {name: dtype string}, __metadata__ or {})."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise SafetensorsError(f"{path}: too short")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise SafetensorsError(f"{path}: header of {n} bytes past the end")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    buf = memoryview(data)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    tensors, dtypes = {}, {}
    for name, info in header.items():
        dt = info["dtype"]
        if dt not in _DTYPES:
            raise SafetensorsError(f"{name}: dtype {dt} not supported by this reference")
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if end - begin != count * (4 if dt == "F32" else 2) or begin > end:
            raise SafetensorsError(f"{name}: {end - begin} bytes for shape {shape} {dt}")
        if end > len(buf):
            raise SafetensorsError(f"{name}: data past the end")
        a = np.frombuffer(buf[begin:end], dtype=_DTYPES[dt], count=count)
        if dt == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        else:
            a = a.astype(np.float32)
        tensors[name] = a.reshape(shape)
        dtypes[name] = dt
    return tensors, dtypes, meta


def read_model(path):
    """A .safetensors file, or a folder holding model.safetensors or
    model.safetensors.index.json + shards. -> ({name: ndarray}, {name: dtype})."""
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                weight_map = json.load(f)["weight_map"]
            tensors, dtypes = {}, {}
            for shard in sorted(set(weight_map.values())):
                t, d, _ = read_file(os.path.join(path, shard))
                for name in t:
                    if weight_map.get(name) != shard:
                        raise SafetensorsError(f"{name} in {shard} but the index says {weight_map.get(name)}")
                tensors.update(t)
                dtypes.update(d)
            missing = set(weight_map) - set(tensors)
            if missing:
                raise SafetensorsError(f"index names tensors no shard holds: {sorted(missing)[:5]}")
            return tensors, dtypes
        path = os.path.join(path, "model.safetensors")
    t, d, _ = read_file(path)
    return t, d


def write_file(path, tensors, dtype="F32", metadata=None):
    """tensors: {name: ndarray}; written in the given dtype (F32/F16/BF16;
    BF16 by truncation, which is fine for a test's random weights)."""
    header, chunks, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        if dtype == "F32":
            raw = a.astype("<f4").tobytes()
        elif dtype == "F16":
            raw = a.astype("<f2").tobytes()
        elif dtype == "BF16":
            raw = (a.view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            raise ValueError(dtype)
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    hb = json.dumps(header).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(chunks))
