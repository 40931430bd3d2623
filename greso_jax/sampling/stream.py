"""`LaneEngine`: K prompt lanes of G rows each that decode continuously under host control, for stream
rollouts (`greso_jax.selection.stream`).

Unlike `sampling.refill` (continuous batching inside one compiled call over a fixed prompt list),
the host decides what enters a lane: it admits a prompt into a free lane (`admit`; pending
admissions are prefilled together, `admit_batch` per program call), runs decode
chunks (`advance`, one compiled loop of at most `chunk_steps` tokens that returns early once a lane
finishes), collects the lanes whose G rows are done (`collect`) and admits the next prompt there
while the other lanes keep their state on the device. Every program has one shape for the whole
run (lanes x G rows, the prompt bucket, the token cap), so a run compiles three programs.

A lane's draws are keyed as `generate` keys a one-prompt call: fold_in(fold_in(key, step), g) for
member g at response step s, with the key given at admission, so a lane's samples are what
`generate([prompt], rng=key)` gives (up to float32 rounding of the different batch shape).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from greso_jax.sampling.kv_cache import LayerCache, decode_step, empty_response_cache, prefill
from greso_jax.sampling.sampler import SampleOutput
from greso_jax.sampling.token_sampling import SamplingMode, choose_tokens, is_eos, mode_of


class LaneState(NamedTuple):
    """The device state of K lanes (row k*G+g is member g of lane k).

    keys uint32 [K, 2] (each lane's admission key), step int32 [K] (the response token its rows
    produce next), prompt_lengths int32 [K], prompt_cache / response_cache: per layer a LayerCache
    ([K, ...] / [K, G, ...]); current, lengths, budgets int32 [K*G]; ended, done bool [K*G];
    tokens int32 [K*G, cap], logprobs float32 [K*G, cap].
    """

    keys: jax.Array
    step: jax.Array
    prompt_lengths: jax.Array
    prompt_cache: list
    response_cache: list
    current: jax.Array
    ended: jax.Array
    done: jax.Array
    lengths: jax.Array
    budgets: jax.Array
    tokens: jax.Array
    logprobs: jax.Array


def _draw_keys(lane_keys, steps, members):
    """lane_keys uint32 [R, 2], steps int32 [R], members int32 [R] -> one typed key per row, as
    `token_sampling.row_keys` derives them for a one-prompt call (row index = member)."""
    def one(k, s, g):
        return jax.random.fold_in(jax.random.fold_in(jax.random.wrap_key_data(k), s), g)
    return jax.vmap(one)(lane_keys, steps, members)


def _admit(params, state: LaneState, lanes, prompt_ids, prompt_lengths, keys, budgets, temperature, top_p, eos_ids,
           *, graphdef, rest, mode: SamplingMode, group: int, pad_id: int):
    """Prefills prompt_ids int32 [A, Tp] into lanes int32 [A] (an entry equal to the lane count is
    padding: its writes are dropped) and draws their G first tokens each. prompt_lengths,
    budgets int32 [A]; keys uint32 [A, 2]."""
    model = nnx.merge(graphdef, params, rest)
    count, cap = lanes.shape[0], state.tokens.shape[1]
    cache, first_logits = prefill(model, prompt_ids, prompt_lengths)
    prompt_cache = [LayerCache(old.k.at[lanes].set(new.k, mode="drop"), old.v.at[lanes].set(new.v, mode="drop"))
                    for old, new in zip(state.prompt_cache, cache)]
    members = jnp.tile(jnp.arange(group, dtype=jnp.int32), count)
    row_keys = jnp.repeat(keys, group, axis=0)
    first, first_lp = choose_tokens(jnp.repeat(first_logits, group, axis=0),
                                    _draw_keys(row_keys, jnp.zeros(count * group, jnp.int32), members), mode,
                                    temperature, top_p)
    ended = is_eos(first, eos_ids)
    rows = (lanes[:, None] * group + jnp.arange(group)).reshape(-1)  # padding entries: past the last row
    row_budgets = jnp.repeat(budgets, group)

    def put(x, value):
        return x.at[rows].set(value.astype(x.dtype), mode="drop")

    return state._replace(
        keys=state.keys.at[lanes].set(keys, mode="drop"), step=state.step.at[lanes].set(1, mode="drop"),
        prompt_lengths=state.prompt_lengths.at[lanes].set(prompt_lengths, mode="drop"), prompt_cache=prompt_cache,
        current=put(state.current, first), ended=put(state.ended, ended),
        done=put(state.done, ended | (row_budgets <= 1)), lengths=put(state.lengths, jnp.ones_like(first)),
        budgets=put(state.budgets, row_budgets),
        tokens=put(state.tokens, jnp.full((count * group, cap), pad_id, jnp.int32).at[:, 0].set(first)),
        logprobs=put(state.logprobs, jnp.zeros((count * group, cap), jnp.float32).at[:, 0].set(first_lp)))


def _advance(params, state: LaneState, temperature, top_p, eos_ids, *, graphdef, rest, mode: SamplingMode,
             group: int, pad_id: int, chunk_steps: int, refill_at: int):
    """Decodes every lane for at most chunk_steps tokens; stops early once refill_at of the lanes live
    at the start (all of them, if fewer) have finished, so the host can refill them, or no row is
    live. Returns (state, steps run)."""
    model = nnx.merge(graphdef, params, rest)
    lanes = state.step.shape[0]
    slots = state.response_cache[0].v.shape[3]
    members = jnp.tile(jnp.arange(group, dtype=jnp.int32), lanes)

    def lane_live(done):
        return ~done.reshape(lanes, group).all(axis=1)

    live_at_start = lane_live(state.done)
    enough = jnp.minimum(refill_at, live_at_start.sum())

    def keep_going(carry):
        i, st = carry
        live = lane_live(st.done)
        return (i < chunk_steps) & live.any() & ((live_at_start & ~live).sum() < enough)

    def one_token(carry):
        i, st = carry
        logits, response_cache = decode_step(model, st.current, st.prompt_cache, st.response_cache,
                                             st.prompt_lengths, jnp.minimum(st.step - 1, slots - 1))
        row_steps = jnp.repeat(st.step, group)
        chosen, chosen_lp = choose_tokens(logits, _draw_keys(jnp.repeat(st.keys, group, axis=0), row_steps, members),
                                          mode, temperature, top_p)
        live = ~st.done
        chosen = jnp.where(live, chosen, pad_id)
        rows = jnp.arange(chosen.shape[0])
        write_at = jnp.minimum(row_steps, st.tokens.shape[1] - 1)
        tokens = st.tokens.at[rows, write_at].set(jnp.where(live, chosen, st.tokens[rows, write_at]))
        logprobs = st.logprobs.at[rows, write_at].set(jnp.where(live, chosen_lp, st.logprobs[rows, write_at]))
        lengths = st.lengths + live.astype(jnp.int32)
        ended = st.ended | (live & is_eos(chosen, eos_ids))
        # A finished lane stays at its step, so its slot stays in range until the host refills it.
        step = st.step + lane_live(st.done).astype(jnp.int32)
        return i + 1, st._replace(step=step, response_cache=response_cache, current=chosen, ended=ended,
                                  done=ended | (lengths >= st.budgets), lengths=lengths, tokens=tokens,
                                  logprobs=logprobs)

    steps, state = jax.lax.while_loop(keep_going, one_token, (jnp.int32(0), state))
    return state, steps


class LaneEngine:
    """K lanes x G rows on one device (or one host's replicated program), decoded under host control.

    Host-side view: `free` bool [K] (no prompt, or collected), `finished()` the lanes whose G rows are
    done and not yet collected. `decoded_row_steps` counts lanes x G row-steps run (busy or not) and
    `busy_row_steps` those spent on live rows: their ratio is the lanes' busy share.
    """

    def __init__(self, model, *, lanes: int, num_samples: int, prompt_length: int, max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, eos_ids: Sequence[int] = (),
                 pad_id: int = 0, chunk_steps: int = 32, refill_at: int | None = None):
        if lanes < 1 or num_samples < 1 or prompt_length < 1 or max_new_tokens < 1 or chunk_steps < 1:
            raise ValueError(f"LaneEngine: lanes ({lanes}), num_samples ({num_samples}), prompt_length "
                             f"({prompt_length}), max_new_tokens ({max_new_tokens}) and chunk_steps ({chunk_steps}) "
                             "must be >= 1")
        self.model, self.lanes, self.group = model, int(lanes), int(num_samples)
        self.prompt_length, self.cap, self.pad_id = int(prompt_length), int(max_new_tokens), int(pad_id)
        self.temperature, self.top_p = np.float32(temperature), np.float32(top_p)
        self.eos = np.asarray(tuple(eos_ids), np.int32).reshape(-1)
        graphdef, _, rest = nnx.split(model, nnx.Param, ...)
        statics = dict(graphdef=graphdef, rest=rest, mode=mode_of(temperature, top_p, top_k), group=self.group,
                       pad_id=self.pad_id)
        self._admit = jax.jit(functools.partial(_admit, **statics), donate_argnums=1)
        # A chunk ends once this many lanes finished: fewer host round trips than one per group.
        self.refill_at = max(1, self.lanes // 8) if refill_at is None else int(refill_at)
        # Admissions wait until the next chunk and are prefilled this many at a time (one program).
        self.admit_batch = self.refill_at
        self._pending: list = []
        self._advance = jax.jit(functools.partial(_advance, chunk_steps=int(chunk_steps), refill_at=self.refill_at,
                                                  **statics), donate_argnums=1)
        self.state = self._empty_state()
        self.refresh()
        self.free = np.ones(self.lanes, bool)
        self._done = np.ones(self.lanes * self.group, bool)
        self._lengths = np.zeros(self.lanes * self.group, np.int32)  # host copy, for the busy share
        self._prompts: list = [None] * self.lanes
        # The lanes' outputs on the host, fetched once per chunk (None: stale): collecting a lane then
        # slices host arrays, where a device slice per lane and field cost ~1 ms of dispatch and copy each.
        self._outputs: tuple | None = None
        self.kv_cache_bytes = sum(x.nbytes for x in jax.tree.leaves((self.state.prompt_cache,
                                                                     self.state.response_cache)))
        self.decoded_row_steps = self.busy_row_steps = 0

    def refresh(self, params=None) -> None:
        """Reads the model's parameters again (after an update changed them in place), or takes
        `params` (the model's Param state, e.g. a host-local copy of cross-host parameters)."""
        self._params = nnx.split(self.model, nnx.Param, ...)[1] if params is None else params

    def _empty_state(self) -> LaneState:
        cfg, k, g = self.model.cfg, self.lanes, self.group
        dtype = jnp.dtype(cfg.dtype)
        prompt_cache = [LayerCache(jnp.zeros((k, cfg.num_kv_heads, cfg.head_dim, self.prompt_length), dtype),
                                   jnp.zeros((k, cfg.num_kv_heads, self.prompt_length, cfg.head_dim), dtype))
                        for _ in self.model.layers]
        rows = k * g
        # Distinct buffers for every field: the programs donate the state.
        return LaneState(jnp.zeros((k, 2), jnp.uint32), jnp.ones((k,), jnp.int32), jnp.ones((k,), jnp.int32),
                         prompt_cache, empty_response_cache(self.model, k, g, self.cap), jnp.zeros((rows,), jnp.int32),
                         jnp.zeros((rows,), bool), jnp.ones((rows,), bool), jnp.zeros((rows,), jnp.int32),
                         jnp.ones((rows,), jnp.int32), jnp.full((rows, self.cap), self.pad_id, jnp.int32),
                         jnp.zeros((rows, self.cap), jnp.float32))

    def admit(self, lane: int, prompt: Sequence[int], key, budget: int | None = None) -> None:
        """Puts `prompt` (token ids, at most prompt_length) into the free lane `lane` (prefilled with the
        other pending admissions at the next `advance`); its rows draw with `key` (a raw uint32 [2]
        key or a typed key) and stop after `budget` tokens (default: the cap)."""
        if not self.free[lane]:
            raise ValueError(f"LaneEngine.admit: lane {lane} is busy")
        if not 0 < len(prompt) <= self.prompt_length:
            raise ValueError(f"LaneEngine.admit: prompt of {len(prompt)} tokens, expected 1..{self.prompt_length}")
        if min(prompt) < 0 or max(prompt) >= self.model.cfg.vocab_size:
            raise ValueError(f"LaneEngine.admit: token id out of range [0, {self.model.cfg.vocab_size})")
        budget = self.cap if budget is None else int(budget)
        if not 1 <= budget <= self.cap:
            raise ValueError(f"LaneEngine.admit: budget {budget} outside [1, {self.cap}]")
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.key_data(key)
        self._pending.append((lane, list(map(int, prompt)), key, budget))
        self.free[lane] = False
        self._prompts[lane] = list(map(int, prompt))
        # Live until the next chunk says otherwise (no device round trip here).
        rows = slice(lane * self.group, (lane + 1) * self.group)
        self._done[rows] = False
        self._lengths[rows] = 1

    def _flush(self) -> None:
        """Runs the pending admissions, admit_batch lanes per program call (one compiled shape)."""
        a = self.admit_batch
        if self._pending:
            self._outputs = None
        while self._pending:
            batch, self._pending = self._pending[:a], self._pending[a:]
            lanes = np.full(a, self.lanes, np.int32)  # padding entries: dropped
            ids = np.full((a, self.prompt_length), self.pad_id, np.int32)
            lengths, budgets = np.ones(a, np.int32), np.ones(a, np.int32)
            keys = [batch[0][2]] * a
            for i, (lane, prompt, key, budget) in enumerate(batch):
                lanes[i], lengths[i], budgets[i], keys[i] = lane, len(prompt), budget, key
                ids[i, :len(prompt)] = prompt
            self.state = self._admit(self._params, self.state, lanes, ids, lengths, jnp.stack(keys), budgets,
                                     self.temperature, self.top_p, self.eos)

    def busy(self) -> bool:
        """Some admitted lane has rows still decoding."""
        return bool((~self.free & ~self.finished_mask()).any())

    def finished_mask(self) -> np.ndarray:
        """bool [K]: admitted lanes whose G rows are all done (to collect)."""
        return ~self.free & self._done.reshape(self.lanes, self.group).all(axis=1)

    def finished(self) -> list[int]:
        return np.flatnonzero(self.finished_mask()).tolist()

    def advance(self) -> int:
        """Runs one decode chunk over all lanes; returns the decode steps it ran (0: nothing was live)."""
        if not self.busy():
            return 0
        self._flush()
        self.state, steps = self._advance(self._params, self.state, self.temperature, self.top_p, self.eos)
        s = self.state
        steps, done, lengths, tokens, logprobs, ended = jax.device_get(
            (steps, s.done, s.lengths, s.tokens, s.logprobs, s.ended))
        steps = int(steps)
        self._outputs = (tokens, logprobs, lengths, ended)
        self._done, lengths = np.array(done), np.array(lengths)  # writable copies: admit marks rows live
        self.decoded_row_steps += steps * self.lanes * self.group
        # A row's length grows by one per step while it is live, so the growth is the busy row-steps.
        self.busy_row_steps += int(np.sum(lengths - self._lengths))
        self._lengths = lengths
        return steps

    def collect(self, lane: int) -> SampleOutput:
        """The finished lane's G responses as a one-prompt SampleOutput; frees the lane."""
        if not self.finished_mask()[lane]:
            raise ValueError(f"LaneEngine.collect: lane {lane} is not finished")
        return self._release(lane)

    def abort(self, lane: int) -> int:
        """Frees a busy lane without finishing it; returns the tokens its rows had generated (waste)."""
        if self.free[lane]:
            raise ValueError(f"LaneEngine.abort: lane {lane} is free")
        return int(np.sum(self._release(lane).lengths))

    def _release(self, lane: int) -> SampleOutput:
        self._flush()
        rows = slice(lane * self.group, (lane + 1) * self.group)
        if self._outputs is None:
            s = self.state
            self._outputs = tuple(jax.device_get((s.tokens, s.logprobs, s.lengths, s.ended)))
        tokens, logprobs, lengths, ended = (np.array(x[rows]) for x in self._outputs)
        self.free[lane] = True
        prompt, self._prompts[lane] = self._prompts[lane], None
        return SampleOutput(tokens=tokens, logprobs=logprobs, lengths=lengths, truncated=~ended,
                            kv_cache_bytes=self.kv_cache_bytes, prompt_rows=self.lanes, rows=self.lanes * self.group,
                            prompt_length=self.prompt_length, prompts=[prompt], num_samples=self.group)
