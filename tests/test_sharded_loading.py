"""Sharded loading on 8 simulated CPU devices (subprocess: the device count is fixed at JAX start-up)."""

import os
import subprocess
import sys
import textwrap

from conftest import make_hf_checkpoint

SCRIPT = textwrap.dedent(r"""
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from flax import nnx
    from greso_jax.models import from_pretrained
    from greso_jax.parallel import make_mesh, logical_to_spec
    assert jax.device_count() == 8, jax.device_count()
    path = sys.argv[1]
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 97, (8, 10)), jnp.int32)
    mask = jnp.asarray(np.arange(10)[None] < np.array([10, 9, 8, 7, 6, 5, 4, 10])[:, None], jnp.int32)
    reference = np.asarray(from_pretrained(path)(ids, mask))
    for axes in [dict(data=1, fsdp=8, tensor=1), dict(data=1, fsdp=4, tensor=2)]:
        mesh = make_mesh(**axes)
        model = from_pretrained(path, mesh=mesh)
        checked = 0
        for p, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
            want = logical_to_spec(var.get_metadata()["logical_axes"], var.value.shape, mesh)
            assert var.value.sharding.spec == want, (p, var.value.sharding.spec, want)
            assert var.value.sharding.mesh.shape == mesh.shape
            checked += any(s is not None for s in want)
        assert checked > 0, "nothing was sharded"
        logits = np.asarray(jax.jit(lambda m, i, a: m(i, a))(model, ids, mask))
        err = np.max(np.abs(logits - reference))
        assert err <= 1e-5, (axes, err)
        print("ok", axes, err, checked)
""")


def test_fsdp_and_tensor_meshes_match_one_device(tmp_path):
    make_hf_checkpoint(tmp_path, hidden=64, inter=128, heads=4, kv_heads=2, tied=False)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok") == 2
