"""The warm start's accuracy band: where it stops, what it caches, and how it fails."""

import os
import re

import jax
import numpy as np
import pytest
import trainer_config
from flax import nnx

from greso_jax.run import build
from greso_jax.data import arith
from greso_jax.data.arith import solution_text as arith_solution
from greso_jax.data.sources import load_source
from greso_jax.models import PRESETS, init_model
from greso_jax.parallel import make_mesh
from greso_jax.run.build import build_policy, build_tokenizer
from greso_jax.run.warmstart import (AccuracyBand, WarmStartError, cached_warmstart, draw_batch_rows, pack_examples,
                                 supervised_train)

CFG = PRESETS["tiny-test"].replace(num_layers=1)
PAIRS = [([1, 2, 3], [4, 5]), ([2, 3], [6, 7, 8]), ([3, 1], [5])]  # (prompt, target) token ids


def _scripted(accuracies):
    """A measure that returns `accuracies` in order, one per check, and counts its calls."""
    calls = []

    def measure(model):
        calls.append(model)
        return accuracies[len(calls) - 1]

    return measure, calls


def _warmstart(cache_dir, band, steps=30):
    return cached_warmstart(init_model(CFG, seed=0), PAIRS, cache_dir=str(cache_dir), eos_id=9, pad_id=0, width=8,
                            steps=steps, batch_size=2, learning_rate=1e-2, seed=0, band=band, log=lambda *a: None)


def _params(model):
    return jax.tree.leaves(nnx.state(model, nnx.Param))


def _published(cache_dir):
    return sorted(p for p in os.listdir(cache_dir) if os.path.exists(os.path.join(cache_dir, p, "warmstart.json")))


