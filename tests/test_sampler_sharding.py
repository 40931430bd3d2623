"""The sampler under a (data, fsdp, tensor) mesh of simulated CPU devices gives the single-device result."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r"""
import json
import jax
import numpy as np
from greso_jax.models import PRESETS, init_model, place_on_mesh
from greso_jax.parallel.sharding import make_mesh
from greso_jax.sampling import generate, lower_generate

assert jax.device_count() == 4
model = init_model(PRESETS["tiny-test"], seed=3)
prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10], [11, 12]] + [[13, 14, 15, 16]] * 2
kwargs = dict(num_samples=3, max_new_tokens=12, rng=jax.random.key(4), temperature=0.9, top_p=0.95,
              eos_ids=(7,), prompt_buckets=(16,), row_buckets=(24,))
single = generate(model, prompts, **kwargs)
budgets = [12, 2, 3, 12, 1, 5]
single_tail = generate(model, prompts, **dict(kwargs, max_new_tokens=budgets, max_new_tokens_cap=12))
report = {}
for name, axes in (("data2_fsdp2", (2, 2, 1)), ("data2_tensor2", (2, 1, 2))):
    mesh = make_mesh(*axes)
    sharded = generate(model, prompts, mesh=mesh, **kwargs)
    placed = generate(place_on_mesh(model, mesh), prompts, **kwargs)  # the mesh read from the parameters
    compiled = lower_generate(model, prompts, mesh=mesh, **kwargs).compile()
    # Compaction under the mesh: segments of 12, 6 and 4 rows (multiples of the data-parallel size 2).
    compacted = generate(model, prompts, mesh=mesh, min_compact_rows=4, **dict(kwargs, max_new_tokens=budgets,
                                                                               max_new_tokens_cap=12))
    # Refill under the mesh: four lanes (a multiple of the data-parallel size, 4 or 2), six prompts, the
    # drain compacted to 2 lanes under data2_tensor2 (under data2_fsdp2 no smaller multiple of 4 exists).
    refilled = generate(model, prompts, mesh=mesh, live_prompts=4, min_compact_rows=3,
                        **dict(kwargs, max_new_tokens=budgets, max_new_tokens_cap=12))
    report[name] = dict(
        tokens_equal=bool((sharded.tokens == single.tokens).all() and (placed.tokens == single.tokens).all()),
        logprob_diff=float(np.abs(sharded.logprobs - single.logprobs).max()),
        lengths_equal=bool((sharded.lengths == single.lengths).all()),
        prompt_rows=sharded.prompt_rows,
        compacted_equal=bool((compacted.tokens == single_tail.tokens).all()
                             and (compacted.lengths == single_tail.lengths).all()),
        compacted_logprob_diff=float(np.abs(compacted.logprobs - single_tail.logprobs).max()),
        refilled_equal=bool((refilled.tokens == single_tail.tokens).all()
                            and (refilled.lengths == single_tail.lengths).all()),
        refilled_rows=refilled.rows,
        refilled_logprob_diff=float(np.abs(refilled.logprobs - single_tail.logprobs).max()),
        prompt_ids_spec=str(compiled.input_shardings[0][1].spec),
        out_spec=str(compiled.output_shardings[0].spec),
    )
print(json.dumps(report))
"""


@pytest.mark.slow
def test_generate_under_a_mesh_matches_single_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
               PYTHONPATH=REPO)
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=REPO,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for name, r in report.items():
        assert r["tokens_equal"] and r["lengths_equal"], name
        assert r["logprob_diff"] <= 1e-5, name
        assert r["compacted_equal"] and r["compacted_logprob_diff"] <= 1e-5, name
        assert r["refilled_equal"] and r["refilled_logprob_diff"] <= 1e-5, name
        assert r["prompt_rows"] % 2 == 0, name  # prompt rows padded to a multiple of the data-parallel size
    assert report["data2_fsdp2"]["refilled_rows"] == report["data2_tensor2"]["refilled_rows"] == 4 * 3
    assert report["data2_fsdp2"]["prompt_ids_spec"] == "P(('data', 'fsdp'), None)"
    assert report["data2_fsdp2"]["out_spec"] == "P(('data', 'fsdp'), None)"
    assert report["data2_tensor2"]["prompt_ids_spec"] == "P(('data', 'fsdp'), None)"
