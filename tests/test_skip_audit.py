"""The skip audit: a fraction of the prompts a strategy skipped is rolled out after the step, never
trained on and never shown to the strategy, to measure whether the skips were right."""

import os
import sys

import pytest

from greso_jax.configs import ConfigError, validate
from greso_jax.metrics import read_metrics
from greso_jax.trainer import Trainer

sys.path.insert(0, os.path.dirname(__file__))
import trainer_config  # noqa: E402


def _run(tmp_path, name, fraction):
    config = trainer_config.get_config("greso")  # untrained policy: every group all-incorrect (hard)
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
    assert all("audit/responses" not in r for r in plain)
    training = lambda r: {k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "audit/"))}  # noqa: E731
    assert [training(r) for r in audited] == [training(r) for r in plain]


def test_audit_fraction_is_checked():
    config = trainer_config.get_config("greso")
    config.eval.skip_audit_fraction = 1.5
    with pytest.raises(ConfigError, match="eval.skip_audit_fraction"):
        validate(config)
