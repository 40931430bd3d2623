"""GradingPool: order, dispatch by data source, worker crash / hang replacement, hostile
inputs in real workers, in-process mode, background submit."""

import os
import signal
import time

import numpy as np
import pytest

from greso_jax.rewards import math as grading
from greso_jax.rewards.pool import GradingPool, score_across_hosts


def crash_on_marker(response, gold, shaping, timeout_s):
    """A grader whose process dies on "CRASH" (stands in for a segfaulting native library)."""
    if "CRASH" in response:
        os._exit(3)
    return grading.grade(response, gold, shaping, timeout_s)


def hang_on_marker(response, gold, shaping, timeout_s):
    """A grader stuck where SIGALRM cannot reach on "HANG" (native code holding the signal)."""
    if "HANG" in response:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(60)
    return grading.grade(response, gold, shaping, timeout_s)


def timeout_on_marker(response, gold, shaping, timeout_s):
    """A grader that reports a deadline hit on "SLOW" without waiting for one."""
    if "SLOW" in response:
        return grading.Grade(0.0, False, "timeout")
    return grading.grade(response, gold, shaping, timeout_s)


def batch(n):
    responses = [f"\\boxed{{{i}}}" if i % 3 else f"\\boxed{{{i + 1}}}" for i in range(n)]
    golds = [str(i) for i in range(n)]
    expected = np.array([i % 3 != 0 for i in range(n)])
    return responses, golds, expected


@pytest.fixture(scope="module")
def pool():
    with GradingPool(num_workers=2, timeout_s=2.0) as shared:
        yield shared


def test_order_preserved_and_sources_dispatched(pool):
    responses, golds, expected = batch(40)
    responses += ["231;310", "231;301", "\\boxed{103}"]
    golds += ["103", "103", "103"]
    sources = ["math"] * 40 + ["arith", "arith", "arith"]
    expected = np.concatenate([expected, [False, True, False]])  # arith reads the last field, LSD first
    result = pool.score(responses, golds, sources)
    again = pool.submit(responses, golds, sources).result()
    np.testing.assert_array_equal(result.correct, expected)
    assert result.rewards.dtype == np.float32 and result.correct.dtype == np.bool_
    np.testing.assert_array_equal(result.rewards, expected.astype(np.float32))
    np.testing.assert_array_equal(again.correct, expected)
    assert (result.num_timeouts, result.num_crashes) == (0, 0)


def test_crashed_worker_is_replaced_and_batch_completes():
    responses, golds, expected = batch(12)
    responses[4] = "CRASH \\boxed{4}"
    responses[9] = "CRASH \\boxed{9}"
    expected[[4, 9]] = False
    with GradingPool(num_workers=1, timeout_s=2.0, grader=crash_on_marker) as crashing:
        result = crashing.score(responses, golds, ["math"] * 12)
        assert crashing.num_workers_replaced == 2
        followup = crashing.score(["\\boxed{1}"], ["1"], ["math"])  # the replacement works
    np.testing.assert_array_equal(result.correct, expected)
    assert result.num_crashes == 2 and result.num_timeouts == 0
    assert followup.correct.tolist() == [True]


def test_hung_worker_is_killed_and_counted_as_timeout():
    responses, golds, expected = batch(6)
    responses[2] = "HANG \\boxed{2}"
    expected[2] = False
    with GradingPool(num_workers=1, timeout_s=0.5, kill_grace_s=0.5, grader=hang_on_marker) as hanging:
        hanging.score(["\\boxed{0}"], ["0"], ["math"])  # wait for the worker to start
        start = time.monotonic()
        result = hanging.score(responses, golds, ["math"] * 6)
        elapsed = time.monotonic() - start
    np.testing.assert_array_equal(result.correct, expected)
    assert result.num_timeouts == 1 and result.num_crashes == 0
    assert elapsed < 30  # one deadline plus a respawn, not the 60 s hang


