"""Making and damaging the files of a fault case, independently of the package: training files,
flipped, truncated or deleted checkpoint files, rewritten safetensors headers, a lock left by a
killed run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from typing import Callable


def write(path: str, data: bytes | str) -> str:
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


def write_jsonl(folder: str, name: str, lines: list[bytes | str]) -> str:
    """folder/name holding `lines`, one a line (bytes are written as they are: bad encodings)."""
    return write(os.path.join(folder, name), b"".join((x.encode() if isinstance(x, str) else x) + b"\n"
                                                      for x in lines))


def read_lines(path: str) -> list[str]:
    with open(path) as f:
        return f.read().splitlines()


def write_parquet(path: str, records: list[dict]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def all_files(folder: str, skip=("run.lock",)) -> list[str]:
    out = []
    for root, _, names in os.walk(folder):
        out += [os.path.join(root, n) for n in names if n not in skip]
    return sorted(out)


def step_dir(run: str, step: int) -> str:
    return os.path.join(run, "checkpoints", str(step))


def largest_file(folder: str) -> str:
    """The largest file of a checkpoint step other than its manifest: a tensor's data."""
    files = [f for f in all_files(folder) if not f.endswith("manifest.json")]
    return max(files, key=os.path.getsize)


def flip_bytes(path: str, count: int = 4) -> None:
    """Inverts `count` bytes spread over the last two thirds of the file (its header stays readable)."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    for k in range(count):
        data[len(data) // 3 + k * (len(data) - 1 - len(data) // 3) // max(count - 1, 1)] ^= 0xFF
    write(path, bytes(data))


def damage_file(path: str, how: str) -> None:
    """how: "flip" (bytes inverted), "truncate" (to half its size) or "delete"."""
    if how == "flip":
        flip_bytes(path)
    elif how == "truncate":
        os.truncate(path, os.path.getsize(path) // 2)
    else:
        os.remove(path)


def rewrite_safetensors_header(file: str, edit: Callable[[dict], None]) -> None:
    """Applies `edit` to the file's JSON header in place, the tensor data unchanged."""
    with open(file, "rb") as f:
        raw = f.read()
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + length])
    edit(header)
    blob = json.dumps(header).encode()
    write(file, len(blob).to_bytes(8, "little") + blob + raw[8 + length:])


def overlap_first_layers(header: dict) -> None:
    """Layer 0's q_proj claims layer 1's bytes: two tensors on the same data."""
    names = sorted(n for n in header if n != "__metadata__" and ".layers.0." in n and n.endswith("q_proj.weight"))
    header[names[0]]["data_offsets"] = header[names[0].replace(".layers.0.", ".layers.1.")]["data_offsets"]


def break_header_json(file: str) -> None:
    with open(file, "rb") as f:
        raw = bytearray(f.read())
    raw[8] = ord("[")  # the header's opening brace
    write(file, bytes(raw))


def stale_lock(workdir: str) -> None:
    """workdir/run.lock naming a process of this host that was killed (it released no lock)."""
    dead = subprocess.Popen(["sleep", "600"])
    with open(f"/proc/{dead.pid}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    write(os.path.join(workdir, "run.lock"), json.dumps({"host": socket.gethostname(), "pid": dead.pid,
                                                         "start_ticks": ticks, "started": "2026-11-30T00:00:00"}))
