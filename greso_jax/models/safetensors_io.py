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


class SafetensorsError(ValueError):
    """A damaged or malformed .safetensors file; the message names the file and, where one is at
    fault, the tensor."""


def read_header(path: str) -> tuple[int, dict]:
    """(offset of the data section, the parsed header). Raises SafetensorsError naming `path`."""
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise SafetensorsError(f"{path}: {len(prefix)} bytes, too short for a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > 100 * 2**20 or 8 + length > os.path.getsize(path):
            raise SafetensorsError(f"{path}: implausible safetensors header length {length}")
        try:
            header = json.loads(f.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SafetensorsError(f"{path}: the header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: the header is a JSON {type(header).__name__}, not an object")
    return 8 + length, header


def _checked_entries(path: str, header: dict, data_size: int) -> list[tuple[str, np.dtype, list[int], int, int]]:
    """(name, dtype, shape, begin, end) of every tensor, after checking that each one's offsets lie
    inside the data section, span exactly dtype size x shape, and overlap no other tensor's."""
    entries = []
    for name, info in header.items():
        try:
            dtype_name, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise SafetensorsError(f"{path}: tensor {name}: the header entry needs dtype, shape and "
                                   "data_offsets [begin, end]") from None
        if dtype_name not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor {name} has unsupported dtype {dtype_name}")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
                and all(isinstance(o, int) for o in (begin, end))):
            raise SafetensorsError(f"{path}: tensor {name}: shape and data_offsets must be non-negative integers")
        if not 0 <= begin <= end <= data_size:
            raise SafetensorsError(f"{path}: tensor {name}: data_offsets [{begin}, {end}] lie outside the "
                                   f"{data_size}-byte data section (truncated file?)")
        expected = _DTYPES[dtype_name].itemsize * int(np.prod(shape, dtype=np.int64))
        if end - begin != expected:
            raise SafetensorsError(f"{path}: tensor {name}: data_offsets span {end - begin} bytes, but "
                                   f"{dtype_name} {shape} needs {expected}")
        entries.append((name, _DTYPES[dtype_name], shape, begin, end))
    ordered = sorted(entries, key=lambda e: (e[3], e[4]))
    for before, after in zip(ordered, ordered[1:]):
        if after[3] < before[4]:
            raise SafetensorsError(f"{path}: tensors {before[0]} [{before[3]}, {before[4]}] and {after[0]} "
                                   f"[{after[3]}, {after[4]}] overlap")
    return entries


def open_tensors(path: str) -> dict[str, np.ndarray]:
    """All tensors of one file as read-only memory-mapped arrays (nothing is read yet). Every
    header entry is checked first, so a damaged file is named rather than loaded wrongly."""
    data_start, header = read_header(path)
    header.pop("__metadata__", None)
    if not header:
        return {}
    entries = _checked_entries(path, header, os.path.getsize(path) - data_start)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    return {name: mapped[data_start + begin:data_start + end].view(dtype).reshape(shape)
            for name, dtype, shape, begin, end in entries}


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
