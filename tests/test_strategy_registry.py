"""A strategy is one registered module: toy strategies defined and registered in this file alone validate,
get their own config section, train, run in the simulator and the predictor replay; a launch checks
each strategy setting once; the registries enumerate what is registered."""

import collections
import dataclasses
import json
import pathlib

import numpy as np
import pytest

from greso_jax.config import get_config, selection_field_docs, validate
from greso_jax.core import specs
from greso_jax.core.specs import FLOAT, INT, ConfigError, Spec, field
from greso_jax.run.trainer import Trainer
from greso_jax.selection import (OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, STRATEGIES, FilteringSelector, PassConfig,
                                 Selector, StrategySettings, make_selector, training_strategies)
from greso_jax.selection import base as selection_base
from greso_jax.selection import replay, sim

import trainer_config


@dataclasses.dataclass(frozen=True)
class ParitySettings(StrategySettings):
    """`selection.parity.*`: which prompt ids the toy strategy rolls out."""

    keep_remainder: int = field(0, Spec(INT, 0, 1), "roll out prompts whose id % 2 equals this")


class ParitySelector(Selector):
    """Toy strategy: rolls out only prompts of one id parity (pre-rollout), trains on every group."""

    strategy = "parity"
    Settings = ParitySettings

    def __init__(self, num_prompts, **common):
        super().__init__(num_prompts, **common)
        self.observed_ids: list[int] = []

    def should_keep(self, prompt_ids, epochs=None):
        return np.asarray(prompt_ids) % 2 == self.settings.keep_remainder

    def observe_groups(self, groups):
        self.observed_ids += [g.prompt_id for g in groups]
        super().observe_groups(groups)


@dataclasses.dataclass(frozen=True)
class RepeatSettings(StrategySettings):
    """`selection.repeat.*`: the toy predictor's keep rule."""

    keep: float = field(0.25, Spec(FLOAT, 0, 1), "keep probability of a prompt whose last group was zero-variance")


class RepeatSelector(FilteringSelector):
    """Toy predictor: a prompt whose last group was zero-variance is predicted zero-variance again (chance
    0.9, else 0.1) and kept with probability `keep`; one knob, the share kept last step."""

    strategy = "repeat"
    Settings = RepeatSettings
    knobs = ("kept_share",)

    def __init__(self, num_prompts, **common):
        super().__init__(num_prompts, **common)
        self.kept_share = 1.0

    def predicted_zero_variance(self, prompt_ids):
        last = self.last_outcomes(prompt_ids)
        return np.where((last == OUTCOME_ALL_CORRECT) | (last == OUTCOME_ALL_INCORRECT), 0.9, 0.1)

    def should_keep(self, prompt_ids, epochs=None):
        ids = np.asarray(prompt_ids, np.int64)
        draws = self.occurrence_uniforms(ids, epochs, stream=1000)
        return (self.predicted_zero_variance(ids) < 0.5) | (draws < self.settings.keep)

    def _adapt(self):
        considered = self.step_groups + self.step_skipped_easy + self.step_skipped_hard
        self.kept_share = self.step_groups / considered if considered else 1.0


@pytest.fixture
def parity_registered():
    with STRATEGIES.temporarily("parity", ParitySelector):
        yield


@pytest.fixture
def repeat_registered():
    with STRATEGIES.temporarily("repeat", RepeatSelector):
        yield


def test_registered_strategy_gets_a_validated_config_section(parity_registered):
    assert "parity" in training_strategies()
    config = get_config()
    assert config.selection.parity.keep_remainder == 0
    config.selection.strategy = "parity"
    validate(config)
    config.selection.parity.keep_remainder = 2
    with pytest.raises(ConfigError, match=r"^selection\.parity\.keep_remainder:"):
        validate(config)
    assert ("selection.parity.keep_remainder", 0, "roll out prompts whose id % 2 equals this") in \
        selection_field_docs()


def test_registered_strategy_runs_a_trainer_step(parity_registered, tmp_path):
    config = trainer_config.get_config("parity")
    config.selection.parity.keep_remainder = 1
    config.train.num_steps = 1
    trainer = Trainer(config, str(tmp_path), log=lambda *a: None)
    metrics = trainer.train_step(1)
    assert metrics["train/groups"] == config.train.train_batch_size
    assert trainer.selector.observed_ids and all(i % 2 == 1 for i in trainer.selector.observed_ids)


