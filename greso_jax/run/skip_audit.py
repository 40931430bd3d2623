"""The skip audit: a seeded fraction of a step's pre-rollout skips is rolled out after the step to
measure whether the skips were right (docs/design.md, "Measuring strategies").

The audited groups are never trained on and never shown to the strategy, so a run with the audit
trains exactly as one without it; their cost is reported apart (audit/responses, time/audit).
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from greso_jax.selection import OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, ScoredPass, counter_rng

_AUDIT_STREAM = 0xA0D1  # counter-RNG stream of the audit's draws (apart from every strategy's streams)


class SkipAudit:
    """Collects the prompts skipped in a step with what the strategy skipped them as (`skip_kinds`:
    easy, predicted all correct; hard, all incorrect; other, no prediction), then rolls out
    `fraction` of them. A skip is right when the audited group is zero-variance; `same_outcome`
    counts the easy / hard skips whose group has the predicted outcome."""

    def __init__(self, fraction: float, seed: int):
        self.fraction, self.seed = fraction, seed
        self._skipped: list[tuple[np.ndarray, np.ndarray]] = []  # (ids [n], skip kinds [n]) per pull

    @property
    def enabled(self) -> bool:
        return self.fraction > 0

    def begin_step(self) -> None:
        self._skipped = []

    def record(self, skipped_ids: np.ndarray, skip_kinds: np.ndarray) -> None:
        """The ids a pull skipped and what each was skipped as (OUTCOME_* codes), when it was skipped."""
        self._skipped.append((np.asarray(skipped_ids), np.asarray(skip_kinds)))

    def run(self, step: int, rollout: Callable[[np.ndarray, Sequence, int], ScoredPass],
            element: Callable[[int], dict], group_size: int) -> dict[str, float]:
        """Rolls out the step's chosen skips with `rollout(ids, payloads, group_size)` and counts, per
        kind, skips, zero-variance groups and groups with the same outcome as the skip predicted."""
        start = time.perf_counter()
        out = {f"audit/{kind}_{what}": 0.0 for kind in ("easy", "hard", "other") for what in ("skips", "zero_variance")}
        out.update({"audit/easy_same_outcome": 0.0, "audit/hard_same_outcome": 0.0, "audit/responses": 0.0})
        if self._skipped:
            ids = np.concatenate([ids for ids, _ in self._skipped])
            kinds = np.concatenate([k for _, k in self._skipped])
            draws = counter_rng.uniform(counter_rng.scalar_key(self.seed, _AUDIT_STREAM, step), ids,
                                        np.arange(ids.size))
            chosen = draws < self.fraction
            if chosen.any():
                ids, kinds = ids[chosen], kinds[chosen]
                scored = rollout(ids, [element(i) for i in ids], group_size)
                all_correct, none_correct = scored.correct.all(axis=1), ~scored.correct.any(axis=1)
                easy, hard = kinds == OUTCOME_ALL_CORRECT, kinds == OUTCOME_ALL_INCORRECT
                for kind, mine in (("easy", easy), ("hard", hard), ("other", ~(easy | hard))):
                    out[f"audit/{kind}_skips"] = float(mine.sum())
                    out[f"audit/{kind}_zero_variance"] = float((mine & (all_correct | none_correct)).sum())
                out["audit/easy_same_outcome"] = float((easy & all_correct).sum())
                out["audit/hard_same_outcome"] = float((hard & none_correct).sum())
                out["audit/responses"] = float(scored.correct.size)
        out["time/audit"] = time.perf_counter() - start
        return out
