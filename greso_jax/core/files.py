"""File helpers shared across layers: content hashes of files on disk."""

from __future__ import annotations

import hashlib


def sha256_of(path: str) -> str:
    """Hex SHA-256 of the file at `path`, read in 4 MiB blocks (checkpoint arrays can be GBs)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
