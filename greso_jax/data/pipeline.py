"""The prompt pipeline: a Grain MapDataset over prompt rows → seeded per-epoch shuffle
(endless epochs) → per-host shard → tokenise → drop over-long prompts → the selector's
keep decisions, with an iterator state that round-trips exactly.

Multi-host: every host builds the same pipeline with its `shard_index` / `shard_count`. All
hosts share one permutation per epoch (same seed) and host i reads positions
i, i + k, i + 2k, … of the endless shuffled stream (k = shard_count), so within a global epoch
the hosts read disjoint prompts and together read every prompt once.
"""

from __future__ import annotations

from typing import Protocol, Sequence, TypedDict

import grain
import numpy as np

from greso_jax.data.prompts import TEMPLATES, format_prompt
from greso_jax.data.rows import PromptRow

STATE_VERSION = 1


class PromptElement(TypedDict):
    prompt_id: int
    prompt_tokens: np.ndarray  # int32 [L]
    ground_truth: str
    data_source: str
    difficulty: int


class KeepFilter(Protocol):
    """The selection hook: decides, before generation, which prompts are rolled out."""

    def should_keep(self, prompt_ids: np.ndarray, epochs: np.ndarray | None = None) -> np.ndarray:
        """prompt_ids int [N], epochs int [N] (the stream epoch of each occurrence) → keep bool [N]."""