@pytest.mark.slow  # three warm starts, each compiling its training step (~15-25 s)
def test_band_stops_at_the_first_check_reaching_low_and_is_reused_only_with_its_key(tmp_path):
    measure, calls = _scripted([0.1, 0.2, 0.3, 0.4])
    band = AccuracyBand(low=0.25, high=0.35, check_every=3, measure=measure, settings={"rows": "r"})
    model, record = _warmstart(tmp_path, band)
    assert len(calls) == 3 and record["steps"] == 9 and record["accuracy"] == 0.3
    assert record["trace"] == [(3, 0.1), (6, 0.2), (9, 0.3)]
    (folder,) = _published(tmp_path)

    # The same key is read back without training or measuring: same weights, same record.
    never, _ = _scripted([])
    reused, again = _warmstart(tmp_path, AccuracyBand(0.25, 0.35, 3, never, {"rows": "r"}))
    assert again["steps"] == 9 and again["accuracy"] == 0.3 and again["trace"] == [[3, 0.1], [6, 0.2], [9, 0.3]]
    for a, b in zip(_params(model), _params(reused)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    # Another band is another key: it trains (and measures) its own folder.
    measure, calls = _scripted([0.2, 0.3])
    _, record = _warmstart(tmp_path, AccuracyBand(0.15, 0.35, 3, measure, {"rows": "r"}))
    assert len(calls) == 1 and record["steps"] == 3
    assert len(_published(tmp_path)) == 2 and folder in _published(tmp_path)


def test_the_stop_keeps_the_weights_a_longer_run_had_at_that_step(tmp_path):
    """Deterministic, and the schedule spans the maximum: the band's weights are a 30-step run's at step 8."""
    measure, _ = _scripted([0.0, 0.5])
    banded, record = _warmstart(tmp_path, AccuracyBand(0.4, 0.6, 4, measure, {}), steps=30)
    assert record["steps"] == 8
    model = init_model(CFG, seed=0)
    assert not all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(_params(banded), _params(model)))
    ids, mask = pack_examples(PAIRS, 9, 0, 8)
    losses = supervised_train(model, ids, mask, steps=30, batch_size=2, learning_rate=1e-2, seed=0,
                              stop=lambda model, step: step == 8)
    assert len(losses) == 8
    for a, b in zip(_params(banded), _params(model)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("accuracies,field", [([0.1, 0.5], "train.warmstart_accuracy_high"),
                                              ([0.5], "train.warmstart_accuracy_high"),
                                              ([0.1, 0.2, 0.1], "train.warmstart_steps")])
def test_a_warm_start_outside_the_band_fails_naming_the_field_and_caches_nothing(tmp_path, accuracies, field):
    measure, calls = _scripted(accuracies)
    with pytest.raises(WarmStartError, match=rf"^{re.escape(field)}:") as error:
        _warmstart(tmp_path, AccuracyBand(0.25, 0.35, 3, measure, {}), steps=10)
    assert len(calls) == len(accuracies)
    assert f"{3 * len(accuracies)}: {accuracies[-1]:.3f}" in str(error.value)  # the trace of the checks
    assert _published(tmp_path) == []


def _arith_config(**train):
    c = trainer_config.get_config("greso")
    c.data.arith_num_train = 40
    c.train.warmstart_steps, c.train.warmstart_learning_rate = 20, 3e-3
    c.train.warmstart_validation_rows, c.train.warmstart_validation_samples = 8, 1
    c.train.update(train)
    d = c.data
    rows = load_source(source=d.source, arith_num_train=d.arith_num_train, arith_num_heldout=d.arith_num_heldout,
                       arith_seed=d.arith_seed)
    return c, rows


def test_build_policy_samples_the_first_training_rows_and_reports_where_it_stopped(tmp_path, monkeypatch):
    c, rows = _arith_config(warmstart_accuracy_low=0.3, warmstart_accuracy_high=0.6, warmstart_check_every=5,
                            warmstart_cache_dir=str(tmp_path / "shared"))
    graded = []

    def sample_and_grade(model, tokenizer, validation, settings, **kwargs):
        graded.append((list(validation), settings))
        return np.arange(8)[:, None] < 2 * len(graded)  # 2/8, then 4/8 correct

    monkeypatch.setattr(build, "sample_and_grade", sample_and_grade)
    report = {}
    build_policy(c, build_tokenizer(c), rows, str(tmp_path / "run"), make_mesh(1, 1, 1), log=lambda *a: None,
                 report=report)
    assert report == {"warmstart/steps": 10, "warmstart/accuracy": 0.5}
    assert all(validation == rows[:8] for validation, _ in graded) and len(graded) == 2
    band = graded[0][1]  # the band's own sampling: one response per row at temperature 1, top-p 1
    assert (band.num_samples, band.temperature, band.top_p) == (1, 1.0, 1.0)
    assert band.max_new_tokens == c.sampling.max_new_tokens and band.seed == c.seed + 1_000_003
    assert len(_published(tmp_path / "shared")) == 1 and not (tmp_path / "run").exists()

    # A second run with the band (another workdir, the shared cache) reuses it without measuring.
    report = {}
    build_policy(c, build_tokenizer(c), rows, str(tmp_path / "run2"), make_mesh(1, 1, 1), log=lambda *a: None,
                 report=report)
    assert report == {"warmstart/steps": 10, "warmstart/accuracy": 0.5} and len(graded) == 2


def _record_warmstart(monkeypatch, correct):
    """Records the validation rows each band check grades (graded by `correct(rows)` -> bool [R, 1])
    and the supervised pairs each warm start is given; returns (graded, taught)."""
    graded, taught = [], []

    def sample_and_grade(model, tokenizer, validation, settings, **kwargs):
        graded.append(list(validation))
        return correct(validation)

    def spy(model, pairs, **kwargs):
        taught.append(pairs)
        return cached_warmstart(model, pairs, **kwargs)

    monkeypatch.setattr(build, "sample_and_grade", sample_and_grade)
    monkeypatch.setattr(build, "cached_warmstart", spy)
    return graded, taught


def test_warmstart_levels_teach_and_check_only_those_levels(tmp_path, monkeypatch):
    c, rows = _arith_config(warmstart_levels=(0, 1), warmstart_accuracy_low=0.3, warmstart_accuracy_high=0.6,
                            warmstart_check_every=10)
    # About half right: inside the band.
    graded, taught = _record_warmstart(monkeypatch, lambda rows: np.arange(len(rows))[:, None] % 2 == 0)
    tokenizer = build_tokenizer(c)
    build_policy(c, tokenizer, rows, str(tmp_path), make_mesh(1, 1, 1), log=lambda *a: None)
    assert graded == [[row for row in rows[:8] if row.difficulty in (0, 1)]] and graded[0]
    expected = [row for row in rows[8:] if row.difficulty in (0, 1)]
    assert 0 < len(expected) < len(rows) - 8  # the pool has other levels, left out
    assert [tokenizer.decode(target) for _, target in taught[0]] == [arith_solution(row) for row in expected]


def test_band_levels_check_a_subset_of_the_taught_levels(tmp_path, monkeypatch):
    c, rows = _arith_config(warmstart_levels=(0, 1, 2), warmstart_band_levels=(0,), warmstart_accuracy_low=0.3,
                            warmstart_check_every=10)
    graded, taught = _record_warmstart(monkeypatch, lambda rows: np.ones((len(rows), 1), bool))
    build_policy(c, build_tokenizer(c), rows, str(tmp_path), make_mesh(1, 1, 1), log=lambda *a: None)
    assert graded == [[row for row in rows[:8] if row.difficulty == 0]] and graded[0]
    assert len(taught[0]) == sum(row.difficulty in (0, 1, 2) for row in rows[8:])


def test_level_weights_set_each_levels_share_of_the_supervised_draws(tmp_path, monkeypatch):
    c, rows = _arith_config(warmstart_level_weights=(3, 1, 0, 0, 0, 0, 0, 0))
    drawn = []

    def spy(model, pairs, **kwargs):
        drawn.append(kwargs["row_weights"])
        return cached_warmstart(model, pairs, **kwargs)

    monkeypatch.setattr(build, "cached_warmstart", spy)
    build_policy(c, build_tokenizer(c), rows, str(tmp_path), make_mesh(1, 1, 1), log=lambda *a: None)
    levels = np.array([row.difficulty for row in rows])
    assert {0, 1} < set(levels)  # other levels are in the pool, and get no draws
    weights = drawn[0]
    assert weights.shape == (len(rows),) and weights.sum() == pytest.approx(1.0)
    assert weights[levels == 0].sum() == pytest.approx(0.75) and weights[levels == 1].sum() == pytest.approx(0.25)
    assert np.ptp(weights[levels == 0]) == 0  # rows alike within a level


def test_num_problems_supervise_on_a_pool_apart_from_the_training_and_held_out_problems(tmp_path, monkeypatch):
    c, rows = _arith_config(warmstart_num_problems=30, warmstart_accuracy_low=0.3, warmstart_check_every=10)
    graded, taught = _record_warmstart(monkeypatch, lambda rows: np.ones((len(rows), 1), bool))
    tokenizer = build_tokenizer(c)
    build_policy(c, tokenizer, rows, str(tmp_path), make_mesh(1, 1, 1), log=lambda *a: None)
    d = c.data
    apart = arith.make_apart_pool(30, d.arith_num_train, d.arith_num_heldout, d.arith_seed)
    assert graded == [apart[:8]]  # the band checks its own pool's first rows
    assert [tokenizer.decode(target) for _, target in taught[0]] == [arith_solution(row) for row in apart[8:]]
    _, heldout = arith.make_arith_pools(d.arith_num_train, d.arith_num_heldout, d.arith_seed)
    assert not {row.question for row in apart} & {row.question for row in rows + heldout}


def test_batch_rows_are_uniform_without_weights_and_follow_them_with():
    uniform = draw_batch_rows(np.random.default_rng(5), 10, 64, None)
    np.testing.assert_array_equal(uniform, np.random.default_rng(5).integers(0, 10, 64))  # the unweighted stream
    weights = np.array([0.75, 0.25] + [0.0] * 8)
    rng = np.random.default_rng(5)
    drawn = np.concatenate([draw_batch_rows(rng, 10, 64, weights) for _ in range(50)])
    assert set(drawn) == {0, 1} and abs((drawn == 0).mean() - 0.75) < 0.03


@pytest.mark.slow  # real sampled checks on a training warm start
def test_an_unreachable_band_fails_after_real_sampled_checks(tmp_path):
    c, rows = _arith_config(warmstart_accuracy_low=0.99, warmstart_check_every=10)
    with pytest.raises(WarmStartError, match=r"^train\.warmstart_steps: 20 supervised steps ended below "
                                             r"train\.warmstart_accuracy_low=0\.99 \(validation accuracy by step: "
                                             r"10: 0\.\d{3}, 20: 0\.\d{3}\)"):
        build_policy(c, build_tokenizer(c), rows, str(tmp_path), make_mesh(1, 1, 1), log=lambda *a: None)
    assert not (tmp_path / "warmstart").exists() or _published(tmp_path / "warmstart") == []


def test_a_damaged_cache_is_trained_again_and_replaced_never_loaded(tmp_path):
    first, _ = _warmstart(tmp_path, None, steps=5)
    (folder,) = _published(tmp_path)
    weights = os.path.join(tmp_path, folder, "model.safetensors")
    with open(weights, "r+b") as f:  # eight flipped bytes in the tensor data, the header intact
        f.seek(os.path.getsize(weights) - 64)
        data = bytearray(f.read(8))
        f.seek(os.path.getsize(weights) - 64)
        f.write(bytes(b ^ 0xFF for b in data))
    lines = []
    again, record = cached_warmstart(init_model(CFG, seed=0), PAIRS, cache_dir=str(tmp_path), eos_id=9, pad_id=0,
                                     width=8, steps=5, batch_size=2, learning_rate=1e-2, seed=0, log=lines.append)
    assert any(f"{folder} is damaged (model.safetensors: content differs" in line for line in lines), lines
    assert record["steps"] == 5 and "files" not in record
    for a, b in zip(_params(first), _params(again)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert any(name.startswith(folder + ".damaged-") for name in os.listdir(tmp_path))  # kept aside
    lines.clear()
    cached_warmstart(init_model(CFG, seed=0), PAIRS, cache_dir=str(tmp_path), eos_id=9, pad_id=0, width=8, steps=5,
                     batch_size=2, learning_rate=1e-2, seed=0, log=lines.append)
    assert any("reusing" in line for line in lines), lines  # the rebuilt folder verifies
