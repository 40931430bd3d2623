"""Sharding invariance: on 8 simulated CPU devices, data / fsdp / tensor meshes (and the bucketed update layout) give the one-device parameters."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax
    import numpy as np
    from flax import nnx
    from greso_jax.config import get_config
    from greso_jax.run.build import learner_from_config
    from greso_jax.models import PRESETS, init_model
    from greso_jax.parallel import make_mesh
    from greso_jax.rl import make_train_batch

    assert len(jax.devices()) == 8, jax.devices()
    rng = np.random.default_rng(0)
    rows, max_response = 16, 6
    prompts = [list(rng.integers(1, 64, rng.integers(2, 5))) for _ in range(rows)]
    batches = [make_train_batch(prompts, rng.integers(1, 64, (rows, max_response)),
                                rng.integers(1, max_response + 1, rows), rng.normal(-4.2, 0.3, (rows, max_response)),
                                rng.normal(size=rows), pad_id=0, total_length=12) for _ in range(2)]
    config = get_config()
    config.sampling.max_new_tokens = max_response
    # Adam normalises each element's gradient, so rounding noise on an element whose gradient is
    # ~1e-8 (cancellation) moves it by up to ~1e-2 x lr whatever the mesh; 2e-4 keeps that under the
    # tolerance. Adam is also blind to a gradient's scale, so the metrics (loss, grad norm) are
    # compared too: they catch a wrong cross-device reduction.
    config.train.learning_rate = 2e-4
    config.rl.micro_batch_size = 8
    config.rl.kl_coef = 0.05
    config.rl.loss_aggregation = "seq-mean-token-mean"

    def train(mesh, layout="padded"):
        config.rl.update_layout = layout
        learner = learner_from_config(init_model(PRESETS["tiny-test"], seed=0), config, mesh)
        metrics = [learner.update(batch, num_minibatches=1) for batch in batches]
        state = nnx.state(learner.model, nnx.Param)
        specs = {k: str(v.sharding.spec) for k, v in (("q_kernel", state["layers"][0]["attn"]["q_kernel"].value),)}
        specs["metrics"] = [{k: m[k] for k in COMPARED} for m in metrics]
        return jax.device_get(state.to_pure_dict()), specs

    COMPARED = ("actor/loss", "actor/pg_loss", "actor/kl", "actor/entropy", "actor/grad_norm")
    reference, reference_specs = train(make_mesh(1, 1, 1, devices=jax.devices()[:1]))
    result = {}
    for name, axes, layout in (("data=8", (8, 1, 1), "padded"), ("data=2,fsdp=4", (2, 4, 1), "padded"),
                               ("data=2,fsdp=2,tensor=2", (2, 2, 2), "padded"),
                               ("data=2,fsdp=4 bucketed", (2, 4, 1), "bucketed")):
        params, specs = train(make_mesh(*axes), layout)
        diff = max(float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(reference), jax.tree.leaves(params)))
        metric_diff = max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-6) for a, b in
                          zip(reference_specs["metrics"], specs["metrics"]) for k in COMPARED)
        result[name] = {"max_abs_diff": diff, "metrics_max_rel_diff": metric_diff, "q_kernel_spec": specs["q_kernel"]}
    initial = jax.device_get(nnx.state(init_model(PRESETS["tiny-test"], seed=0), nnx.Param).to_pure_dict())
    result["moved"] = max(float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(reference),
                                                                    jax.tree.leaves(initial)))
    print("RESULT " + json.dumps(result))
""")


@pytest.mark.slow
def test_meshes_give_the_single_device_parameters_after_two_updates():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=root, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT "):])
    assert result.pop("moved") > 1e-4  # 20x the tolerance
    assert "fsdp" in result["data=2,fsdp=4"]["q_kernel_spec"]
    assert "tensor" in result["data=2,fsdp=2,tensor=2"]["q_kernel_spec"]
    for mesh, r in result.items():
        assert r["max_abs_diff"] <= 1e-5, (mesh, r)
        assert r["metrics_max_rel_diff"] <= 1e-5, (mesh, r)
