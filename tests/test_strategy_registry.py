"""A strategy is one registered module: a toy strategy defined and registered in this file alone validates,
gets its own config section and runs a trainer step; the registries enumerate what is registered."""

import dataclasses
import pathlib

import numpy as np
import pytest

from greso_jax.config import get_config, selection_field_docs, validate
from greso_jax.selection import (STRATEGIES, Selector, StrategySettings, make_selector, training_strategies)
from greso_jax.core.specs import INT, ConfigError, Spec, field
from greso_jax.run.trainer import Trainer

import trainer_config


@dataclasses.dataclass(frozen=True)
class ParitySettings(StrategySettings):
    """`selection.parity.*`: which prompt ids the toy strategy rolls out."""

    keep_remainder: int = field(0, Spec(INT, 0, 1), "roll out prompts whose id % 2 equals this")


class ParitySelector(Selector):
    """Toy strategy: rolls out only prompts of one id parity (pre-rollout), trains on every group."""

    strategy = "parity"
    Settings = ParitySettings

    def __init__(self, num_prompts, *, keep_remainder=0, **common):
        super().__init__(num_prompts, **common)
        self.keep_remainder = ParitySettings(keep_remainder).checked("selection.parity").keep_remainder
        self.observed_ids: list[int] = []

    def should_keep(self, prompt_ids, epochs=None):
        return np.asarray(prompt_ids) % 2 == self.keep_remainder

    def observe_groups(self, groups):
        self.observed_ids += [g.prompt_id for g in groups]
        super().observe_groups(groups)


@pytest.fixture
def parity_registered():
    with STRATEGIES.temporarily("parity", ParitySelector):
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
    start = readme.index("# greso_jax/selection/skip_solved.py")
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
