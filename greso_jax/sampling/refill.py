"""Continuous batching of the decode loop: a fixed number of prompt lanes, each holding one prompt's
group of G rows and its prompt cache; once all G rows of a lane are done, the next waiting prompt
is prefilled into that lane inside the compiled loop, so rows that stop early are replaced by
useful rows instead of idling until the longest row of the call ends.

Prompts enter in order of their token budgets, longest first, so that with per-prompt budgets the
prompts still running once none is waiting are the short ones. Once no prompt is waiting, the lanes
drain: the last prompts finish one by one while the other lanes idle. With `plan.compact_rows`
(here: lane counts), the drain runs in segments of ever fewer lanes, the live lanes gathered into
each, as live-row compaction does for a plain call.

Lanes keep the prefix sharing of the plain program (one prompt cache entry per group), and every
draw is keyed by (step, the row's index in the call) as there, so a call's samples do not depend on
the schedule: the outputs are the plain program's up to float32 rounding. Each lane is at its own
response step, so the response cache is written at a per-lane slot (`kv_cache.decode_step`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from greso_jax.sampling.kv_cache import Constraint, LayerCache, decode_step, empty_response_cache, prefill
from greso_jax.sampling.shapes import Plan
from greso_jax.sampling.token_sampling import SamplingMode, choose_tokens, is_eos, row_keys


class Lanes(NamedTuple):
    """K lanes. prompt, step, prompt_lengths int32 [K]: the prompt each lane holds (its index in the
    call), the response token its rows produce next, and that prompt's length; prompt_cache: one
    LayerCache per layer (k [K, Hkv, hd, Tp], v [K, Hkv, Tp, hd]); response_cache: [K, G, ...]."""

    prompt: jax.Array
    step: jax.Array
    prompt_lengths: jax.Array
    prompt_cache: list
    response_cache: list


class LaneRows(NamedTuple):
    """The K*G rows in flight (row k*G+g is member g of lane k's group), each [K*G]: the token fed
    next, whether it produced EOS, whether it is done (EOS or budget spent), its length, its budget."""

    current: jax.Array
    ended: jax.Array
    done: jax.Array
    lengths: jax.Array
    budgets: jax.Array


class CallOutputs(NamedTuple):
    """Results in the call's row order (row i*G+g answers prompt i): tokens, logprobs [rows, cap];
    lengths, ended [rows]."""

    tokens: jax.Array
    logprobs: jax.Array
    lengths: jax.Array
    ended: jax.Array


def admission_order(budgets, num_prompts):
    """budgets int32 [Np], num_prompts (traced) -> int32 [Np]: the order prompts enter the lanes,
    longest budget first (equal budgets keep the call's order; padding prompts last). The drain then
    waits on the shortest prompts, not on a long one admitted last. Outputs and draws are keyed by
    prompt index, so the order changes the schedule, not the samples."""
    waiting = jnp.arange(budgets.shape[0]) < num_prompts
    return jnp.argsort(jnp.where(waiting, -budgets, 1), stable=True).astype(jnp.int32)


def refill_program(model, prompt_ids, prompt_lengths, budgets, num_prompts, key, temperature, top_p, eos_ids, *,
                   plan: Plan, mode: SamplingMode, pad_id: int, constrain: Constraint):
    """Samples G rows for each of the first `num_prompts` (traced) of prompt_ids [Np, Tp] through
    plan.lanes lanes; the caller ensures num_prompts > plan.lanes. Returns (tokens, logprobs
    [Np*G, cap], lengths [Np*G], truncated [Np*G]); rows of prompts past num_prompts are left empty."""
    group, lanes, sizes = plan.group, plan.lanes, plan.compact_rows
    dropped = plan.rows  # an output row index past the end: scatters to it are dropped

    def load(state, lane_ids, prompt_index):
        """Prefills prompts prompt_index int32 [F] into lanes lane_ids [F] and draws their first tokens."""
        next_prompt, lanes_state, rows, out = state
        # One prompt cannot split over the mesh's rows: a refill's prefill runs replicated, unconstrained.
        whole = constrain if prompt_index.shape[0] == lanes else (lambda x: x)
        with jax.named_scope("prefill"):
            cache, first_logits = prefill(model, prompt_ids[prompt_index], prompt_lengths[prompt_index], whole)
        prompt_cache = [LayerCache(constrain(old.k.at[lane_ids].set(new.k)), constrain(old.v.at[lane_ids].set(new.v)))
                        for old, new in zip(lanes_state.prompt_cache, cache)]
        in_flight = (lane_ids[:, None] * group + jnp.arange(group)).reshape(-1)  # [F*G]
        out_rows = (prompt_index[:, None] * group + jnp.arange(group)).reshape(-1)
        first, first_lp = choose_tokens(jnp.repeat(first_logits, group, axis=0), row_keys(key, 0, out_rows), mode,
                                        temperature, top_p)
        row_budgets = jnp.repeat(budgets[prompt_index], group)
        ended = is_eos(first, eos_ids)
        rows = LaneRows(rows.current.at[in_flight].set(first), rows.ended.at[in_flight].set(ended),
                        rows.done.at[in_flight].set(ended | (row_budgets <= 1)),
                        rows.lengths.at[in_flight].set(1), rows.budgets.at[in_flight].set(row_budgets))
        out = CallOutputs(out.tokens.at[out_rows, 0].set(first), out.logprobs.at[out_rows, 0].set(first_lp),
                          out.lengths.at[out_rows].set(1), out.ended.at[out_rows].set(ended))
        lanes_state = Lanes(lanes_state.prompt.at[lane_ids].set(prompt_index), lanes_state.step.at[lane_ids].set(1),
                            lanes_state.prompt_lengths.at[lane_ids].set(prompt_lengths[prompt_index]),
                            prompt_cache, lanes_state.response_cache)
        return next_prompt, lanes_state, rows, out

    def live_lanes(done):
        """done bool [K*G] -> bool [K]: the lane has a row still decoding."""
        return ~done.reshape(-1, group).all(axis=1)

    def can_refill(state):
        next_prompt, _, rows, _ = state
        return (next_prompt < num_prompts) & ~live_lanes(rows.done).all()

    def refill_one(state):
        next_prompt = state[0]
        lane = jnp.argmin(live_lanes(state[2].done)).astype(jnp.int32)  # the first free lane
        _, lanes_state, rows, out = load(state, lane[None], admission[next_prompt][None])
        return next_prompt + 1, lanes_state, rows, out

    def one_token(state):
        next_prompt, lanes_state, rows, out = state
        members = jnp.tile(jnp.arange(group, dtype=jnp.int32), lanes_state.step.shape[0])  # g of each row
        slots = jnp.minimum(lanes_state.step - 1, plan.response_slots - 1)
        logits, response_cache = decode_step(model, rows.current, lanes_state.prompt_cache,
                                             lanes_state.response_cache, lanes_state.prompt_lengths, slots, constrain)
        row_steps = jnp.repeat(lanes_state.step, group)
        out_rows = jnp.repeat(lanes_state.prompt, group) * group + members
        with jax.named_scope("token_draw"):
            chosen, chosen_lp = choose_tokens(logits, row_keys(key, row_steps, out_rows), mode, temperature, top_p)
        live = ~rows.done
        chosen = jnp.where(live, chosen, pad_id)
        lengths = rows.lengths + live.astype(jnp.int32)
        ended = rows.ended | (live & is_eos(chosen, eos_ids))
        write = jnp.where(live, out_rows, dropped)
        out = CallOutputs(out.tokens.at[write, row_steps].set(chosen, mode="drop"),
                          out.logprobs.at[write, row_steps].set(chosen_lp, mode="drop"),
                          out.lengths.at[write].set(lengths, mode="drop"), out.ended.at[write].set(ended, mode="drop"))
        # A lane whose rows are all done stays at its step: its slot stays in range until it is refilled.
        lanes_state = lanes_state._replace(step=lanes_state.step + live_lanes(rows.done).astype(jnp.int32),
                                           response_cache=response_cache)
        rows = LaneRows(chosen, ended, ended | (lengths >= rows.budgets), lengths, rows.budgets)
        return next_prompt, lanes_state, rows, out

    def draining(state, leave_at):
        """Rows are live, and (leave_at given) more than leave_at lanes hold them."""
        live = live_lanes(state[2].done)
        go = live.any()
        return go if leave_at is None else go & (jnp.sum(live) > leave_at)

    def refill_then_decode(state):
        return one_token(jax.lax.while_loop(can_refill, refill_one, state))

    def gather(state, size):
        """The `size` lanes of the next drain segment: every lane with a live row first (the caller
        ensures at most `size`), then finished lanes as filler."""
        next_prompt, lanes_state, rows, out = state
        order = jnp.argsort(~live_lanes(rows.done), stable=True)[:size]

        def take(x):
            return constrain(jnp.take(x, order, axis=0))

        def take_rows(x):
            return constrain(jnp.take(x.reshape(-1, group), order, axis=0).reshape(-1))

        lanes_state = Lanes(take(lanes_state.prompt), take(lanes_state.step), take(lanes_state.prompt_lengths),
                            [LayerCache(take(c.k), take(c.v)) for c in lanes_state.prompt_cache],
                            [LayerCache(take(c.k), take(c.v)) for c in lanes_state.response_cache])
        return next_prompt, lanes_state, LaneRows(*(take_rows(x) for x in rows)), out

    def drain(i, state):
        """Drain segments i, i+1, ... (skipped once no row is live, so a call without a tail gathers nothing)."""
        def rest():
            leave_at = sizes[i + 1] if i + 1 < len(sizes) else None
            segment = jax.lax.while_loop(lambda s: draining(s, leave_at), one_token, gather(state, sizes[i]))
            return segment[3] if leave_at is None else drain(i + 1, segment)

        return jax.lax.cond(state[2].done.all(), lambda: state[3], rest)

    cfg = model.cfg
    dtype = jnp.dtype(cfg.dtype)
    tp = prompt_ids.shape[1]
    empty_prompts = [LayerCache(constrain(jnp.zeros((lanes, cfg.num_kv_heads, cfg.head_dim, tp), dtype)),
                                constrain(jnp.zeros((lanes, cfg.num_kv_heads, tp, cfg.head_dim), dtype)))
                     for _ in model.layers]
    zeros = jnp.zeros((lanes,), jnp.int32)
    in_flight = lanes * group
    state = (jnp.int32(lanes),
             Lanes(zeros, zeros, zeros, empty_prompts,
                   empty_response_cache(model, lanes, group, plan.response_slots, constrain)),
             LaneRows(jnp.zeros((in_flight,), jnp.int32), jnp.zeros((in_flight,), bool), jnp.ones((in_flight,), bool),
                      jnp.zeros((in_flight,), jnp.int32), jnp.ones((in_flight,), jnp.int32)),
             CallOutputs(jnp.full((plan.rows, plan.max_new_tokens), pad_id, jnp.int32),
                         jnp.zeros((plan.rows, plan.max_new_tokens), jnp.float32),
                         jnp.zeros((plan.rows,), jnp.int32), jnp.zeros((plan.rows,), bool)))
    admission = admission_order(budgets, num_prompts)
    leave_at = sizes[0] if sizes else None
    state = jax.lax.while_loop(lambda s: (s[0] < num_prompts) | draining(s, leave_at), refill_then_decode,
                               load(state, jnp.arange(lanes, dtype=jnp.int32), admission[:lanes]))
    out = drain(0, state) if sizes else state[3]
    return out.tokens, out.logprobs, out.lengths, ~out.ended