def test_adversarial_batch_in_workers(pool, tmp_path):
    canary = tmp_path / "canary"
    hostile = [
        "\\boxed{9^{9^{9^{9}}}}",
        "\\boxed{(10^{10})!}",
        "x" * 100_000,
        "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",
        f"\\boxed{{__import__('os').system('touch {canary}')}}",
        "\\boxed{" * 10_000,
        "\\boxed{2}",
    ]
    golds = ["1"] * 6 + ["2"]
    start = time.monotonic()
    result = pool.score(hostile, golds, ["math"] * len(hostile))
    elapsed = time.monotonic() - start
    assert result.correct.tolist() == [False] * 6 + [True]
    assert elapsed < 2.0 * len(hostile) + 15
    assert not canary.exists()


def test_in_process_mode_matches_workers():
    responses, golds, expected = batch(9)
    with GradingPool(num_workers=0, timeout_s=2.0, shaping="greso") as pool:
        result = pool.submit(responses, golds, ["math"] * 9).result()
    np.testing.assert_array_equal(result.correct, expected)
    np.testing.assert_allclose(result.rewards, np.where(expected, 1.0, 0.1))


def test_bad_arguments():
    with pytest.raises(ValueError, match="grading_workers"):
        GradingPool(num_workers=-1)
    with pytest.raises(ValueError, match="reward_shaping"):
        GradingPool(num_workers=0, shaping="dense")
    with GradingPool(num_workers=0) as in_process:
        with pytest.raises(ValueError, match="2 responses, 1 ground truths"):
            in_process.score(["a", "b"], ["1"], ["math", "math"])
    with pytest.raises(RuntimeError, match="closed"):
        in_process.score([], [], [])


def test_score_across_hosts_splits_the_rows_and_every_host_gets_all_results():
    """Two hosts, each with its own pool: host h grades rows h, h+2, ...; a fake allgather stacks
    what each host's call sent, as jax's process_allgather would."""
    responses, golds, expected = batch(7)
    responses[2], responses[5] = "SLOW \\boxed{2}", "SLOW \\boxed{5}"  # one failure on each host
    expected[2] = expected[5] = False
    responses += ["231;301"]
    golds += ["103"]
    sources = ["math"] * 7 + ["arith"]
    expected = np.append(expected, True)
    pools = [GradingPool(num_workers=0, grader=timeout_on_marker) for _ in range(2)]
    try:
        sent = {}

        def capture(host):
            def allgather(local):
                sent[host] = local.copy()
                return np.stack([local, local])  # placeholder: this first pass only records what is sent
            return allgather

        for host in range(2):
            score_across_hosts(pools[host], responses, golds, sources, process_index=host, process_count=2,
                               allgather=capture(host))
        assert sent[0].shape == sent[1].shape == (4, 3)
        gathered = np.stack([sent[0], sent[1]])
        results = [score_across_hosts(pools[host], responses, golds, sources, process_index=host, process_count=2,
                                      allgather=lambda local: gathered) for host in range(2)]
        single = score_across_hosts(pools[0], responses, golds, sources, process_index=0, process_count=1,
                                    allgather=lambda local: local[None])
    finally:
        for pool in pools:
            pool.close()
    for rewards, correct, failures in results + [single]:
        np.testing.assert_array_equal(correct, expected)
        np.testing.assert_array_equal(rewards, expected.astype(np.float32))
        assert rewards.dtype == np.float32 and correct.dtype == np.bool_ and failures == 2


def test_workers_of_a_parent_gone_before_they_started_exit_without_a_traceback():
    """A CLI stopped (SIGTERM, os._exit) while its pool spawns leaves workers that find no parent
    when they announce themselves: they must exit quietly, not print a BrokenPipeError traceback
    as the last line of the stopped CLI's stderr (they share it)."""
    import subprocess
    import sys

    script = ("import os\nfrom greso_jax.rewards.pool import GradingPool\n"
              "GradingPool(num_workers=2, timeout_s=1.0)\nos._exit(143)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 143
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
