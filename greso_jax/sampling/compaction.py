"""Live-row compaction of the decode loop: segments of ever fewer rows, the rows still decoding gathered into each."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from greso_jax.sampling.kv_cache import Constraint, LayerCache


def segment_rows(rows: int, min_rows: int, multiple: int = 1, shrink: float = 0.5) -> tuple[int, ...]:
    """Row counts of the decode segments after the first (which runs all `rows`): each `shrink` times
    the one before, rounded up to a multiple of `multiple` (the data-parallel size, so every segment
    splits evenly over the mesh), while that is >= min_rows and smaller. min_rows 0: () (no compaction).

    A segment runs at most 1 / shrink times the rows still live, so a larger shrink idles fewer rows
    and costs more segments (one more compiled loop and one more gather each)."""
    sizes: list[int] = []
    size = rows
    while min_rows > 0:
        smaller = -(-math.ceil(size * shrink - 1e-9) // multiple) * multiple  # rounded up to the multiple
        if smaller < min_rows or smaller >= size:
            break
        sizes.append(smaller)
        size = smaller
    return tuple(sizes)


class Rows(NamedTuple):
    """The rows one decode segment runs, R of them. `ids` int32 [R]: each row's index in the call
    (its RNG key and its place in the outputs); current (last token), ended, done, lengths [R];
    cache: the response cache, per layer a tuple of its chunks, each a LayerCache (k [R, 1, Hkv, hd, L],
    v [R, 1, Hkv, L, hd]: a group of one, so `decode_step` sees each row as its own prompt)."""

    ids: jax.Array
    current: jax.Array
    ended: jax.Array
    done: jax.Array
    lengths: jax.Array
    cache: list


def compact(rows: Rows, size: int, constrain: Constraint) -> Rows:
    """The `size` rows of the next segment: every row not done (the caller ensures at most `size`
    remain, or no step is left), then done rows as filler. The stable sort keeps the ids distinct,
    so scattering the segment's outputs by id never writes one place twice."""
    order = jnp.argsort(rows.done, stable=True)[:size]

    def take(x):
        return constrain(jnp.take(x, order, axis=0))

    return Rows(*(jax.tree.map(take, field) for field in rows))


def ungroup(cache) -> list:
    """A grouped response cache (per layer, a tuple of chunks, each k [N, G, Hkv, hd, L], v [N, G, Hkv,
    L, hd]) as N*G groups of one."""
    def flat(x):
        return x.reshape((x.shape[0] * x.shape[1], 1) + x.shape[2:])

    return jax.tree.map(flat, cache)


def row_prompts(prompt_cache, prompt_lengths, prompt_index, constrain: Constraint):
    """Each row's own copy of its prompt's cache and length: prompt_index int32 [R] -> (one LayerCache
    per layer, k [R, Hkv, hd, Tp], v [R, Hkv, Tp, hd]; lengths int32 [R]). Gathered once per segment,
    not per step: a compacted segment's rows no longer line up in groups of G, and a copy read each
    step costs less than a gather each step."""
    cache = [LayerCache(constrain(jnp.take(layer.k, prompt_index, axis=0)),
                        constrain(jnp.take(layer.v, prompt_index, axis=0))) for layer in prompt_cache]
    return cache, jnp.take(prompt_lengths, prompt_index)
