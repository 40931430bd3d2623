"""Which rows share a micro-batch of the update and how far it is padded: the padded and the length-bucketed layouts.

The padded layout computes every row at the batch's full width T (max prompt + max response
length) in consecutive micro-batches; a real row is often a fraction of T. The bucketed layout
sorts each mini-batch's rows by real length (longest first) and cuts them into micro-batches of m
rows, each trimmed to the shortest bucket length that holds its longest row. The buckets are a
ladder ending at T whose neighbours are at most `ratio` apart, so a micro-batch computes at most
`ratio` times its longest row's tokens, and the update compiles one shape per bucket it meets.
Rows never leave their mini-batch, so the optimiser steps and every loss denominator are the
padded layout's (the denominators depend only on the response masks, which trimming keeps).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

UPDATE_LAYOUTS = ("padded", "bucketed")
ALIGNED_FROM = 64  # bucket lengths from here up are multiples of ALIGNMENT (matmul-friendly shapes)
ALIGNMENT = 8


class MicroBatch(NamedTuple):
    """rows int [m]: indices into the batch's B rows; length: the padded length L it is computed at."""

    rows: np.ndarray
    length: int


def bucket_lengths(max_length: int, ratio: float) -> tuple[int, ...]:
    """Ascending bucket lengths ending at max_length, built downwards: each is ceil(next / ratio)
    (rounded up to a multiple of ALIGNMENT from ALIGNED_FROM on), so neighbours are at most `ratio`
    apart; the ladder stops where rounding no longer shortens it (a few tokens)."""
    if max_length < 1 or ratio <= 1:
        raise ValueError(f"bucket_lengths: need max_length >= 1 and ratio > 1, got {max_length}, {ratio}")
    lengths = [int(max_length)]
    while True:
        shorter = math.ceil(lengths[-1] / ratio)
        if shorter >= ALIGNED_FROM:
            shorter = -(-shorter // ALIGNMENT) * ALIGNMENT
        if shorter >= lengths[-1]:
            return tuple(reversed(lengths))
        lengths.append(shorter)


def row_lengths(attention_mask) -> np.ndarray:
    """attention_mask [B, T] (right-padded rows) -> int [B]: 1 + the last attended column, 0 for an empty row."""
    mask = np.asarray(attention_mask) > 0
    width = mask.shape[1]
    last = width - 1 - np.argmax(mask[:, ::-1], axis=1)
    return np.where(mask.any(axis=1), last + 1, 0).astype(np.int64)


def bucketed_micro_batches(lengths, *, num_minibatches: int, micro_rows: int,
                           buckets: tuple[int, ...]) -> list[list[MicroBatch]]:
    """lengths int [B] (row_lengths) -> per mini-batch (consecutive B / num_minibatches rows, as in
    the padded layout) its micro-batches of micro_rows rows: the mini-batch's rows sorted by length,
    longest first (stable, so ties keep batch order and the layout is deterministic), each
    micro-batch at the shortest bucket >= its longest row. The first micro-batch holds the longest
    rows, so a step that would run out of memory does so at once."""
    lengths = np.asarray(lengths, np.int64)
    mini_rows = lengths.shape[0] // num_minibatches
    if mini_rows * num_minibatches != lengths.shape[0] or mini_rows % micro_rows:
        raise ValueError(f"bucketed_micro_batches: {lengths.shape[0]} rows do not split into {num_minibatches} "
                         f"mini-batches of micro-batches of {micro_rows} rows")
    if lengths.size and lengths.max() > buckets[-1]:
        raise ValueError(f"bucketed_micro_batches: a row of {lengths.max()} tokens exceeds the longest bucket "
                         f"{buckets[-1]}")
    ladder = np.asarray(buckets, np.int64)
    plan = []
    for index in range(num_minibatches):
        rows = index * mini_rows + np.argsort(-lengths[index * mini_rows:(index + 1) * mini_rows], kind="stable")
        plan.append([MicroBatch(rows=chunk, length=int(ladder[np.searchsorted(ladder, lengths[chunk].max())]))
                     for chunk in np.split(rows, mini_rows // micro_rows)])
    return plan


def computed_tokens(plan: list[list[MicroBatch]]) -> int:
    """Token positions one pass of the bucketed update computes: sum over micro-batches of rows x L."""
    return int(sum(mb.rows.size * mb.length for mini in plan for mb in mini))
