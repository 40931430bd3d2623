"""The prompt pipeline: prompt rows → seeded per-epoch shuffle (endless epochs) → per-host shard →
drop over-long prompts → the selector's keep decisions → tokenised elements (a Grain MapDataset,
read at random for the kept prompts only), with a stream state that round-trips exactly.

The order and the keep decisions are NumPy over prompt ids, ahead of the element path: a
selector skips most of the stream late in training, and pulling each skip through Grain's
per-element iterator would cost far more than the decision (`experiments/bench/pipeline_skip.py`).

Multi-host: every host builds the same pipeline with its `shard_index` / `shard_count`. All
hosts share one permutation per epoch (same seed) and host i reads positions
i, i + k, i + 2k, … of the endless shuffled stream (k = shard_count), so within a global epoch
the hosts read disjoint prompts and together read every prompt once.
"""

from __future__ import annotations

import math
from typing import Protocol, Sequence, TypedDict

import grain
import numpy as np

from greso_jax.data.prompts import TEMPLATES, format_prompt
from greso_jax.data.rows import PromptRow
from greso_jax.data.sources import DataError

STATE_VERSION = 2  # 1: Grain's shuffle order (MapDataset.shuffle), not resumable here


class PromptElement(TypedDict):
    prompt_id: int
    prompt_tokens: np.ndarray  # int32 [L]
    ground_truth: str
    data_source: str
    difficulty: int


class KeepFilter(Protocol):
    """The selection hook: decides, before generation, which prompts are rolled out."""

    def should_keep(self, prompt_ids: np.ndarray, epochs: np.ndarray | None = None) -> np.ndarray:
        """prompt_ids int [N], epochs int [N] (the stream epoch of each occurrence) → keep bool [N].

        Pure within a step, and each occurrence's decision independent of the others asked with it: the
        pipeline reads ahead and leaves the prompts past the n-th kept one in the stream, unconsumed."""


class KeepAll:
    """Keeps every prompt (vanilla GRPO, dynamic sampling)."""

    def should_keep(self, prompt_ids: np.ndarray, epochs: np.ndarray | None = None) -> np.ndarray:
        return np.ones(len(prompt_ids), dtype=bool)


def _measure_fits(rows: Sequence[PromptRow], encode, max_prompt_length: int, path: str) -> np.ndarray:
    """int8 [N]: 1 where a row's prompt is at most `max_prompt_length` tokens, -1 where it is longer.
    Raises DataError naming the file and row of a prompt the tokenizer cannot encode (e.g. a
    character outside the char tokenizer's alphabet), and when no prompt fits."""
    lengths = np.zeros(len(rows), np.int64)
    for i, row in enumerate(rows):
        try:
            lengths[i] = len(encode(row))
        except ValueError as e:
            raise DataError(f"{row.where or f'{path} prompt {row.prompt_id}'}: {e}") from None
    if lengths.min() > max_prompt_length:
        raise DataError(f"{path or 'the training data'}: every prompt is longer than data.max_prompt_length="
                        f"{max_prompt_length} tokens (the shortest has {lengths.min()}); raise it or use shorter prompts")
    return np.where(lengths <= max_prompt_length, 1, -1).astype(np.int8)


