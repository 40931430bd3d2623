"""Stream grading overlapped with decoding (`run.rollouts.StreamRollouts` over the real lane engine and
grading workers whose grader sleeps): the stream observes the same groups, scores and metrics whether
a chunk's grades are waited for at once or collected after the next chunk decoded, and, overlapped,
most of the grading time runs while the lanes decode."""

import os
import sys
import time
import zlib

import numpy as np
import pytest

from greso_jax.models import PRESETS, init_model
from greso_jax.rewards import math as grading
from greso_jax.rewards.pool import GradingPool
from greso_jax.run.build import build_tokenizer
from greso_jax.run.rollouts import StreamRollouts
from greso_jax.run.timers import SectionTimers
from greso_jax.selection import Carry, PulledPrompts, make_selector, run_stream_step

sys.path.insert(0, os.path.dirname(__file__))
import trainer_config  # noqa: E402

SLEEP_ENV = "GRESO_TEST_GRADE_SLEEP_S"  # read by the workers (spawned with the environment of their start)
G, LANES, PROMPTS, WORKERS, BATCH = 4, 4, 40, 4, 16


def slow_grader(response, gold, shaping, timeout_s):
    """Sleeps $GRESO_TEST_GRADE_SLEEP_S per response, as a slow symbolic check may; right for about a
    third of the texts."""
    time.sleep(float(os.environ.get(SLEEP_ENV, "0")))
    right = zlib.crc32(response.encode()) % 3 == 0
    return grading.Grade(float(right), right)


@pytest.fixture(scope="module")
def parts():
    """The model, tokenizer and prompts, and grading workers whose sleep makes a chunk's grading about a
    third of a chunk's decoding here (measured on a stream graded in-process), whatever the machine's speed."""
    tokenizer = build_tokenizer(trainer_config.get_config())
    model = init_model(PRESETS["tiny-test"], seed=0)
    payloads = [{"prompt_id": i, "prompt_tokens": np.asarray(tokenizer.encode(f"{i}+{7 * i}="), np.int32),
                 "ground_truth": str(8 * i), "data_source": "math"} for i in range(PROMPTS)]
    with GradingPool(num_workers=0, grader=slow_grader) as in_process:
        results, timers, _ = _stream((model, tokenizer, in_process, payloads), overlap=False)
    chunk_s = timers["time/rollout"] / sum(r.metrics["stream/chunks"] for r in results[1:])
    sleep_s = chunk_s / 3 * WORKERS / (LANES * G)  # no EOS to speak of: a chunk ends with all lanes finished
    os.environ[SLEEP_ENV] = repr(sleep_s)
    try:
        with GradingPool(num_workers=WORKERS, timeout_s=5.0, grader=slow_grader) as pool:
            yield model, tokenizer, pool, payloads, sleep_s
    finally:
        del os.environ[SLEEP_ENV]


def _stream(parts, overlap, steps=4):
    """Runs `steps` stream steps (the first one compiles, untimed); returns (results, timers, seconds)."""
    model, tokenizer, pool, payloads = parts[:4]
    timers = SectionTimers()
    rollouts = StreamRollouts(model, tokenizer, pool, timers, seed=0, lanes=LANES, num_samples=G, prompt_length=16,
                              max_new_tokens=32, chunk_steps=32, temperature=1.0, top_p=1.0, top_k=0,
                              payload_of=payloads.__getitem__, overlap_grading=overlap)
    selector = make_selector("dynamic_sampling", num_prompts=PROMPTS, group_size=G, seed=0)
    position = [0]

    def pull(n):
        ids = [(position[0] + i) % PROMPTS for i in range(n)]
        position[0] += n
        return PulledPrompts(np.array(ids, np.int64), [payloads[i] for i in ids], np.zeros(0, np.int64))

    results, carry, start = [], Carry(), 0.0
    for step in range(1, steps + 1):
        if step == 2:
            timers.reset()
            start = time.perf_counter()
        rollouts.begin_step(step)
        result, carry = run_stream_step(selector, step, pull_prompts=pull, backend=rollouts, train_batch_size=BATCH,
                                        max_responses=400, in_flight="abort", carry=carry)
        results.append(result)
    return results, timers.seconds, time.perf_counter() - start


def _summary(result):
    return ([(g.prompt_id, g.correct.tolist(), g.rewards.tolist()) for g in result.rolled_out],
            [g.prompt_id for g in result.groups], result.metrics)


def test_overlapped_grading_gives_the_same_stream_and_hides_grading_time(parts):
    at_once, at_once_timers, at_once_s = _stream(parts, overlap=False)
    overlapped, timers, seconds = _stream(parts, overlap=True)
    for a, b in zip(at_once, overlapped):
        assert _summary(a) == _summary(b)
        for g in a.groups:  # the same responses behind each group
            np.testing.assert_array_equal(a.handles[g.response_refs[0, 0]].tokens,
                                          b.handles[g.response_refs[0, 0]].tokens)
    assert sum(len(r.rolled_out) for r in overlapped) > 3 * LANES
    assert any(0 < np.mean([g.correct.mean() for g in r.rolled_out]) < 1 for r in overlapped)
    responses = sum(r.metrics["rollout/step_responses"] for r in overlapped[1:])
    graded = timers["time/reward_graded"]
    assert graded >= responses * parts[4] / WORKERS  # the workers sleep for each response
    print(f"graded {graded:.3f} s, hidden overlapped {timers['time/reward_hidden']:.3f} s / at once "
          f"{at_once_timers['time/reward_hidden']:.3f} s; steps {seconds:.3f} s overlapped, {at_once_s:.3f} s at "
          f"once; rollout {timers['time/rollout']:.3f} s")
    assert at_once_timers["time/reward_hidden"] < 0.1 * at_once_timers["time/reward_graded"]
    assert timers["time/reward_hidden"] > 0.3 * graded
    # Below what the same work costs when grading waits: decoding plus grading, less a generous 30% of the grading.
    assert timers["time/reward"] < 0.7 * graded  # the main thread waited for less than the grading took
    assert at_once_timers["time/reward"] >= 0.9 * at_once_timers["time/reward_graded"]
    # Below what the same work costs with grading waited for: decoding plus grading (generous: any overlap).
    assert seconds < timers["time/rollout"] + graded
