"""Tiny safetensors reader/writer (numpy only; no `safetensors` package here).

Format (https://huggingface.co/docs/safetensors): 8-byte little-endian u64 N, then N bytes of
JSON header {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
"__metadata__": {str: str}}, then the data buffer; offsets are relative to the buffer start.
Tensors are little-endian, row-major. We pad the header with spaces to a multiple of 8 bytes, as
the reference writer does, so every tensor in the buffer is 8-byte aligned.

Supported dtypes: F32, BF16 (read: widened to float32 unless raw=True; write: round to nearest
even from float32), plus F16, F64, I32, I64, U8 for completeness.

    tensors = load("x.safetensors")               # {name: np.ndarray}
    save("y.safetensors", tensors)                # F32 for float32 arrays
    save("y.safetensors", tensors, dtype="BF16")  # store every float tensor as bf16
"""

import json
import struct

import numpy as np

_NP_DTYPES = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "F64": np.dtype("<f8"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
    "U8": np.dtype("u1"),
    "BF16": np.dtype("<u2"),  # raw bits; widened on load
}
_MAX_HEADER = 100 * 1024 * 1024


def bf16_bits_to_f32(bits):
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> uint16 bf16 bit patterns, round to nearest even (NaN stays a quiet NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = ((u >> 16) & 1) + np.uint32(0x7FFF)
    out = ((u + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(np.ascontiguousarray(x, dtype=np.float32))
    out[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return out


def read_header(path):
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: too short for a safetensors file")
        (n,) = struct.unpack("<Q", raw)
        if n > _MAX_HEADER:
            raise ValueError(f"{path}: header length {n} is implausible")
        header = json.loads(f.read(n).decode("utf-8"))
    return header, 8 + n


def load(path, raw=False):
    """Returns {name: np.ndarray}; BF16 becomes float32 unless raw=True (then uint16 bits).

    The "__metadata__" entry is dropped; use load_with_metadata() to get it.
    """
    return load_with_metadata(path, raw)[0]


def load_with_metadata(path, raw=False):
    header, start = read_header(path)
    with open(path, "rb") as f:
        f.seek(start)
        buf = f.read()
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        dt = info["dtype"]
        if dt not in _NP_DTYPES:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        npdt = _NP_DTYPES[dt]
        shape = tuple(int(s) for s in info["shape"])
        b, e = info["data_offsets"]
        count = int(np.prod(shape, dtype=np.int64))
        if e - b != count * npdt.itemsize or e > len(buf) or b < 0:
            raise ValueError(f"{path}: tensor {name}: offsets {b}..{e} do not fit shape {shape} "
                             f"{dt} (buffer {len(buf)} bytes)")
        arr = np.frombuffer(buf, dtype=npdt, count=count, offset=b).reshape(shape).copy()
        if dt == "BF16" and not raw:
            arr = bf16_bits_to_f32(arr).reshape(shape)
        out[name] = arr
    return out, meta


def dtypes(path):
    """{name: dtype string} as stored."""
    header, _ = read_header(path)
    header.pop("__metadata__", None)
    return {k: v["dtype"] for k, v in header.items()}


def save(path, tensors, dtype=None, metadata=None):
    """Writes {name: array-like}. dtype=None keeps F32 for floating arrays (float64/float16 are
    converted to float32) and the integer types as they are; dtype="BF16" stores every floating
    tensor as bf16 (rounded to nearest even)."""
    entries = []
    offset = 0
    for name in sorted(tensors):
        a = tensors[name]
        if hasattr(a, "detach"):  # torch tensor without importing torch here
            a = a.detach().cpu()
            if str(a.dtype) == "torch.bfloat16":
                a = a.float()
            a = a.numpy()
        a = np.asarray(a)
        if a.dtype.kind == "f":
            if dtype == "BF16":
                data, dt = f32_to_bf16_bits(a.astype(np.float32)), "BF16"
            else:
                data, dt = a.astype("<f4"), "F32"
        elif a.dtype == np.int32:
            data, dt = a.astype("<i4"), "I32"
        elif a.dtype == np.int64:
            data, dt = a.astype("<i8"), "I64"
        elif a.dtype == np.uint8:
            data, dt = a, "U8"
        else:
            raise ValueError(f"tensor {name}: unsupported numpy dtype {a.dtype}")
        blob = np.ascontiguousarray(data).tobytes()
        entries.append((name, dt, list(a.shape), offset, offset + len(blob), blob))
        offset += len(blob)
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, dt, shape, b, e, _ in entries:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [b, e]}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((-len(hb)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for entry in entries:
            f.write(entry[5])