def test_a_toy_predictor_validates_trains_simulates_and_replays_with_no_other_edit(repeat_registered, tmp_path):
    config = get_config()
    config.selection.strategy = "repeat"
    config.selection.repeat.keep = 1.5
    with pytest.raises(ConfigError, match=r"^selection\.repeat\.keep:"):
        validate(config)

    config = trainer_config.get_config("repeat")
    config.train.num_steps = 2
    config.logging.group_trace = True
    summary = Trainer(config, str(tmp_path / "run"), log=lambda *a: None).run()
    assert summary["strategy"] == "repeat"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["selection/repeat/kept_share"] for r in records[1:]][0] == 1.0  # nothing to skip in step 1
    assert (tmp_path / "run" / "plots" / "strategy_knobs.png").exists()

    settings = sim.SimSettings(num_prompts=300, steps=12, train_batch_size=16, rollout_batch_size=24, min_pass_size=8)
    runs = sim.all_runs(settings)
    assert runs["repeat"]["predicts"] and runs["repeat"]["calibration"]  # a chance predictor: calibrated
    assert runs["repeat"]["effective_prompts"] == 12 * 16 and 0 < runs["repeat"]["knobs"]["kept_share"] <= 1

    trace = [json.loads(line) for line in (tmp_path / "run" / "groups.jsonl").read_text().splitlines()]
    replayed = replay.replay(trace, np.full(24, -1), config.rl.group_size)
    assert "repeat" in replayed and replayed["repeat"]["probability"]
    assert replayed["repeat"]["scores"].size == replayed["hindsight"]["scores"].size > 0


def test_a_launch_checks_each_strategy_setting_once(tmp_path, monkeypatch):
    """validate checks every strategy setting and the pass sizing; the selector built from the validated
    config does not check them again (formerly five times: validate, its throwaway selector, the
    settings read twice, the constructor)."""
    counts = collections.Counter()
    check_field = specs.check_field

    def counted(name, value, spec):
        counts[name] += 1
        check_field(name, value, spec)

    for module in (specs, selection_base):
        monkeypatch.setattr(module, "check_field", counted)
    monkeypatch.setattr("greso_jax.config.validation.check_field", counted)
    config = trainer_config.get_config("greso")
    config.train.num_steps = 2
    Trainer(config, str(tmp_path), log=lambda *a: None).run()
    assert counts["selection.greso.delta_p"] == 1
    assert {f"selection.{f.name}": counts[f"selection.{f.name}"] for f in dataclasses.fields(PassConfig)} == \
        {f"selection.{f.name}": 1 for f in dataclasses.fields(PassConfig)}
    assert counts["rl.group_size"] == 1


def test_unregistered_names_and_simulation_only_strategies_are_refused():
    assert "parity" not in STRATEGIES
    with pytest.raises(ValueError, match="unknown selection strategy 'parity'"):
        make_selector("parity", num_prompts=4, group_size=2, seed=0)
    config = get_config()
    config.selection.strategy = "oracle"
    with pytest.raises(ConfigError, match="simulation-only"):
        validate(config)


@pytest.mark.slow  # a trainer build and three steps (~20 s)
def test_the_readme_example_strategy_runs(tmp_path):
    """README's "Adding a strategy" example, taken from the README as written: it registers,
    gets its config section and runs trainer steps, so the example cannot silently rot."""
    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    start = readme.index("# greso_jax/selection/strategies/skip_solved.py")
    source = readme[start:readme.index("```", start)]
    namespace = {"__name__": "skip_solved_example"}
    try:
        exec(compile(source, "README.md", "exec"), namespace)
        config = trainer_config.get_config("skip_solved")
        config.selection.skip_solved.keep = 0.2
        trainer = Trainer(config, str(tmp_path), log=lambda *a: None)
        for step in (1, 2, 3):
            metrics = trainer.train_step(step)
            assert metrics["selection/passes"] >= 1
        assert isinstance(trainer.selector, namespace["SkipSolvedSelector"])
    finally:
        if "skip_solved" in STRATEGIES:
            STRATEGIES.unregister("skip_solved")
