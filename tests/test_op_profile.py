"""Op profiles: HLO scopes, trace events and their breakdown, on synthetic input and on real traces."""

import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from greso_jax.core import op_profile
from greso_jax.core.op_profile import OTHER, OpEvent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HLO = """
HloModule jit_f, entry_computation_layout={(f32[8,8]{1,0})->f32[8,8]{1,0}}

%fused_computation.1 (param_0: f32[8,8]) -> f32[8,8] {
  %param_0 = f32[8,8]{1,0} parameter(0)
  ROOT %exponential.1 = f32[8,8]{1,0} exponential(%param_0), metadata={op_name="jit(f)/while/body/b/exp"}
}

%fused_computation.7 (param_0.1: f32[8,8]) -> f32[8] {
  %param_0.1 = f32[8,8]{1,0} parameter(0)
  %dot.8 = f32[8,8]{1,0} dot(%param_0.1, %param_0.1), metadata={op_name="jit(f)/a/dot_general"}
  %dot.9 = f32[8,4]{1,0} dot(%param_0.1, %param_0.1), metadata={op_name="jit(f)/b/dot_general"}
  ROOT %reduce.10 = f32[8]{0} reduce(%dot.8, %c), dimensions={1}, metadata={op_name="jit(f)/b/reduce_max"}
}

ENTRY %main (x: f32[8,8]) -> f32[8,8] {
  %x = f32[8,8]{1,0} parameter(0)
  %dot.3 = f32[8,8]{1,0} dot(%x, %x), lhs_contracting_dims={1}, metadata={op_name="jit(f)/a/dot_general"}
  %exp_fusion.2 = f32[8,8]{1,0} fusion(%dot.3), kind=kLoop, calls=%fused_computation.1, metadata={op_name="jit(f)/while/body/a/b/exp"}
  %multi.4 = (f32[8,8]{1,0}, /*index=1*/f32[8]{0}) fusion(%dot.3), kind=kLoop, calls=%c, metadata={op_name="jit(f)/a/reduce"}
  %while.5 = (s32[], f32[8,8]{1,0}) while(%t), condition=%cond, body=%body, metadata={op_name="jit(f)/a/while"}
  %ynn_fusion.11 = f32[8]{0} fusion(%x), kind=kCustom, calls=%fused_computation.7, metadata={op_name="jit(f)/b/reduce_max"}
  ROOT %copy.6 = f32[8,8]{1,0} copy(%exp_fusion.2)
}
"""


def test_hlo_scopes_take_the_innermost_wanted_scope_and_skip_control_flow():
    scopes = op_profile.hlo_op_scopes(HLO, ["a", "b"])
    assert scopes["dot.3"] == "a"
    assert scopes["exp_fusion.2"] == "b"  # a/b: the innermost
    assert scopes["multi.4"] == "a"  # a tuple shape with an index comment
    assert scopes["copy.6"] == OTHER  # no metadata
    assert "while.5" not in scopes  # its event spans its body's ops
    assert scopes["ynn_fusion.11"] == "a"  # named after its root (b), but most of its matmul output is a's
    assert op_profile.hlo_op_scopes(HLO, ["a"])["exp_fusion.2"] == "a"


def test_op_events_take_gpu_kernels_by_their_hlo_op_and_drop_unknown_names():
    events = [{"ph": "X", "name": "dot.3", "ts": 10, "dur": 5, "pid": 1, "tid": 7},
              {"ph": "X", "name": "volta_sgemm_128x64", "ts": 20, "dur": 4, "pid": 2, "tid": 1,
               "args": {"hlo_op": "exp_fusion.2", "hlo_module": "jit_f"}},
              {"ph": "X", "name": "ThunkExecutor::Execute", "ts": 0, "dur": 50, "pid": 1, "tid": 7},
              {"ph": "i", "name": "dot.3", "ts": 30, "pid": 1, "tid": 7}]
    found = op_profile.op_events(events, {"dot.3", "exp_fusion.2"})
    assert found == [OpEvent("dot.3", 10.0, 5.0, (1, 7)), OpEvent("exp_fusion.2", 20.0, 4.0, (2, 1))]


def test_breakdown_sums_op_time_and_measures_the_wall_covered():
    scope_of = {"p": "mlp", "q": "mlp", "r": "attention"}
    events = [OpEvent("p", 0, 10, "t0"), OpEvent("q", 5, 10, "t1"),  # overlapping on two lanes
              OpEvent("r", 20, 5, "t0"), OpEvent("p", 40, 10, "t1")]
    result = op_profile.breakdown(events, scope_of)
    assert result.op_us == {"mlp": 30.0, "attention": 5.0}
    assert result.running_us == {"mlp": 25.0, "attention": 5.0}
    assert result.events == {"mlp": 3, "attention": 1}
    assert (result.wall_us, result.busy_us, result.lanes) == (50.0, 30.0, 2)
    table = op_profile.format_breakdown(result, per=5, per_name="step")
    assert "| mlp | 0.006 | 0.005 | 50.0% | 3 |" in table, table  # 30 us of op time, 25 us running, over 5 steps
    assert "none 0.004 (40.0%)" in table, table
    with pytest.raises(ValueError, match="no op events"):
        op_profile.breakdown([], scope_of)


def test_breakdown_of_a_real_trace_finds_both_scopes(tmp_path):
    def program(x):
        with jax.named_scope("matmuls"):
            for _ in range(4):
                x = jnp.tanh(x @ x)
        with jax.named_scope("softmax"):
            return jax.nn.softmax(x * 3.0, axis=-1)

    f = jax.jit(program)
    x = jax.random.normal(jax.random.key(0), (256, 256))
    jax.block_until_ready(f(x))
    scope_of = op_profile.hlo_op_scopes(f.lower(x).compile().as_text(), ["matmuls", "softmax"])
    with jax.profiler.trace(str(tmp_path), create_perfetto_trace=True):
        jax.block_until_ready(f(x))
    result = op_profile.breakdown(op_profile.op_events(op_profile.load_trace_events(str(tmp_path)), scope_of),
                                  scope_of)
    assert result.op_us["matmuls"] > 0 and result.op_us["softmax"] > 0
    # XLA:CPU fuses the matmul chain and the softmax's max into one call named after the max: the
    # matmuls' time must still count as theirs.
    assert result.op_us["matmuls"] > result.op_us["softmax"]
    assert 0 < result.busy_us <= result.wall_us


def test_load_trace_events_names_the_folder_without_a_trace(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path))):
        op_profile.load_trace_events(str(tmp_path))


def test_decode_profile_attributes_the_decode_step():
    """experiments/bench/decode_profile.py at a tiny shape: every part of the decode step is found,
    and the ops outside the named parts are a small share of the op time."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "bench", "decode_profile.py"),
                          "--preset", "tiny", "--prompts", "2", "--group", "4", "--prompt_len", "8",
                          "--new_tokens", "16", "--top_p", "0.9"],
                         capture_output=True, text=True, check=True, cwd=ROOT, timeout=300).stdout
    rows = dict(re.findall(r"^\| (\w+) \| ([\d.]+) \|", out, re.M))
    for scope in ("prefill", "qkv_projection", "kv_cache_write", "attention", "out_projection", "mlp", "logits",
                  "token_draw"):
        assert float(rows[scope]) > 0, out
    assert float(rows.get(OTHER, 0)) < 0.5 * sum(float(ms) for ms in rows.values()), out
    assert "per decode step" in out and "lane(s)" in out