class KeepAll:
    """Keeps every prompt (vanilla GRPO, dynamic sampling)."""

    def should_keep(self, prompt_ids: np.ndarray, epochs: np.ndarray | None = None) -> np.ndarray:
        return np.ones(len(prompt_ids), dtype=bool)


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
        ids = [row.prompt_id for row in rows]
        if sorted(ids) != list(range(len(rows))):
            raise ValueError("PromptPipeline: prompt ids must be 0 … N-1, each once (selector arrays index by them)")
        self.rows = list(rows)
        self.tokenizer, self.template, self.max_prompt_length = tokenizer, template, max_prompt_length
        self.seed, self.shuffle = seed, shuffle
        self.shard_index, self.shard_count = shard_index, shard_count
        self.keep_filter = keep_filter if keep_filter is not None else KeepAll()
        self.num_dropped_too_long = 0
        self._row_index: dict[int, int] | None = None
        self.num_skipped = 0
        # Global stream position consumed so far (all hosts together): what lets a checkpoint of
        # one shard layout resume under another. None once a plain sharded pull made it unknowable.
        self._global_position: int | None = 0
        dataset = grain.MapDataset.source(self.rows)
        if shuffle:
            dataset = dataset.shuffle(seed=seed)
        dataset = dataset.repeat(None)  # reseeds every epoch: each epoch has its own order
        if shard_count > 1:
            dataset = dataset[shard_index::shard_count]
        self._dataset = dataset.map(self._tokenise)
        # Sequential reads: tokenising is cheap, and prefetch threads would run ahead of the keep filter.
        self._iterator = iter(self._dataset.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))

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
        return self._next_position() // len(self.rows)

    def _next_position(self) -> int:
        """Global stream position of this shard's next element."""
        return self.shard_index + self._iterator.get_state()["next_index"] * self.shard_count

    def element(self, prompt_id: int) -> PromptElement:
        """The tokenised element of one prompt, outside the stream (its position and filter untouched)."""
        if self._row_index is None:
            self._row_index = {row.prompt_id: i for i, row in enumerate(self.rows)}
        return self._tokenise(self.rows[self._row_index[int(prompt_id)]])

    def _tokenise(self, row: PromptRow) -> PromptElement:
        tokens = self.tokenizer.encode(format_prompt(row, self.template, self.tokenizer))
        return PromptElement(prompt_id=row.prompt_id, prompt_tokens=np.asarray(tokens, dtype=np.int32),
                             ground_truth=row.ground_truth, data_source=row.data_source, difficulty=row.difficulty)

    def _next_fitting(self) -> tuple[PromptElement, int]:
        """The next element no longer than max_prompt_length (longer ones are counted, dropped), with
        the stream epoch it belongs to."""
        per_shard = -(-len(self.rows) // self.shard_count)
        for _ in range(per_shard + 1):
            epoch = self._next_position() // len(self.rows)
            element = next(self._iterator)
            if len(element["prompt_tokens"]) <= self.max_prompt_length:
                return element, epoch
            self.num_dropped_too_long += 1
        raise ValueError(f"data.max_prompt_length: a whole epoch of prompts is longer than {self.max_prompt_length} "
                         "tokens")

    def next_prompts(self, n: int) -> tuple[list[PromptElement], np.ndarray]:
        """Pulls prompts until `n` are kept, or until one whole epoch of this shard was pulled
        without that (keep decisions are fixed within a training step, so pulling further would
        only meet the same rejections again): then fewer than `n` come back. Returns (kept
        elements, the prompt ids the keep filter skipped, int64 [num_skipped])."""
        if n < 0:
            raise ValueError(f"next_prompts: n must be >= 0, got {n}")
        kept: list[PromptElement] = []
        skipped: list[int] = []
        max_pulls = n + -(-len(self.rows) // self.shard_count)
        pulled = 0
        while len(kept) < n and pulled < max_pulls:
            candidates, epochs = zip(*[self._next_fitting() for _ in range(n - len(kept))])
            pulled += len(candidates)
            ids = np.array([c["prompt_id"] for c in candidates], dtype=np.int64)
            keep = np.asarray(self.keep_filter.should_keep(ids, np.array(epochs, dtype=np.int64)))
            if keep.shape != ids.shape or keep.dtype != np.bool_:
                raise ValueError(f"keep_filter.should_keep: expected bool [{len(ids)}], got {keep.dtype} {keep.shape}")
            kept += [c for c, k in zip(candidates, keep) if k]
            skipped += ids[~keep].tolist()
        self.num_skipped += len(skipped)
        self._global_position = self._iterator.get_state()["next_index"] if self.shard_count == 1 else None
        return kept, np.array(skipped, dtype=np.int64)

    def next_prompts_across_hosts(self, n: int, allgather) -> tuple[list[PromptElement], np.ndarray]:
        """Multi-host `next_prompts`: every host calls it in lockstep with the same `n`; each reads
        only its own shard, and together they return, on every host, exactly the prompts (and
        skips) a single-host pipeline would: the first `n` kept prompts of the global stream.
        `allgather(x [c]) -> [P, c]` stacks every host's equally shaped array."""
        kept: list[tuple[int, int]] = []  # (global position, prompt id), in global order
        skipped: list[int] = []
        start = self._iterator.get_state()["next_index"]
        read = 0  # elements this host has read past `start`
        last_position = -1
        max_pulls = n + len(self.rows)
        while len(kept) < n and read * self.shard_count < max_pulls:
            chunk = -(-(n - len(kept)) // self.shard_count)
            positions = np.full(chunk, -1, np.int64)
            ids = np.full(chunk, -1, np.int64)
            for j in range(chunk):
                element = next(self._iterator)
                positions[j] = self.shard_index + (start + read) * self.shard_count
                read += 1
                if len(element["prompt_tokens"]) <= self.max_prompt_length:
                    ids[j] = element["prompt_id"]
                else:
                    self.num_dropped_too_long += 1
            keep = np.zeros(chunk, bool)
            fitting = ids >= 0
            keep[fitting] = np.asarray(self.keep_filter.should_keep(ids[fitting], positions[fitting] // len(self.rows)))
            table = np.stack([positions, ids, keep.astype(np.int64)], axis=-1)
            every = np.asarray(allgather(table)).reshape(-1, 3)
            for position, prompt_id, keep_it in every[np.argsort(every[:, 0], kind="stable")]:
                if len(kept) == n:
                    break
                last_position = int(position)
                if prompt_id < 0:
                    continue
                if keep_it:
                    kept.append((last_position, int(prompt_id)))
                else:
                    skipped.append(int(prompt_id))
        # Rewind what this host read beyond the last consumed global position.
        consumed = sum(1 for k in range(read) if self.shard_index + (start + k) * self.shard_count <= last_position)
        self._iterator.set_state({"next_index": start + consumed})
        if self._global_position is not None and last_position >= 0:
            self._global_position = last_position + 1
        self.num_skipped += len(skipped)
        elements = [self._tokenise(self.rows[prompt_id]) for _, prompt_id in kept]
        return elements, np.array(skipped, dtype=np.int64)

    def get_state(self) -> dict:
        """JSON-serialisable position of the stream (restore with `set_state`)."""
        return {"version": STATE_VERSION, "iterator": dict(self._iterator.get_state()), "seed": self.seed,
                "num_prompts": len(self.rows), "shard": [self.shard_index, self.shard_count],
                "shuffle": self.shuffle, "num_dropped_too_long": self.num_dropped_too_long,
                "num_skipped": self.num_skipped, "global_position": self._global_position}

    def set_state(self, state: dict) -> None:
        """Resumes from `get_state()` output of a pipeline over the same rows and settings. A
        state saved under another shard layout (another number of hosts) resumes from its global
        position, when it has one."""
        expected = {"version": STATE_VERSION, "seed": self.seed, "num_prompts": len(self.rows),
                    "shuffle": self.shuffle}
        for key, value in expected.items():
            if key not in state:
                raise ValueError(f"pipeline state: missing {key!r}")
            if state[key] != value:
                raise ValueError(f"pipeline state: {key} is {state[key]!r}, this pipeline has {value!r}")
        global_position = state.get("global_position")
        if list(state["shard"]) == [self.shard_index, self.shard_count]:
            self._iterator.set_state(dict(state["iterator"]))
        elif global_position is None:
            raise ValueError(f"pipeline state: saved by shard {state['shard']} without a global position; "
                             f"it cannot resume as shard {[self.shard_index, self.shard_count]}")
        else:  # this host's positions i, i+k, ... below the global position were consumed
            consumed = max(0, -(-(int(global_position) - self.shard_index) // self.shard_count))
            self._iterator.set_state({"next_index": consumed})
        self._global_position = None if global_position is None else int(global_position)
        self.num_dropped_too_long = int(state["num_dropped_too_long"])
        self.num_skipped = int(state["num_skipped"])
