"""experiments/bench/sampler.py end to end at a tiny shape: greso_jax on one device and over the host's
cores as data-parallel devices, against transformers.generate, in one run."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_sampler_benchmark_times_one_device_host_devices_and_transformers(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "bench", "sampler.py"),
                          "--preset", "tiny-test", "--prompts", "4", "--group", "2", "--prompt_len", "8",
                          "--new_tokens", "6", "--repeats", "1", "--response_chunks", "4", "--host_devices", "2",
                          "--tunix_python=", "--threads", "2", "--peak_size", "256", "--bandwidth_mib", "8",
                          "--workdir", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600,
                         env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert out.returncode == 0, out.stderr[-3000:]
    tokens_per_s = dict(re.findall(r"^(greso_jax|  x2 devices|transformers)\s+[\d.]+\s+(\d+)", out.stdout, re.M))
    assert set(tokens_per_s) == {"greso_jax", "  x2 devices", "transformers"}, out.stdout
    assert all(int(rate) > 0 for rate in tokens_per_s.values())
    assert "2 XLA CPU devices" in out.stdout
