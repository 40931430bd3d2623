"""`TrainBatch` (the learner's input for one update), laid out by `make_train_batch`, assembled from accepted groups by `assemble_batch`, checked and summarised on the host (`host_arrays`, `batch_statistics`)."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from greso_jax.rl.advantages import compute_advantages


class TrainBatch(NamedTuple):
    """B rows of prompt + response, right-padded to T. A pytree: every field is an array.

    input_ids      int32 [B, T]  prompt tokens then response tokens then padding
    attention_mask int32 [B, T]  1 on prompt and response tokens
    response_mask  f32   [B, T]  1 on response tokens that enter the loss (EOS included, padding
                                 and loss-masked rows excluded); built from lengths, never token values
    old_logprobs   f32   [B, T]  log-prob of input_ids[b, t] under the sampling policy where
                                 response_mask is 1, 0 elsewhere
    advantages     f32   [B]     one per response
    response_lengths int32 [B] | None  generated tokens per row (EOS counted) whether or not the row
                                 enters the loss; None: taken from response_mask (metrics only)
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    response_mask: np.ndarray
    old_logprobs: np.ndarray
    advantages: np.ndarray
    response_lengths: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return int(self.input_ids.shape[0])


def make_train_batch(prompt_tokens: Sequence[Sequence[int]], response_tokens, response_lengths, response_logprobs,
                     advantages, *, pad_id: int, total_length: int, loss_mask=None) -> TrainBatch:
    """Lays out B rows: row b holds prompt_tokens[b] at [0, P_b) and the first response_lengths[b]
    tokens of response_tokens[b] at [P_b, P_b + length) (the EOS, when the response ended with
    one, is the last counted token), then pad_id up to total_length.

    response_tokens int32 [B, L]; response_lengths int [B] in [0, L]; response_logprobs f32 [B, L]
    (sampler's log-prob of each response token); advantages f32 [B]; loss_mask bool [B] or None
    (False: the row is generated but kept out of the loss, e.g. AERO's rejection).
    """
    response_tokens = np.asarray(response_tokens)
    if response_tokens.ndim != 2:
        raise ValueError(f"make_train_batch: response_tokens must be [B, L], got shape {response_tokens.shape}")
    b, max_response = response_tokens.shape
    if len(prompt_tokens) != b:
        raise ValueError(f"make_train_batch: {len(prompt_tokens)} prompts for {b} response rows")
    lengths = _per_row("response_lengths", response_lengths, b).astype(np.int64)
    advantages = _per_row("advantages", advantages, b).astype(np.float32)
    logprobs = np.asarray(response_logprobs, dtype=np.float32)
    if logprobs.shape != (b, max_response):
        raise ValueError(f"make_train_batch: response_logprobs shape {logprobs.shape} != response_tokens shape "
                         f"{(b, max_response)}")
    keep = np.ones(b, bool) if loss_mask is None else _per_row("loss_mask", loss_mask, b).astype(bool)
    bad = np.flatnonzero((lengths < 0) | (lengths > max_response))
    if bad.size:
        raise ValueError(f"make_train_batch: row {bad[0]}: response length {lengths[bad[0]]} outside "
                         f"[0, {max_response}]")
    bad = np.flatnonzero(~np.isfinite(advantages))
    if bad.size:
        raise ValueError(f"make_train_batch: row {bad[0]}: advantage {advantages[bad[0]]} is not finite")

    prompt_lengths = np.array([len(p) for p in prompt_tokens], np.int64)
    bad = np.flatnonzero(prompt_lengths == 0)
    if bad.size:
        raise ValueError(f"make_train_batch: row {bad[0]}: empty prompt (the first response token needs a "
                         "preceding token to be predicted from)")
    bad = np.flatnonzero(prompt_lengths + lengths > total_length)
    if bad.size:
        r = bad[0]
        raise ValueError(f"make_train_batch: row {r}: prompt {prompt_lengths[r]} + response {lengths[r]} tokens "
                         f"exceed total_length {total_length}")

    input_ids = np.full((b, total_length), pad_id, np.int32)
    for row, prompt in enumerate(prompt_tokens):
        input_ids[row, :prompt_lengths[row]] = prompt
    positions = np.arange(total_length)[None, :]  # [1, T]
    start, end = prompt_lengths[:, None], (prompt_lengths + lengths)[:, None]
    in_response = (positions >= start) & (positions < end)  # [B, T]
    # Response token j of row b sits at column start_b + j: gather by offset, then scatter by mask.
    offset = np.clip(positions - start, 0, max(max_response - 1, 0))  # [B, T]
    if max_response:
        input_ids = np.where(in_response, np.take_along_axis(response_tokens, offset, axis=1), input_ids)
        old_logprobs = np.where(in_response, np.take_along_axis(logprobs, offset, axis=1), 0.0)
    else:
        old_logprobs = np.zeros((b, total_length), np.float32)
    response_mask = (in_response & keep[:, None]).astype(np.float32)
    return TrainBatch(
        input_ids=input_ids.astype(np.int32),
        attention_mask=(positions < end).astype(np.int32),
        response_mask=response_mask,
        old_logprobs=(old_logprobs * response_mask).astype(np.float32),
        advantages=advantages,
        response_lengths=lengths.astype(np.int32),
    )


