"""The skip audit: a fraction of the prompts a strategy skipped is rolled out after the step, never
trained on and never shown to the strategy, to measure whether the skips were right."""

import os
import sys

import numpy as np
import pytest

from greso_jax.config import ConfigError, validate
from greso_jax.run.records import read_metrics
from greso_jax.selection import (OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_NONE, ScoredPass,
                                 make_selector)
from greso_jax.run.skip_audit import SkipAudit
from greso_jax.run.trainer import Trainer

sys.path.insert(0, os.path.dirname(__file__))
import trainer_config  # noqa: E402


def _run(tmp_path, name, fraction, strategy="greso"):
    config = trainer_config.get_config(strategy)  # untrained policy: every group all-incorrect (hard)
    config.train.num_steps = 6
    config.checkpoint.every_steps = 0
    config.eval.skip_audit_fraction = fraction
    Trainer(config, str(tmp_path / name), log=lambda *a: None).run()
    return [r for r in read_metrics(str(tmp_path / name)) if r["step"] > 0]


@pytest.mark.slow  # two 6-step runs (~1 min)
def test_audit_rolls_out_every_skip_at_fraction_one_and_changes_nothing_else(tmp_path):
    audited, plain = _run(tmp_path, "audited", 1.0), _run(tmp_path, "plain", 0.0)
    skipped_hard = sum(r["selection/skipped_hard"] for r in audited)
    assert skipped_hard > 0, "the run must reach the epoch where GRESO skips"
    assert sum(r["audit/hard_skips"] for r in audited) == skipped_hard
    assert sum(r["audit/easy_skips"] for r in audited) == sum(r["selection/skipped_easy"] for r in audited) == 0
    # The untrained policy almost never answers right: nearly every audited hard skip is all-incorrect again.
    same, zero_variance = (sum(r[f"audit/hard_{k}"] for r in audited) for k in ("same_outcome", "zero_variance"))
    assert 0.9 * skipped_hard <= same <= zero_variance <= skipped_hard
    assert sum(r["audit/responses"] for r in audited) == 4 * skipped_hard  # G = 4
    assert sum(r["audit/other_skips"] for r in audited) == 0
    assert all("audit/responses" not in r for r in plain)
    training = lambda r: {k: v for k, v in r.items() if not k.startswith(("time/", "cpu/", "perf/", "audit/"))}  # noqa: E731
    assert [training(r) for r in audited] == [training(r) for r in plain]


@pytest.mark.slow  # one 6-step run (~30 s)
def test_the_posteriors_audited_skips_are_all_counted_as_it_counted_them(tmp_path):
    """The posterior skips prompts whose last group was mixed, or that it never rolled out, on its
    prediction; at fraction 1 the audit rolls out every skip and sorts each as the selector did."""
    audited = _run(tmp_path, "posterior", 1.0, strategy="posterior")
    skipped = {kind: sum(r[f"selection/skipped_{kind}"] for r in audited) for kind in ("easy", "hard")}
    assert skipped["hard"] > 0, "the run must reach a step where the posterior skips"
    for kind in ("easy", "hard"):
        assert sum(r[f"audit/{kind}_skips"] for r in audited) == skipped[kind]
    assert sum(r["audit/other_skips"] for r in audited) == 0
    assert sum(r["audit/responses"] for r in audited) == 4 * (skipped["easy"] + skipped["hard"])


def test_audit_fraction_is_checked():
    config = trainer_config.get_config("greso")
    config.eval.skip_audit_fraction = 1.5
    with pytest.raises(ConfigError, match="eval.skip_audit_fraction"):
        validate(config)


def _scripted_rollout(correct_by_prompt):
    def rollout(ids, payloads, group_size):
        correct = np.array([correct_by_prompt[int(i)] for i in ids], bool)
        assert correct.shape == (len(ids), group_size)
        return ScoredPass(correct=correct, rewards=correct.astype(np.float32))
    return rollout


def test_every_audited_skip_is_counted_by_what_it_was_skipped_as():
    # Prompt 0: skipped as easy, all correct again; 1: as easy, mixed; 2: as hard, all wrong again;
    # 3: no prediction, all wrong (zero variance); 4: no prediction, mixed.
    outcomes = {0: [1, 1, 1, 1], 1: [1, 0, 1, 1], 2: [0, 0, 0, 0], 3: [0, 0, 0, 0], 4: [0, 1, 0, 0]}
    audit = SkipAudit(1.0, seed=0)
    audit.begin_step()
    audit.record(np.array([0, 1, 2]), np.array([OUTCOME_ALL_CORRECT, OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT]))
    audit.record(np.array([3, 4]), np.array([OUTCOME_NONE, OUTCOME_NONE]))
    out = audit.run(0, _scripted_rollout(outcomes), lambda i: {"prompt_id": i}, group_size=4)
    assert (out["audit/easy_skips"], out["audit/easy_zero_variance"], out["audit/easy_same_outcome"]) == (2, 1, 1)
    assert (out["audit/hard_skips"], out["audit/hard_zero_variance"], out["audit/hard_same_outcome"]) == (1, 1, 1)
    assert (out["audit/other_skips"], out["audit/other_zero_variance"]) == (2, 1)
    assert out["audit/responses"] == 5 * 4


@pytest.mark.parametrize("strategy", ["greso", "mopps", "posterior"])
def test_skip_kinds_give_every_skipping_strategys_skips_a_direction(strategy):
    """The audit classifies skips by `skip_kinds`; a skip with no direction would fall out of the
    easy / hard precision (the posterior's and MoPPS's skips of mixed or unseen prompts once did)."""
    selector = make_selector(strategy, num_prompts=6, group_size=4, seed=0)
    selector.begin_step(0)
    selector.observe_counts(np.array([0, 1, 2]), np.array([4, 0, 2]), np.array([4, 4, 4]))
    kinds = selector.skip_kinds(np.array([0, 1, 2, 5]))
    assert kinds.dtype == np.int8 and kinds[0] == OUTCOME_ALL_CORRECT and kinds[1] == OUTCOME_ALL_INCORRECT
    if strategy == "greso":  # a streak is what GRESO skips on: a mixed or unseen prompt has none
        assert (kinds[2:] == OUTCOME_NONE).all()
    elif strategy == "mopps":  # by the posterior mean where there is evidence; an unseen prompt: no prediction
        assert kinds[2] == OUTCOME_ALL_INCORRECT and kinds[3] == OUTCOME_NONE
    else:  # the posterior predicts every prompt, an unseen one from its prior
        assert np.isin(kinds[2:], (OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT)).all()
    selector.record_skipped(np.array([0, 1, 2, 5]))
    assert selector.step_skipped_easy + selector.step_skipped_hard == int(np.isin(
        kinds, (OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT)).sum())
