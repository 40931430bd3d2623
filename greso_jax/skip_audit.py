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
_KINDS = (("easy", OUTCOME_ALL_CORRECT), ("hard", OUTCOME_ALL_INCORRECT))


class SkipAudit:
    """Collects the prompts skipped in a step with the outcome they were skipped for, then rolls out
    `fraction` of them. A skip as easy (last rollout all correct) or hard (all incorrect) is right
    when the audited group is again zero-variance."""

    def __init__(self, fraction: float, seed: int):
        self.fraction, self.seed = fraction, seed
        self._skipped: list[tuple[np.ndarray, np.ndarray]] = []  # (ids [n], last outcomes [n]) per pull

    @property
    def enabled(self) -> bool:
        return self.fraction > 0

    def begin_step(self) -> None:
        self._skipped = []

    def record(self, skipped_ids: np.ndarray, last_outcomes: np.ndarray) -> None:
        """The ids a pull skipped and each one's last outcome, as it was when it was skipped."""
        self._skipped.append((np.asarray(skipped_ids), np.asarray(last_outcomes)))

    def run(self, step: int, rollout: Callable[[np.ndarray, Sequence, int], ScoredPass],
            element: Callable[[int], dict], group_size: int) -> dict[str, float]:
        """Rolls out the step's chosen skips with `rollout(ids, payloads, group_size)` and counts, per
        kind, skips, zero-variance groups and groups with the same outcome as the skip predicted."""
        start = time.perf_counter()
        out = {f"audit/{kind}_{what}": 0.0 for kind, _ in _KINDS
               for what in ("skips", "zero_variance", "same_outcome")}
        out["audit/responses"] = 0.0
        if self._skipped:
            ids = np.concatenate([ids for ids, _ in self._skipped])
            outcomes = np.concatenate([o for _, o in self._skipped])
            draws = counter_rng.uniform(counter_rng.scalar_key(self.seed, _AUDIT_STREAM, step), ids,
                                        np.arange(ids.size))
            chosen = draws < self.fraction
            if chosen.any():
                ids, outcomes = ids[chosen], outcomes[chosen]
                scored = rollout(ids, [element(i) for i in ids], group_size)
                all_correct, none_correct = scored.correct.all(axis=1), ~scored.correct.any(axis=1)
                for kind, code in _KINDS:
                    same = all_correct if code == OUTCOME_ALL_CORRECT else none_correct
                    mine = outcomes == code
                    out[f"audit/{kind}_skips"] = float(mine.sum())
                    out[f"audit/{kind}_zero_variance"] = float((mine & (all_correct | none_correct)).sum())
                    out[f"audit/{kind}_same_outcome"] = float((mine & same).sum())
                out["audit/responses"] = float(scored.correct.size)
        out["time/audit"] = time.perf_counter() - start
        return out