class PromptPipeline:
    """Endless, seeded, resumable stream of tokenised prompts; `next_prompts(n)` returns n
    prompts the keep filter accepted."""

    def __init__(self, rows: Sequence[PromptRow], tokenizer, *, template: str, max_prompt_length: int, seed: int,
                 shuffle: bool = True, keep_filter: KeepFilter | None = None, shard_index: int = 0,
                 shard_count: int = 1):
        if not rows:
            raise ValueError("PromptPipeline: the prompt source is empty")
        if template not in TEMPLATES:
            raise ValueError(f"data.prompt_template: {template!r} is not one of {', '.join(TEMPLATES)}")
        if max_prompt_length < 1:
            raise ValueError(f"data.max_prompt_length: must be >= 1, got {max_prompt_length}")
        if not 0 <= shard_index < shard_count:
            raise ValueError(f"shard_index {shard_index} is outside [0, shard_count={shard_count})")
        if seed < 0:
            raise ValueError(f"PromptPipeline: the shuffle seed must be >= 0, got {seed}")
        ids = [row.prompt_id for row in rows]
        if sorted(ids) != list(range(len(rows))):
            raise ValueError("PromptPipeline: prompt ids must be 0 … N-1, each once (selector arrays index by them)")
        self.rows = list(rows)
        self._id_of_row = np.asarray(ids, dtype=np.int64)  # [N]
        self._row_of_id = np.argsort(self._id_of_row)  # [N]: the inverse permutation
        self.tokenizer, self.template, self.max_prompt_length = tokenizer, template, max_prompt_length
        self.seed, self.shuffle = seed, shuffle
        self.shard_index, self.shard_count = shard_index, shard_count
        self.keep_filter = keep_filter if keep_filter is not None else KeepAll()
        self.num_dropped_too_long = 0
        self.num_skipped = 0
        self._next_index = 0  # elements of this shard's stream read so far
        self.reset_read_ahead()
        # Global stream position consumed so far (all hosts together): what lets a checkpoint of
        # one shard layout resume under another. None once a plain sharded pull made it unknowable.
        self._global_position: int | None = 0
        # per row: 1 fits, -1 too long (measured up front: an unencodable or no fitting prompt fails here)
        self._fits = _measure_fits(self.rows, self._prompt_tokens, max_prompt_length, getattr(rows, "path", ""))
        self._orders: dict[int, np.ndarray] = {}
        # Only the prompts the keep filter accepts pass through the element path (random access):
        # a selector may skip most of the stream, and each skip should cost an array lookup.
        self._elements = grain.MapDataset.source(self.rows).map(self._tokenise)

    @property
    def num_prompts(self) -> int:
        """Prompts in the whole source (all shards): the size of the selector's id space."""
        return len(self.rows)

    @property
    def epoch(self) -> int:
        """The global epoch the next element of the stream belongs to (0-based), the same on every host:
        taken from the global position when it is known, else from this shard's next position."""
        if self._global_position is not None:
            return self._global_position // len(self.rows)
        return (self.shard_index + self._next_index * self.shard_count) // len(self.rows)

    def epoch_across_hosts(self, allgather) -> int:
        """The epoch every host opens a step with when each reads its shard at its own pace (stream
        rollouts): the lowest of the hosts' `epoch`, the one not every host has finished (a strategy's
        epoch-gated rules, GRESO's adapt_from_epoch, must not fire on one host only). `allgather(x [1])
        -> [P, 1]`; one host: `epoch`."""
        return int(np.asarray(allgather(np.array([self.epoch], np.int64))).min())

    @property
    def _shard_epoch(self) -> int:
        """Elements of one epoch on this shard (the last shard's may be one fewer)."""
        return -(-len(self.rows) // self.shard_count)

    def reset_read_ahead(self) -> None:
        """Forgets the recent pulls' keep rate, so the next pull reads ahead as if it were the first. The
        rate only sizes reads: keep decisions do not depend on it (nor is it saved with the state)."""
        # Decayed (prompts kept, prompts pulled) over the recent calls of each kind: a sharded pull's counts
        # are global and the same on every host, which must keep its read sizes equal; a local pull's are
        # this host's own.
        self._recent_pulls = {"local": (0.0, 0.0), "global": (0.0, 0.0)}

    def _read_ahead(self, kind: str, wanted: int, kept: int, pulled: int) -> int:
        """How many prompts to read for `wanted` more kept ones, given `kept` of `pulled` so far in this
        call: by the keep rate of this call and the recent ones together, for one more than wanted where
        the filter has skipped (a pull of one prompt then finds it in the first read ~86% of the time, and a
        filter that keeps everything reads exactly what is asked), so that a caller pulling a
        few prompts at a time (a stream step refilling its free lanes) reads a sparse filter's stream in
        about one read instead of doubling up from a rate of 1 at every call. A read costs a fixed
        ~0.1-0.2 ms, a prompt read ahead and left in the stream ~0.5 µs."""
        recent_kept, recent_pulled = self._recent_pulls[kind]
        keep_rate = (kept + recent_kept + 1) / (pulled + recent_pulled + 1)
        return math.ceil((wanted + (keep_rate < 1)) / keep_rate)

    def _remember_pull(self, kind: str, kept: int, pulled: int) -> None:
        recent_kept, recent_pulled = self._recent_pulls[kind]
        self._recent_pulls[kind] = (0.5 * recent_kept + kept, 0.5 * recent_pulled + pulled)

    def element(self, prompt_id: int) -> PromptElement:
        """The tokenised element of one prompt, outside the stream (its position and filter untouched)."""
        return self._elements[int(self._row_of_id[int(prompt_id)])]

    def _prompt_tokens(self, row: PromptRow) -> list[int]:
        return self.tokenizer.encode(format_prompt(row, self.template, self.tokenizer))

    def _tokenise(self, row: PromptRow) -> PromptElement:
        tokens = self._prompt_tokens(row)
        return PromptElement(prompt_id=row.prompt_id, prompt_tokens=np.asarray(tokens, dtype=np.int32),
                             ground_truth=row.ground_truth, data_source=row.data_source, difficulty=row.difficulty)

    def _order(self, epoch: int) -> np.ndarray:
        """Row indices in epoch `epoch`'s order, int64 [N]: one NumPy permutation per (seed, epoch)."""
        if not self.shuffle:
            return np.arange(len(self.rows))
        if epoch not in self._orders:
            if len(self._orders) >= 2:  # a read spans at most two epochs
                self._orders.pop(min(self._orders))
            self._orders[epoch] = np.random.default_rng([self.seed, epoch]).permutation(len(self.rows))
        return self._orders[epoch]

    def _rows_at(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """This shard's stream indices int64 [K] → (row indices [K], global stream positions [K])."""
        positions = self.shard_index + local * self.shard_count
        epochs = positions // len(self.rows)
        rows = np.empty_like(positions)
        for epoch in np.unique(epochs):
            at = epochs == epoch
            rows[at] = self._order(int(epoch))[positions[at] % len(self.rows)]
        return rows, positions

    def _fitting(self, rows: np.ndarray) -> np.ndarray:
        """Whether each row's prompt fits max_prompt_length, bool [K] (measured once, up front)."""
        return self._fits[rows] > 0

    def _peek_fitting(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This shard's next `n` prompts that fit max_prompt_length, read without consuming them
        → (row indices, global stream positions, this shard's stream indices), each int64 [n]."""
        rows_seen, positions_seen, local_seen = [], [], []
        found, next_local = 0, self._next_index
        unfit_run = 0  # elements read since the last one that fit
        while found < n:
            local = next_local + np.arange(max(n - found, 32))
            rows, positions = self._rows_at(local)
            fit_at = np.flatnonzero(self._fitting(rows))[:n - found]
            read = int(fit_at[-1]) + 1 if len(fit_at) == n - found else len(rows)
            unfit_run = read - 1 - int(fit_at[-1]) if len(fit_at) else unfit_run + read
            if unfit_run > self._shard_epoch:
                raise ValueError(f"data.max_prompt_length: a whole epoch of prompts is longer than "
                                 f"{self.max_prompt_length} tokens")
            rows_seen.append(rows[fit_at])
            positions_seen.append(positions[fit_at])
            local_seen.append(local[fit_at])
            found, next_local = found + len(fit_at), next_local + read
        return np.concatenate(rows_seen), np.concatenate(positions_seen), np.concatenate(local_seen)

    def _consume(self, num_fitting: int, through_local: int) -> None:
        """Advances this shard's stream past index `through_local`, of which `num_fitting` elements fit (the
        rest are counted as dropped)."""
        self.num_dropped_too_long += through_local + 1 - self._next_index - num_fitting
        self._next_index = through_local + 1

    def _keep(self, prompt_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The keep filter's decisions for prompts at global stream positions, checked: bool [K]."""
        keep = np.asarray(self.keep_filter.should_keep(prompt_ids, positions // len(self.rows)))
        if keep.shape != prompt_ids.shape or keep.dtype != np.bool_:
            raise ValueError(f"keep_filter.should_keep: expected bool [{len(prompt_ids)}], got {keep.dtype} "
                             f"{keep.shape}")
        return keep

    def next_prompts(self, n: int) -> tuple[list[PromptElement], np.ndarray]:
        """Pulls prompts until `n` are kept, or until one whole epoch of this shard was pulled
        without that (keep decisions are fixed within a training step, so pulling further would
        only meet the same rejections again): then fewer than `n` come back. Returns (kept
        elements, the prompt ids the keep filter skipped, int64 [num_skipped])."""
        if n < 0:
            raise ValueError(f"next_prompts: n must be >= 0, got {n}")
        kept_rows: list[np.ndarray] = []
        skipped: list[np.ndarray] = [np.zeros(0, np.int64)]
        max_pulls = n + self._shard_epoch
        num_kept = pulled = 0
        while num_kept < n and pulled < max_pulls:
            # Read ahead by the keep rate: keep decisions do not depend on the batch they are asked in,
            # and a selector that skips most prompts would otherwise cost one call per few kept.
            rows, positions, local = self._peek_fitting(min(max_pulls - pulled,
                                                            self._read_ahead("local", n - num_kept, num_kept, pulled)))
            ids = self._id_of_row[rows]
            keep = self._keep(ids, positions)
            used = len(rows)
            if np.count_nonzero(keep) >= n - num_kept:  # leave the read-ahead past the n-th kept in the stream
                used = int(np.flatnonzero(keep)[n - num_kept - 1]) + 1
            self._consume(used, int(local[used - 1]))
            pulled += used
            kept_rows.append(rows[:used][keep[:used]])
            skipped.append(ids[:used][~keep[:used]])
            num_kept += int(np.count_nonzero(keep[:used]))
        skipped_ids = np.concatenate(skipped)
        self.num_skipped += len(skipped_ids)
        self._remember_pull("local", num_kept, pulled)
        self._global_position = self._next_index if self.shard_count == 1 else None
        return [self._elements[int(row)] for part in kept_rows for row in part], skipped_ids

    def next_prompts_across_hosts(self, n: int, allgather) -> tuple[list[PromptElement], np.ndarray]:
        """Multi-host `next_prompts`: every host calls it in lockstep with the same `n`; each reads
        only its own shard, and together they return, on every host, exactly the prompts (and
        skips) a single-host pipeline would: the first `n` kept prompts of the global stream.
        `allgather(x [c]) -> [P, c]` stacks every host's equally shaped array."""
        kept: list[int] = []  # prompt ids, in global order
        skipped: list[int] = []
        start = self._next_index
        read_positions, read_fits = [np.zeros(0, np.int64)], [np.zeros(0, bool)]
        read = 0  # elements this host has read past `start`
        last_position = -1
        # The bound counts fitting prompts consumed in global order, as `next_prompts` counts its pulls (one
        # host: the same stream), never elements read: where a filter rejects a whole epoch, what a pull
        # consumes must not depend on how far the read-ahead happened to read.
        max_pulls = n + len(self.rows)
        while len(kept) < n and len(kept) + len(skipped) < max_pulls:
            pulled = len(kept) + len(skipped)
            to_read = min(max_pulls - pulled, self._read_ahead("global", n - len(kept), len(kept), pulled))
            chunk = -(-to_read // self.shard_count)
            rows, positions = self._rows_at(start + read + np.arange(chunk))
            read += chunk
            fits = self._fitting(rows)
            read_positions.append(positions)
            read_fits.append(fits)
            ids = np.where(fits, self._id_of_row[rows], -1)
            keep = np.zeros(chunk, bool)
            keep[fits] = self._keep(ids[fits], positions[fits])
            table = np.stack([positions, ids, keep.astype(np.int64)], axis=-1)
            every = np.asarray(allgather(table)).reshape(-1, 3)
            for position, prompt_id, keep_it in every[np.argsort(every[:, 0], kind="stable")]:
                if len(kept) == n or len(kept) + len(skipped) == max_pulls:
                    break
                last_position = int(position)
                if prompt_id < 0:
                    continue
                (kept if keep_it else skipped).append(int(prompt_id))
        # Rewind what this host read beyond the last consumed global position; count drops only up to there.
        consumed = np.concatenate(read_positions) <= last_position
        self._next_index = start + int(np.count_nonzero(consumed))
        self.num_dropped_too_long += int(np.count_nonzero(consumed & ~np.concatenate(read_fits)))
        if self._global_position is not None and last_position >= 0:
            self._global_position = last_position + 1
        self.num_skipped += len(skipped)
        self._remember_pull("global", len(kept), len(kept) + len(skipped))
        return [self.element(prompt_id) for prompt_id in kept], np.array(skipped, dtype=np.int64)

    def get_state(self) -> dict:
        """JSON-serialisable position of the stream (restore with `set_state`)."""
        return {"version": STATE_VERSION, "next_index": self._next_index, "seed": self.seed,
                "num_prompts": len(self.rows), "shard": [self.shard_index, self.shard_count],
                "shuffle": self.shuffle, "num_dropped_too_long": self.num_dropped_too_long,
                "num_skipped": self.num_skipped, "global_position": self._global_position}

    def set_state(self, state: dict) -> None:
        """Resumes from `get_state()` output of a pipeline over the same rows and settings. A
        state saved under another shard layout (another number of hosts) resumes from its global
        position, when it has one."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"pipeline state: version {state.get('version')!r}, this pipeline reads version "
                             f"{STATE_VERSION}; version 1 streamed Grain's shuffle order, so a run saved under it "
                             "cannot resume its prompt order here")
        expected = {"seed": self.seed, "num_prompts": len(self.rows), "shuffle": self.shuffle}
        for key, value in expected.items():
            if key not in state:
                raise ValueError(f"pipeline state: missing {key!r}")
            if state[key] != value:
                raise ValueError(f"pipeline state: {key} is {state[key]!r}, this pipeline has {value!r}")
        global_position = state.get("global_position")
        if list(state["shard"]) == [self.shard_index, self.shard_count]:
            self._next_index = int(state["next_index"])
        elif global_position is None:
            raise ValueError(f"pipeline state: saved by shard {state['shard']} without a global position; "
                             f"it cannot resume as shard {[self.shard_index, self.shard_count]}")
        else:  # this host's positions i, i+k, ... below the global position were consumed
            self._next_index = max(0, -(-(int(global_position) - self.shard_index) // self.shard_count))
        self._global_position = None if global_position is None else int(global_position)
        self.num_dropped_too_long = int(state["num_dropped_too_long"])
        self.num_skipped = int(state["num_skipped"])
        self.reset_read_ahead()
