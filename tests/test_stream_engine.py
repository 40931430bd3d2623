"""The lane engine (sampling.stream): a lane's samples are the plain sampler's for that prompt and key,
whatever the other lanes hold and whenever the prompt was admitted."""

import jax
import numpy as np
import pytest

from greso_jax.models import PRESETS, init_model
from greso_jax.sampling import generate
from greso_jax.sampling.stream import LaneEngine

G, CAP, EOS = 4, 12, 3


@pytest.fixture(autouse=True)
def full_precision_matmuls():
    with jax.default_matmul_precision("highest"):
        yield


@pytest.fixture(scope="module")
def model():
    model = init_model(PRESETS["tiny-test"], seed=0)
    model.lm_head[...] = model.lm_head[...] * 4.0  # peaked, so EOS comes early for some rows
    return model


def _prompts(n):
    rng = np.random.default_rng(1)
    return [rng.integers(4, 60, int(rng.integers(2, 15))).tolist() for _ in range(n)]


def test_lane_samples_equal_the_plain_sampler(model):
    prompts = _prompts(7)
    keys = [jax.random.fold_in(jax.random.PRNGKey(5), i) for i in range(len(prompts))]
    budgets = [CAP, 5, CAP, 8, CAP, 2, CAP]
    engine = LaneEngine(model, lanes=3, num_samples=G, prompt_length=16, max_new_tokens=CAP, temperature=1.0,
                        eos_ids=(EOS,), pad_id=0, chunk_steps=4, refill_at=2)
    assert engine.admit_batch == 2  # admissions prefilled two at a time, one padded when a single lane waits
    waiting, collected, lane_of = list(range(len(prompts))), {}, {}
    while waiting or engine.busy() or engine.finished():
        for lane in engine.finished():
            collected[lane_of.pop(lane)] = engine.collect(lane)
        for lane in np.flatnonzero(engine.free).tolist():
            if waiting:
                i = waiting.pop(0)
                engine.admit(lane, prompts[i], keys[i], budgets[i])
                lane_of[lane] = i
        engine.advance()
    assert sorted(collected) == list(range(len(prompts)))
    ended_early = 0
    for i, out in collected.items():
        plain = generate(model, [prompts[i]], num_samples=G, max_new_tokens=budgets[i], max_new_tokens_cap=CAP,
                         rng=keys[i], temperature=1.0, eos_ids=(EOS,), pad_id=0)
        np.testing.assert_array_equal(out.lengths, plain.lengths)
        np.testing.assert_array_equal(out.truncated, plain.truncated)
        np.testing.assert_array_equal(out.tokens, plain.tokens)
        np.testing.assert_allclose(out.logprobs, plain.logprobs, atol=1e-5)
        assert out.prompts == [prompts[i]] and out.num_samples == G
        ended_early += int((~out.truncated & (out.lengths < budgets[i])).sum())
    assert ended_early > 0  # some rows met EOS before their budget: lanes were refilled mid-stream
    assert 0 < engine.busy_row_steps < engine.decoded_row_steps


def test_abort_frees_a_lane_and_counts_its_tokens(model):
    engine = LaneEngine(model, lanes=2, num_samples=G, prompt_length=16, max_new_tokens=CAP, eos_ids=(),
                        chunk_steps=3)
    engine.admit(0, _prompts(1)[0], jax.random.PRNGKey(0))
    assert engine.advance() == 3
    assert engine.abort(0) == G * 4  # the first token at admission, then three steps
    assert engine.free.all() and not engine.busy()
    with pytest.raises(ValueError, match="not finished"):
        engine.collect(1)


def test_a_lane_refilled_before_the_next_chunk_reports_its_new_prompt(model):
    # Collection reads a host copy of the lanes fetched with the chunk; an admission since then (prefilled at
    # the next collect or advance) must not be read from that copy.
    engine = LaneEngine(model, lanes=2, num_samples=G, prompt_length=16, max_new_tokens=CAP, eos_ids=(),
                        chunk_steps=3)
    engine.admit(0, _prompts(1)[0], jax.random.PRNGKey(0))
    engine.admit(1, _prompts(2)[1], jax.random.PRNGKey(1))
    engine.advance()
    assert engine.abort(0) == G * 4
    engine.admit(0, _prompts(3)[2], jax.random.PRNGKey(2))
    assert engine.abort(0) == G  # only the first token drawn at admission, not the old prompt's four
    assert engine.abort(1) == G * 4
