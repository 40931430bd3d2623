"""The static shapes of a sampling call (bucketed prompt rows and prompt length, the token cap: what a
compiled program's shapes depend on), per-prompt token budgets and the KV cache bytes they imply."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax.numpy as jnp
import numpy as np

# Prompt lengths: powers of two (padding wastes less than half a bucket; a run compiles a few programs).
DEFAULT_PROMPT_BUCKETS: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
# Rows: steps of 1.5x and 4/3x (2^k and 3 * 2^(k-1)). Decode time follows bucket rows, so a call's
# time follows its responses only within a bucket: above 16 rows padding wastes less than a third of
# a bucket instead of half (24 prompts x 8 run as 192 rows, not 256), for about twice the programs.
DEFAULT_ROW_BUCKETS: tuple[int, ...] = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
                                        3072, 4096)

# A response-cache chunk costs one more compiled loop; below this many slots the reads it saves do not
# pay for it (short answers compile as one loop).
MIN_CHUNK_SLOTS = 16


@dataclasses.dataclass(frozen=True)
class Plan:
    """Bucketed static shapes of one call (what a compiled program depends on)."""

    prompt_rows: int  # prompts after padding (Np)
    prompt_length: int  # Tp
    group: int
    max_new_tokens: int  # the cap: length dimension of the outputs; per-row budgets are traced
    # Row counts of the decode segments after the first (compaction); under refill, lane counts of the drain's.
    compact_rows: tuple[int, ...] = ()
    lanes: int = 0  # > 0: continuous batching, this many prompts' groups in flight (see sampling.refill)
    chunks: int = 1  # the response cache in this many chunks, in every compaction segment (see `response_chunks`)

    @property
    def rows(self) -> int:
        return self.prompt_rows * self.group

    @property
    def rows_in_flight(self) -> int:
        """Rows each decode step runs: every row of the call, or under refill the lanes' rows."""
        return self.lanes * self.group if self.lanes else self.rows

    @property
    def response_slots(self) -> int:
        return max(self.max_new_tokens - 1, 1)  # the last sampled token is never fed back

    @property
    def response_chunks(self) -> tuple[int, ...]:
        """Slots of each response-cache chunk, in order: near-equal, summing to response_slots, at most
        `chunks` of them and none under MIN_CHUNK_SLOTS."""
        count = max(1, min(self.chunks, self.response_slots // MIN_CHUNK_SLOTS))
        base, extra = divmod(self.response_slots, count)
        return tuple(base + (i < extra) for i in range(count))


def bucket_at_least(value: int, buckets: Sequence[int], what: str) -> int:
    """The smallest bucket >= value; beyond the largest, the next multiple of the largest."""
    for b in buckets:
        if b >= value:
            return b
    largest = buckets[-1]
    if what == "prompt length":
        raise ValueError(f"prompt length {value} exceeds the largest prompt-length bucket {largest}; "
                         "add a bucket (sampling.prompt_length_buckets)")
    return -(-value // largest) * largest


def check_buckets(buckets, name: str) -> tuple[int, ...]:
    buckets = tuple(buckets)
    if not buckets or any(not isinstance(b, (int, np.integer)) or b <= 0 for b in buckets):
        raise ValueError(f"{name}: must be a non-empty sequence of positive integers, got {buckets!r}")
    if list(buckets) != sorted(set(buckets)):
        raise ValueError(f"{name}: must be strictly increasing, got {buckets!r}")
    return tuple(int(b) for b in buckets)


def token_budgets(max_new_tokens, num_prompts: int, cap: int | None) -> tuple[np.ndarray, int]:
    """`max_new_tokens` (an int, or one budget per prompt) and an optional cap -> (budgets int32 [N], cap).
    The cap defaults to the largest budget; pass it explicitly so that calls with different budgets
    share one compiled program."""
    budgets = np.asarray(max_new_tokens)
    if budgets.ndim == 0:
        budgets = np.full(num_prompts, budgets)
    if budgets.shape != (num_prompts,) or not np.issubdtype(budgets.dtype, np.integer):
        raise ValueError(f"max_new_tokens: expected an int or {num_prompts} integer budgets (one per prompt), "
                         f"got shape {budgets.shape} dtype {budgets.dtype}")
    if budgets.min() < 1:
        raise ValueError(f"max_new_tokens: budgets must be >= 1, got {int(budgets.min())} "
                         f"(prompt {int(budgets.argmin())})")
    cap = int(budgets.max()) if cap is None else cap
    if not isinstance(cap, (int, np.integer)) or cap < 1:
        raise ValueError(f"max_new_tokens_cap: must be a positive int, got {cap!r}")
    if budgets.max() > cap:
        raise ValueError(f"max_new_tokens: budget {int(budgets.max())} (prompt {int(budgets.argmax())}) exceeds "
                         f"max_new_tokens_cap {cap}")
    return budgets.astype(np.int32), int(cap)


def kv_cache_bytes(cfg, plan: Plan) -> int:
    """Bytes of the prompt cache [Np, Tp] plus the response cache [Np*G, slots], K and V, all layers;
    with compaction, plus the first compacted segment's response cache and prompt copies [R/2, slots + Tp],
    which the gather holds beside the full caches (later segments are smaller); under refill, the
    lanes' caches only ([K, Tp] and [K*G, slots]), whatever the number of prompts."""
    per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * jnp.dtype(cfg.dtype).itemsize
    if plan.lanes:  # the first drain segment's lanes are gathered beside the full ones
        lanes = plan.lanes + (plan.compact_rows[0] if plan.compact_rows else 0)
        return per_token * lanes * (plan.prompt_length + plan.group * plan.response_slots)
    compacted = plan.compact_rows[0] * (plan.response_slots + plan.prompt_length) if plan.compact_rows else 0
    return per_token * (plan.prompt_rows * plan.prompt_length + plan.rows * plan.response_slots + compacted)
