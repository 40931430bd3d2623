"""`generate`: G sampled responses per prompt in one compiled program (prefix-shared prefill, then
a `lax.while_loop` decode that stops when every row is done), with bucketed shapes so a training
run compiles a small, fixed number of programs.

Row layout: rows i*G ... i*G+G-1 belong to prompt i. Prompts are left-aligned (right-padded) in
the prompt cache, so a token's RoPE position is its index within its real prompt; response token s
of every row sits at position prompt_length + s. Log-probabilities are defined in
`greso_jax.sampling.token_sampling` (tempered policy, before top-k / top-p truncation).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from greso_jax.models.weights import param_shardings
from greso_jax.parallel.sharding import batch_sharding
from greso_jax.sampling.compaction import Rows, compact, row_prompts, segment_rows, ungroup
from greso_jax.sampling.kv_cache import decode_step, empty_response_cache, prefill
from greso_jax.sampling.refill import refill_program
from greso_jax.sampling.shapes import (DEFAULT_PROMPT_BUCKETS, DEFAULT_ROW_BUCKETS, Plan, bucket_at_least,
                                      check_buckets, kv_cache_bytes, token_budgets)
from greso_jax.sampling.token_sampling import SamplingMode, choose_tokens, is_eos, mode_of, row_keys
from greso_jax.parallel import multihost

_COMPILED: dict = {}  # program key -> jax.stages.Compiled


def compile_count() -> int:
    """Number of distinct sampling programs compiled in this process so far."""
    return len(_COMPILED)


@dataclasses.dataclass(frozen=True)
class SampleOutput:
    """Host (numpy) results of `generate` (or `generate_in_chunks`), N*G rows (padding rows of the
    bucket dropped).

    tokens     int32 [N*G, cap], pad_id after the end (cap: the program's length dimension, see `generate`)
    logprobs   float32 [N*G, cap], log softmax(logits / T)[token] (T = 0: log softmax(logits)),
               untruncated by top-k / top-p; 0 after the end
    lengths    int32 [N*G], response length counting the EOS token when one was produced (<= the row's budget)
    truncated  bool [N*G], True when no EOS came within the row's token budget
    kv_cache_bytes   bytes of the KV cache the program allocated (prompt + response caches, bucket size;
               with compaction, the peak while the first compaction gathers; under refill, the lanes')
    prompt_rows, rows, prompt_length   the bucketed shapes the program ran at; rows: those each decode
               step runs (under refill, lanes x G) (`generate_in_chunks`: the largest over its calls)
    prompts    the N prompts (token-id lists) in order: row r answers prompts[r // num_samples]
    num_samples  G, responses per prompt
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    lengths: np.ndarray
    truncated: np.ndarray
    kv_cache_bytes: int
    prompt_rows: int
    rows: int
    prompt_length: int
    prompts: Sequence[Sequence[int]] = ()
    num_samples: int = 1


def _validate(model, prompts, num_samples, temperature, top_p, top_k, eos_ids, pad_id):
    vocab = model.cfg.vocab_size
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts: expected a non-empty list of token-id lists")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompts[{i}]: empty prompt")
        arr = np.asarray(p)
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"prompts[{i}]: expected a flat list of integer token ids")
        if arr.min() < 0 or arr.max() >= vocab:
            raise ValueError(f"prompts[{i}]: token id out of range [0, {vocab}) (min {arr.min()}, max {arr.max()})")
    if num_samples < 1:
        raise ValueError(f"num_samples: must be >= 1, got {num_samples}")
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature: must be finite and >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p: must be in (0, 1], got {top_p}")
    if top_k < 0:
        raise ValueError(f"top_k: must be >= 0 (0 = off), got {top_k}")
    for name, ids in (("eos_ids", tuple(eos_ids)), ("pad_id", (pad_id,))):
        if any(not 0 <= t < vocab for t in ids):
            raise ValueError(f"{name}: token id out of range [0, {vocab}): {ids}")


def _placement(model, params, mesh):
    """(param shardings state, batch sharding fn ndim -> sharding, replicated sharding, mesh or None).
    `params` is the model's Param state, split once per call by the caller (splitting costs ms)."""
    first = jax.tree.leaves(params)[0]
    if mesh is None and isinstance(first.sharding, NamedSharding) and first.sharding.mesh.size > 1:
        mesh = first.sharding.mesh
    if mesh is not None:
        return param_shardings(model, mesh), functools.partial(batch_sharding, mesh), \
            NamedSharding(mesh, PartitionSpec()), mesh
    single = SingleDeviceSharding(next(iter(first.devices())))
    return jax.tree.map(lambda _: single, params), lambda ndim: single, single, None


def _constraint(mesh):
    """Inside a program: pins an array's leading (row) dimension to the mesh's data axes."""
    if mesh is None:
        return lambda x: x
    return lambda x: jax.lax.with_sharding_constraint(x, batch_sharding(mesh, x.ndim))


def _refill(params, prompt_ids, prompt_lengths, budgets, num_prompts, key, temperature, top_p, eos_ids, *,
            graphdef, rest, plan: Plan, mode: SamplingMode, pad_id: int, mesh):
    """The sampling call under continuous batching (`greso_jax.sampling.refill`)."""
    return refill_program(nnx.merge(graphdef, params, rest), prompt_ids, prompt_lengths, budgets, num_prompts, key,
                          temperature, top_p, eos_ids, plan=plan, mode=mode, pad_id=pad_id,
                          constrain=_constraint(mesh))


def _program(params, prompt_ids, prompt_lengths, budgets, key, temperature, top_p, eos_ids, *, graphdef, rest,
             plan: Plan, mode: SamplingMode, pad_id: int, mesh):
    """The whole sampling call: prefill on [Np, Tp], then decode all Np*G rows until each has met
    EOS or its prompt's budget (budgets int32 [Np], traced: a new budget does not recompile).
    Each segment runs one loop per response-cache chunk (`plan.response_chunks`). With
    `plan.compact_rows`, decode leaves its first segment once few enough rows are live and
    continues in segments of those row counts (see `greso_jax.sampling.compaction`)."""
    model = nnx.merge(graphdef, params, rest)
    constrain = _constraint(mesh)
    group, steps = plan.group, plan.max_new_tokens
    rows = plan.rows
    row_ids = jnp.arange(rows, dtype=jnp.int32)
    row_budgets = jnp.repeat(budgets, group)

    with jax.named_scope("prefill"):
        prompt_cache, first_logits = prefill(model, prompt_ids, prompt_lengths, constrain)
    first, first_lp = choose_tokens(constrain(jnp.repeat(first_logits, group, axis=0)),
                                    row_keys(key, 0, row_ids), mode, temperature, top_p)
    tokens = jnp.full((rows, steps), pad_id, jnp.int32).at[:, 0].set(first)
    logprobs = jnp.zeros((rows, steps), jnp.float32).at[:, 0].set(first_lp)
    # `ended`: the row produced EOS; `done`: it produced EOS or spent its budget (then it only emits padding).
    ended = is_eos(first, eos_ids)
    state = (jnp.int32(1), first, ended, ended | (row_budgets <= 1), jnp.ones((rows,), jnp.int32), tokens, logprobs)

    def decode(state, ids, budgets, prompts, lengths_of_prompts, leave_at, earlier, offset):
        """Runs one while loop over the rows `ids` (None: all rows, in order, grouped by prompt)
        until every row is done, no step is left, at most `leave_at` rows are live, or its response
        chunk is full. The last element of `state` is that chunk, holding slots offset, offset + 1,
        ... after the full chunks `earlier` (see `decode_step`)."""
        last_step = min(steps - 1, offset + state[-1][0].v.shape[3])

        def keep_going(state):
            step, _, _, done = state[:4]
            go = (step <= last_step) & ~jnp.all(done)
            return go if leave_at is None else go & (jnp.sum(~done) > leave_at)

        def one_token(state):
            step, current, ended, done, lengths, tokens, logprobs, cache = state
            logits, cache = decode_step(model, current, prompts, cache, lengths_of_prompts, step - 1 - offset,
                                        constrain, earlier, offset)
            with jax.named_scope("token_draw"):
                chosen, chosen_lp = choose_tokens(logits, row_keys(key, step, row_ids if ids is None else ids), mode,
                                                  temperature, top_p)
            chosen = jnp.where(done, pad_id, chosen)
            chosen_lp = jnp.where(done, 0.0, chosen_lp)
            if ids is None:
                tokens = jax.lax.dynamic_update_slice(tokens, chosen[:, None], (0, step))
                logprobs = jax.lax.dynamic_update_slice(logprobs, chosen_lp[:, None], (0, step))
            else:
                tokens = tokens.at[ids, step].set(chosen, unique_indices=True)
                logprobs = logprobs.at[ids, step].set(chosen_lp, unique_indices=True)
            lengths = lengths + (~done).astype(jnp.int32)
            ended = ended | (~done & is_eos(chosen, eos_ids))
            return step + 1, chosen, ended, ended | (lengths >= budgets), lengths, tokens, logprobs, cache

        return jax.lax.while_loop(keep_going, one_token, state)

    def decode_segment(state, cache, ids, budgets, prompts, lengths_of_prompts, leave_at):
        """One segment: the loops of chunks 0, 1, ... in turn (cache: per layer, a tuple of every
        response chunk), each attending to the chunks before it in full. A chunk's loop runs no step
        when the segment starts past it, or when an earlier loop stopped at `leave_at` (slots are
        written in order, so no loop ever writes before its chunk). Returns (state, cache)."""
        offset = 0
        for c, slots in enumerate(plan.response_chunks):
            *state, chunk = decode((*state, [layer[c] for layer in cache]), ids, budgets, prompts,
                                   lengths_of_prompts, leave_at, [layer[:c] for layer in cache], offset)
            cache = [layer[:c] + (new,) + layer[c + 1:] for layer, new in zip(cache, chunk)]
            offset += slots
        return tuple(state), cache

    # The response cache in chunks: a step reads only the chunks written so far.
    cache = list(zip(*(empty_response_cache(model, plan.prompt_rows, group, slots, constrain)
                       for slots in plan.response_chunks)))  # per layer, a tuple of its chunks
    sizes = plan.compact_rows
    (step, current, ended, done, lengths, tokens, logprobs), cache = decode_segment(
        state, cache, None, row_budgets, prompt_cache, prompt_lengths, sizes[0] if sizes else None)
    if not sizes:
        return tokens, logprobs, lengths, ~ended

    def segments_from(i, step, live: Rows, tokens, logprobs, all_lengths, all_ended):
        """Segments i, i+1, ... after the rows `live` (every row's final length and EOS flag so far
        in all_*: rows leave a segment only when done). Skipped when no row or step is left, so a
        call without a long tail gathers nothing."""
        def rest():
            rows = compact(live, sizes[i], constrain)
            prompts, lengths_of_prompts = row_prompts(prompt_cache, prompt_lengths, rows.ids // group, constrain)
            leave_at = sizes[i + 1] if i + 1 < len(sizes) else None
            out, cache = decode_segment((step, rows.current, rows.ended, rows.done, rows.lengths, tokens, logprobs),
                                        rows.cache, rows.ids, row_budgets[rows.ids], prompts, lengths_of_prompts,
                                        leave_at)
            next_step, current, ended, done, lengths, next_tokens, next_logprobs = out
            outputs = (next_tokens, next_logprobs, all_lengths.at[rows.ids].set(lengths, unique_indices=True),
                       all_ended.at[rows.ids].set(ended, unique_indices=True))
            if leave_at is None:
                return outputs
            return segments_from(i + 1, next_step, Rows(rows.ids, current, ended, done, lengths, cache), *outputs)

        return jax.lax.cond((step < steps) & ~jnp.all(live.done), rest,
                            lambda: (tokens, logprobs, all_lengths, all_ended))

    tokens, logprobs, lengths, ended = segments_from(
        0, step, Rows(row_ids, current, ended, done, lengths, ungroup(cache)), tokens, logprobs, lengths, ended)
    return tokens, logprobs, lengths, ~ended


def _prepare(model, prompts, *, num_samples, max_new_tokens, max_new_tokens_cap, rng, temperature, top_p, top_k,
             eos_ids, pad_id, prompt_buckets, row_buckets, min_compact_rows, compact_shrink, live_prompts,
             response_chunks, mesh):
    """Validates, buckets and places everything; returns (program key, a function that builds the
    jitted program, args, plan). Building the jit wrapper costs ms, so it is only done to compile."""
    _validate(model, prompts, num_samples, temperature, top_p, top_k, eos_ids, pad_id)
    budgets, cap = token_budgets(max_new_tokens, len(prompts), max_new_tokens_cap)
    prompt_buckets = check_buckets(DEFAULT_PROMPT_BUCKETS if prompt_buckets is None else prompt_buckets,
                                    "prompt_buckets")
    row_buckets = check_buckets(DEFAULT_ROW_BUCKETS if row_buckets is None else row_buckets, "row_buckets")
    if not isinstance(min_compact_rows, (int, np.integer)) or min_compact_rows < 0:
        raise ValueError(f"min_compact_rows: must be an int >= 0 (0 = off), got {min_compact_rows!r}")
    if not 0 < compact_shrink < 1:
        raise ValueError(f"compact_shrink: must be in (0, 1), got {compact_shrink!r}")
    if not isinstance(live_prompts, (int, np.integer)) or live_prompts < 0:
        raise ValueError(f"live_prompts: must be an int >= 0 (0 = off), got {live_prompts!r}")
    if not isinstance(response_chunks, (int, np.integer)) or response_chunks < 1:
        raise ValueError(f"response_chunks: must be an int >= 1, got {response_chunks!r}")
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    shardings, batch, replicated, mesh = _placement(model, params, mesh)
    data_parallel = 1 if mesh is None else mesh.shape.get("data", 1) * mesh.shape.get("fsdp", 1)

    lengths = np.array([len(p) for p in prompts], np.int32)
    row_bucket = bucket_at_least(len(prompts) * num_samples, row_buckets, "rows")
    prompt_rows = -(-max(-(-row_bucket // num_samples), len(prompts)) // data_parallel) * data_parallel
    # Lanes split evenly over the mesh; refill only pays when more prompts than lanes wait.
    lanes = -(-int(live_prompts) // data_parallel) * data_parallel
    lanes = lanes if len(prompts) > lanes else 0
    if lanes:  # compaction of the drain, in whole lanes (at least min_compact_rows rows)
        segments = segment_rows(lanes, -(-int(min_compact_rows) // num_samples), data_parallel, float(compact_shrink))
    else:
        segments = segment_rows(prompt_rows * num_samples, int(min_compact_rows), data_parallel, float(compact_shrink))
    plan = Plan(prompt_rows=prompt_rows,
                 prompt_length=bucket_at_least(int(lengths.max()), prompt_buckets, "prompt length"),
                 group=num_samples, max_new_tokens=cap, compact_rows=segments, lanes=lanes,
                 chunks=1 if lanes else int(response_chunks))
    # The chunks the program runs, not those asked for: calls that differ only there share a program.
    plan = dataclasses.replace(plan, chunks=len(plan.response_chunks))
    ids = np.full((plan.prompt_rows, plan.prompt_length), pad_id, np.int32)
    for i, p in enumerate(prompts):
        ids[i, :len(p)] = p
    padded_lengths = np.ones(plan.prompt_rows, np.int32)  # padding prompts: one pad token
    padded_lengths[:len(prompts)] = lengths
    padded_budgets = np.ones(plan.prompt_rows, np.int32)  # padding rows stop after one token
    padded_budgets[:len(prompts)] = budgets

    if not jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key):
        rng = jax.random.wrap_key_data(rng)
    mode = mode_of(temperature, top_p, top_k)
    eos = np.asarray(tuple(eos_ids), np.int32).reshape(-1)
    in_shardings = (shardings, batch(2), batch(1), batch(1), replicated, replicated, replicated, replicated)
    args = (params, ids, padded_lengths, padded_budgets, rng, np.float32(temperature), np.float32(top_p), eos)
    program = _program
    if plan.lanes:  # the number of real prompts is traced, so a refill program serves its whole prompt bucket
        program = _refill
        args = args[:4] + (np.int32(len(prompts)),) + args[4:]
        # Every device may prefill any waiting prompt into its lanes: the prompts (small) are replicated.
        in_shardings = (shardings,) + (replicated,) * (len(args) - 1)
    args = multihost.put_tree(args, in_shardings)
    param_sig = tuple((a.shape, a.dtype, a.sharding) for a in jax.tree.leaves(args[0]))
    # The matmul precision in force is traced into the program, so it is part of what was compiled.
    key = (graphdef, jax.tree.structure(params), param_sig, plan, mode, len(eos), pad_id, str(rng.dtype), mesh,
           jax.config.jax_default_matmul_precision)
    make_fn = functools.partial(
        jax.jit,
        functools.partial(program, graphdef=graphdef, rest=rest, plan=plan, mode=mode, pad_id=pad_id, mesh=mesh),
        in_shardings=in_shardings, out_shardings=(batch(2), batch(2), batch(1), batch(1)))
    return key, make_fn, args, plan


def lower_generate(model, prompts, *, num_samples: int, max_new_tokens, rng: jax.Array,
                   max_new_tokens_cap: int | None = None, temperature: float = 1.0, top_p: float = 1.0,
                   top_k: int = 0, eos_ids: Sequence[int] = (), pad_id: int = 0, prompt_buckets=None,
                   row_buckets=None, min_compact_rows: int = 0, compact_shrink: float = 0.5,
                   live_prompts: int = 0, response_chunks: int = 4, mesh=None) -> jax.stages.Lowered:
    """The lowered (not compiled) program `generate` would run for these arguments: for
    inspecting its shapes, HLO and cost analysis."""
    _, make_fn, args, _ = _prepare(model, prompts, num_samples=num_samples, max_new_tokens=max_new_tokens,
                                   max_new_tokens_cap=max_new_tokens_cap, rng=rng,
                                   temperature=temperature, top_p=top_p, top_k=top_k, eos_ids=eos_ids, pad_id=pad_id,
                                   prompt_buckets=prompt_buckets, row_buckets=row_buckets,
                                   min_compact_rows=min_compact_rows, compact_shrink=compact_shrink,
                                   live_prompts=live_prompts, response_chunks=response_chunks, mesh=mesh)
    return make_fn().lower(*args)


def generate(model, prompts: list[list[int]], *, num_samples: int, max_new_tokens: int | Sequence[int],
             rng: jax.Array, max_new_tokens_cap: int | None = None, temperature: float = 1.0, top_p: float = 1.0,
             top_k: int = 0, eos_ids: Sequence[int] = (), pad_id: int = 0, prompt_buckets: Sequence[int] | None = None,
             row_buckets: Sequence[int] | None = None, min_compact_rows: int = 0, compact_shrink: float = 0.5,
             live_prompts: int = 0, response_chunks: int = 4, mesh=None) -> SampleOutput:
    """Samples `num_samples` responses for each prompt; see `SampleOutput` for the fields.

    temperature 0 is greedy; top_k 0 and top_p 1 are off. Same `rng` -> identical output. The
    prompt batch is padded to a prompt-length bucket and the rows to a row bucket (defaults:
    DEFAULT_PROMPT_BUCKETS / DEFAULT_ROW_BUCKETS), so a run compiles one
    program per (bucket, group size, cap, sampling mode). With a mesh (or a model
    whose parameters live on one), rows split over the ("data", "fsdp") axes.

    max_new_tokens: an int, or one token budget per prompt (its G rows stop after that many
    tokens). The outputs' length dimension is `max_new_tokens_cap` (default: the largest budget);
    budgets are runtime values, so a fixed cap compiles once whatever the budgets.

    min_compact_rows > 0: live-row compaction. Decode runs in segments of rows, R * s, R * s^2, ...
    with s = compact_shrink (not below min_compact_rows; under a mesh, multiples of its
    data-parallel size); once few enough rows are live, they move into the next segment, so rows
    that are done stop costing steps. The outputs are the uncompacted program's: a row's draws are keyed by its index in
    the call. It costs up to half the response cache, and a per-row copy of the prompt cache
    for the compacted rows, in transient memory (see `kv_cache_bytes`).

    live_prompts > 0: continuous batching when more prompts than that are given. Decode keeps
    that many prompts' groups in flight (under a mesh, rounded up to a multiple of its data-parallel
    size) and prefills the next prompt into a group's place once its G rows are done, inside the
    compiled loop (see `greso_jax.sampling.refill`); the KV cache is the lanes' only. The outputs are
    the plain program's, as under compaction. With min_compact_rows > 0 too, the lanes' drain (no
    prompt left waiting) is compacted in whole lanes, K * s, K * s^2, ... lanes.

    response_chunks: without refill, the response cache is up to this many chunks of near-equal
    slots (none under `shapes.MIN_CHUNK_SLOTS`), each decoded by its own loop that attends to the
    chunks written so far, so a decode step reads the filled part of the cache (about (C + 1) / 2C
    of it on average), not all of it. Same samples up to float rounding (the softmax sums in
    another order); one more compiled loop per chunk (and per compaction segment).
    """
    key, make_fn, args, plan = _prepare(model, prompts, num_samples=num_samples, max_new_tokens=max_new_tokens,
                                        max_new_tokens_cap=max_new_tokens_cap,
                                        rng=rng, temperature=temperature, top_p=top_p, top_k=top_k, eos_ids=eos_ids,
                                        pad_id=pad_id, prompt_buckets=prompt_buckets, row_buckets=row_buckets,
                                        min_compact_rows=min_compact_rows, compact_shrink=compact_shrink,
                                        live_prompts=live_prompts, response_chunks=response_chunks, mesh=mesh)
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = _COMPILED[key] = make_fn().lower(*args).compile()
    tokens, logprobs, lengths, truncated = (multihost.to_host(x) for x in compiled(*args))
    real = len(prompts) * plan.group
    return SampleOutput(tokens=tokens[:real], logprobs=logprobs[:real], lengths=lengths[:real],
                        truncated=truncated[:real], kv_cache_bytes=kv_cache_bytes(model.cfg, plan),
                        prompt_rows=plan.prompt_rows, rows=plan.rows_in_flight, prompt_length=plan.prompt_length,
                        prompts=list(prompts), num_samples=num_samples)


def generate_in_chunks(model, prompts: list[list[int]], *, num_samples: int, max_rows_per_call: int,
                       max_new_tokens: int | Sequence[int], rng: jax.Array, max_new_tokens_cap: int | None = None,
                       **generate_kwargs) -> SampleOutput:
    """`generate` over consecutive slices of `prompts`, at most `max_rows_per_call` response rows
    per call (0: one call), so that the KV cache of a large pass fits in device memory. Call i
    uses the key fold_in(rng, i). Per-prompt budgets (`max_new_tokens` as a sequence) are split
    with the prompts, and every call shares one cap (default: the largest budget over all calls),
    so the outputs concatenate. Returns one SampleOutput over all prompts, rows in prompt order.
    """
    if not prompts or num_samples < 1 or max_rows_per_call < 0:
        raise ValueError(f"generate_in_chunks: needs prompts ({len(prompts)}), num_samples >= 1 ({num_samples}) "
                         f"and max_rows_per_call >= 0 ({max_rows_per_call})")
    budgets, cap = token_budgets(max_new_tokens, len(prompts), max_new_tokens_cap)
    per_call = len(prompts)
    if max_rows_per_call:
        per_call = max(1, max_rows_per_call // num_samples)
    parts = [generate(model, prompts[start:start + per_call], num_samples=num_samples,
                      max_new_tokens=budgets[start:start + per_call], max_new_tokens_cap=cap,
                      rng=jax.random.fold_in(rng, i), **generate_kwargs)
             for i, start in enumerate(range(0, len(prompts), per_call))]
    return SampleOutput(tokens=np.concatenate([p.tokens for p in parts]),
                        logprobs=np.concatenate([p.logprobs for p in parts]),
                        lengths=np.concatenate([p.lengths for p in parts]),
                        truncated=np.concatenate([p.truncated for p in parts]),
                        kv_cache_bytes=max(p.kv_cache_bytes for p in parts),
                        prompt_rows=max(p.prompt_rows for p in parts), rows=max(p.rows for p in parts),
                        prompt_length=max(p.prompt_length for p in parts), prompts=list(prompts),
                        num_samples=num_samples)
