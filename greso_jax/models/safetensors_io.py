"""Memory-mapped reading and plain writing of .safetensors files (bf16 included, via ml_dtypes).

Our own reader, rather than `safetensors.numpy`, because it maps the file and hands out
lazy views: a sharded load slices each tensor per device and never copies a whole model.
"""

from __future__ import annotations

import json
import os
import struct

import ml_dtypes
import numpy as np

_DTYPES = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype(np.int64), "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16), "I8": np.dtype(np.int8), "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_),
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def read_header(path: str) -> tuple[int, dict]:
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > 100 * 2**20:
            raise ValueError(f"{path}: implausible safetensors header length {length}")
        header = json.loads(f.read(length))
    return 8 + length, header


def open_tensors(path: str) -> dict[str, np.ndarray]:
    """All tensors of one file as read-only memory-mapped arrays (nothing is read yet)."""
    data_start, header = read_header(path)
    header.pop("__metadata__", None)
    if not header:
        return {}
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        raw = mapped[data_start + begin:data_start + end]
        tensors[name] = raw.view(_DTYPES[info["dtype"]]).reshape(info["shape"])
    return tensors


def write_file(path: str, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    header, offset = {}, 0
    arrays = {name: np.ascontiguousarray(a) for name, a in sorted(tensors.items())}
    for name, a in arrays.items():
        if a.dtype not in _NAMES:
            raise ValueError(f"tensor {name}: unsupported dtype {a.dtype}")
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    header["__metadata__"] = metadata or {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # keep tensor data 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for a in arrays.values():
            f.write(a.tobytes())
    os.replace(tmp, path)