class AssembledBatch(NamedTuple):
    """One training step's learner input built from the accepted groups.

    batch      the TrainBatch, B rows: every group's responses in group order, then filler rows
    truncated  bool [B]: the response hit max_new_tokens without an EOS (False on filler rows)
    group_ids  int [B]: index of the row's group in `groups`, -1 on filler rows
    stats      {"rollout/reward_mean", "train/groups", "train/responses" (rows that enter the loss)}
    """

    batch: TrainBatch
    truncated: np.ndarray
    group_ids: np.ndarray
    stats: dict


def assemble_batch(groups, outputs, *, advantage: str, pad_id: int, total_length: int,
                   row_multiple: int) -> AssembledBatch:
    """Accepted groups -> the learner's batch, rows padded to a multiple of `row_multiple` (the
    update's mini-batches x micro-batch rows) so that every step reuses one compiled update.

    groups[i] has response_refs int [k, 3] (index into `outputs`, prompt row within that output,
    sample index), rewards f32 [k], loss_mask bool [k] (False: kept out of the loss), baseline and
    scale (NaN: the group's own mean / std). outputs[c] is a sampler output carrying its prompts
    and num_samples (response row = prompt row * num_samples + sample). Advantages are computed
    over the groups padded to the widest one, with the `advantage` estimator. Responses whose loss
    mask is False (AERO's rejection) leave the batch: their forward and backward passes are not
    paid. Filler rows repeat a one-token pad prompt with an empty response, so they add nothing to
    the loss; they are paid (the learner's "actor/update_tokens" counts them).
    """
    if not groups:
        raise ValueError("assemble_batch: no groups")
    if row_multiple < 1:
        raise ValueError(f"assemble_batch: row_multiple must be >= 1, got {row_multiple}")
    width = max(len(g.rewards) for g in groups)
    rewards = np.zeros((len(groups), width), np.float32)
    mask = np.zeros((len(groups), width), bool)
    baseline = np.full(len(groups), np.nan, np.float32)
    scale = np.full(len(groups), np.nan, np.float32)
    for i, g in enumerate(groups):
        k = len(g.rewards)
        rewards[i, :k] = g.rewards
        mask[i, :k] = g.loss_mask
        baseline[i], scale[i] = g.baseline, g.scale
    advantages = compute_advantages(rewards, advantage, response_mask=mask, baseline=baseline, scale=scale)
    prompt_tokens, tokens, logprobs, lengths, truncated, row_adv, row_mask, group_ids = ([] for _ in range(8))
    for i, g in enumerate(groups):
        for j, (call, row, sample) in enumerate(np.asarray(g.response_refs).reshape(-1, 3)):
            if not mask[i, j]:
                continue
            out = outputs[call]
            r = row * out.num_samples + sample
            prompt_tokens.append(out.prompts[row])
            tokens.append(out.tokens[r])
            logprobs.append(out.logprobs[r])
            lengths.append(out.lengths[r])
            truncated.append(out.truncated[r])
            row_adv.append(advantages[i, j])
            row_mask.append(mask[i, j])
            group_ids.append(i)
    responses = len(tokens)
    if not responses:
        raise ValueError("assemble_batch: no response of any group enters the loss")
    filler = -(-responses // row_multiple) * row_multiple - responses
    prompt_tokens += [[pad_id]] * filler
    tokens += [np.full_like(tokens[0], pad_id)] * filler
    logprobs += [np.zeros_like(logprobs[0])] * filler
    lengths += [0] * filler
    truncated += [False] * filler
    row_adv += [0.0] * filler
    row_mask += [False] * filler
    group_ids += [-1] * filler
    batch = make_train_batch(prompt_tokens, np.stack(tokens), np.asarray(lengths, np.int32), np.stack(logprobs),
                             np.asarray(row_adv, np.float32), pad_id=pad_id, total_length=total_length,
                             loss_mask=np.asarray(row_mask))
    stats = {"rollout/reward_mean": float(rewards[mask].mean()) if mask.any() else 0.0,
             "train/groups": len(groups), "train/responses": responses}
    return AssembledBatch(batch=batch, truncated=np.asarray(truncated), group_ids=np.asarray(group_ids, np.int64),
                          stats=stats)


def _per_row(name: str, values, b: int) -> np.ndarray:
    values = np.asarray(values)
    if values.shape != (b,):
        raise ValueError(f"make_train_batch: {name} must have shape [B] = ({b},), got {values.shape}")
    return values


def host_arrays(batch: TrainBatch) -> dict[str, np.ndarray]:
    """NumPy views of the batch's fields with their shapes checked against input_ids [B, T]."""
    arrays = {
        "input_ids": np.asarray(batch.input_ids, np.int32),
        "attention_mask": np.asarray(batch.attention_mask, np.int32),
        "response_mask": np.asarray(batch.response_mask, np.float32),
        "old_logprobs": np.asarray(batch.old_logprobs, np.float32),
        "advantages": np.asarray(batch.advantages, np.float32),
    }
    if arrays["input_ids"].ndim != 2:
        raise ValueError(f"TrainBatch.input_ids must be [B, T], got shape {arrays['input_ids'].shape}")
    b, t = arrays["input_ids"].shape
    for name in ("attention_mask", "response_mask", "old_logprobs"):
        if arrays[name].shape != (b, t):
            raise ValueError(f"TrainBatch.{name} has shape {arrays[name].shape}, expected {(b, t)}")
    if arrays["advantages"].shape != (b,):
        raise ValueError(f"TrainBatch.advantages has shape {arrays['advantages'].shape}, expected {(b,)}")
    lengths = batch.response_lengths
    arrays["response_lengths"] = (arrays["response_mask"].sum(axis=1) if lengths is None
                                  else np.asarray(lengths, np.float32))
    return arrays


def batch_statistics(arrays: dict, truncated, group_ids) -> dict[str, float]:
    """Advantage and response statistics of the train batch (host side). Rows with response
    length 0 are padding rows (no response was generated) and are left out of every statistic;
    advantage statistics cover the rows that enter the loss."""
    advantages, lengths = arrays["advantages"], arrays["response_lengths"]
    real = lengths > 0
    if not real.any():
        real = np.ones_like(real)
    in_loss = arrays["response_mask"].sum(axis=1) > 0
    trained = advantages[in_loss] if in_loss.any() else np.zeros(1, np.float32)
    if group_ids is None:
        zero_std = float(np.mean(advantages[real] == 0))
    else:
        group_ids = np.asarray(group_ids)
        if group_ids.shape != advantages.shape:
            raise ValueError(f"Learner.update: group_ids shape {group_ids.shape} != advantages shape "
                             f"{advantages.shape}")
        groups = np.unique(group_ids[real])
        zero_std = float(np.mean([np.all(advantages[real & (group_ids == g)] == 0) for g in groups]))
    if truncated is None:
        truncated_frac = float("nan")
    else:
        truncated = np.asarray(truncated, bool)
        if truncated.shape != advantages.shape:
            raise ValueError(f"Learner.update: truncated shape {truncated.shape} != advantages shape "
                             f"{advantages.shape}")
        truncated_frac = float(truncated[real].mean())
    return {"actor/advantage_mean": float(trained.mean()), "actor/advantage_std": float(trained.std()),
            "actor/frac_zero_std_groups": zero_std, "response/length_mean": float(lengths[real].mean()),
            "response/length_max": float(lengths[real].max()), "response/truncated_frac": truncated_frac}
