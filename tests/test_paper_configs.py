"""The GRESO paper configs: every variant loads and validates, carries the paper's numbers, and the
models' parameters shard over an fsdp=8 mesh (abstract build on 8 simulated devices, no allocation)."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from greso_jax.config import ConfigError, validate
from greso_jax.models import PRESETS

ROOT = os.path.join(os.path.dirname(__file__), "..")
PAPER_FILES = {  # file -> (preset, train batch, rollout batch, max prompt, max response)
    "qwen2_5_math_1_5b.py": ("qwen2.5-math-1.5b", 256, 384, 1536, 2560),
    "qwen2_5_math_7b.py": ("qwen2.5-math-7b", 256, 384, 1536, 2560),
    "r1_distill_qwen_1_5b.py": ("deepseek-r1-distill-qwen-1.5b", 128, 192, 2048, 6144),
}
from greso_jax.selection import training_strategies

VARIANTS = {**{name: name for name in training_strategies()}, "ds": "dynamic_sampling"}


def load_experiment(file_name):
    path = os.path.join(ROOT, "experiments", file_name)
    spec = importlib.util.spec_from_file_location(file_name[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def paths(tmp_path):
    """A model folder and a data file that exist (validation checks existence, not content)."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    data_file = tmp_path / "train.parquet"
    data_file.write_bytes(b"")
    return str(model_dir), str(data_file)


@pytest.mark.parametrize("file_name", sorted(PAPER_FILES))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_validates_with_the_papers_numbers(file_name, variant, paths, shared_data):
    preset, train_batch, rollout_batch, max_prompt, max_response = PAPER_FILES[file_name]
    c = load_experiment(file_name).get_config(variant)
    c.model.path, c.data.data_dir = paths[0], shared_data
    validate(c)
    assert c.data.dataset == "dapo_math17k"
    assert c.selection.dynamic_sampling.pass_sizing == "fixed" and c.selection.min_pass_size == 64
    assert c.selection.strategy == VARIANTS[variant]
    assert c.model.preset == preset and preset in PRESETS
    assert (c.train.train_batch_size, c.selection.rollout_batch_size) == (train_batch, rollout_batch)
    assert (c.data.max_prompt_length, c.sampling.max_new_tokens) == (max_prompt, max_response)
    assert c.rl.group_size == 8 and c.rl.mini_batch_size == 64 and c.rl.update_layout == "bucketed"
    assert c.train.learning_rate == 1e-6 and c.train.lr_schedule == "constant" and c.train.warmup_steps == 0
    assert c.train.weight_decay == 0.01 and c.train.grad_clip == 1.0
    assert c.rl.clip_low == c.rl.clip_high == 0.2
    assert c.rl.entropy_coef == 0.001 and c.rl.kl_coef == 0.0
    assert c.sampling.temperature == 1.0
    s = c.selection.greso
    assert (s.p_easy, s.p_hard, s.delta_p, s.target_zero_variance, s.p_min, s.p_max) == (
        0.5, 0.5, 0.01, 0.25, 0.05, 0.95)
    assert (c.eval.num_samples, c.eval.temperature, c.eval.top_p) == (4, 1.0, 0.7)
    assert tuple(c.eval.benchmarks) == ("math500", "aime24", "amc23", "minerva_math", "olympiadbench",
                                        "gaokao2023en")
    assert c.model.dtype == "bfloat16" and c.model.tokenizer == "hf"
    assert c.data.source == "parquet" and c.data.prompt_template == "greso"


def test_paths_come_from_flags_and_are_checked(paths, shared_data, tmp_path):
    c = load_experiment("qwen2_5_math_1_5b.py").get_config("greso")
    c.data.data_dir = str(tmp_path)  # an empty data folder: the training set is not there
    with pytest.raises(ConfigError, match=r"^data\.dataset: .*train\.parquet: not found; fetch it with "
                                          r"`python -m greso_jax\.data\.fetch dapo_math17k"):
        validate(c)
    c.data.data_dir = shared_data
    with pytest.raises(ConfigError, match="model.tokenizer"):
        validate(c)  # the hf tokenizer needs the model folder
    c.model.path = paths[0] + "-missing"
    with pytest.raises(ConfigError, match="model.path"):
        validate(c)


def test_unknown_variant_is_named():
    with pytest.raises(ValueError, match="'dapo'"):
        load_experiment("qwen2_5_math_7b.py").get_config("dapo")


def test_command_line_loading_with_overrides(paths, shared_data):
    """The configs load through ml_collections' config_flags as the train CLI does (by path, variant after ':')."""
    script = textwrap.dedent("""
        import sys
        from absl import flags
        from ml_collections import config_flags
        from greso_jax.config import validate
        config = config_flags.DEFINE_config_file("config")
        flags.FLAGS(sys.argv)
        c = validate(config.value)
        print(c.selection.strategy, c.selection.greso.delta_p, c.model.preset)
    """)
    model_dir, _ = paths
    result = subprocess.run(
        [sys.executable, "-c", script, "--config", os.path.join(ROOT, "experiments", "r1_distill_qwen_1_5b.py:ds"),
         f"--config.model.path={model_dir}", f"--config.data.data_dir={shared_data}",
         "--config.selection.greso.delta_p=0.02"],
        capture_output=True, text=True, timeout=120, cwd="/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["dynamic_sampling", "0.02", "deepseek-r1-distill-qwen-1.5b"]


MESH_SCRIPT = textwrap.dedent(r"""
    import importlib.util, math, os, sys
    import jax, jax.numpy as jnp
    from flax import nnx
    from jax.sharding import NamedSharding
    from greso_jax.models import PRESETS, abstract_model, param_shardings
    from greso_jax.parallel.sharding import logical_to_spec, mesh_from_config
    assert jax.device_count() == 8, jax.device_count()
    def check(c):
        mesh = mesh_from_config(c.mesh)
        assert dict(mesh.shape) == {"data": 1, "fsdp": 8, "tensor": 1}, mesh.shape
        cfg = PRESETS[c.model.preset].replace(dtype=c.model.dtype, param_dtype=c.model.param_dtype, remat=c.model.remat)
        model = abstract_model(cfg)
        shardings = param_shardings(model, mesh)
        total = per_device = sharded = 0
        for (path, var), (_, sharding) in zip(nnx.to_flat_state(nnx.state(model, nnx.Param)),
                                              nnx.to_flat_state(shardings)):
            value = var.value
            assert isinstance(value, jax.ShapeDtypeStruct), (path, type(value))  # nothing allocated
            axes = var.get_metadata()["logical_axes"]
            want = logical_to_spec(axes, value.shape, mesh)
            assert sharding.spec == want, (path, sharding.spec, want)
            for dim, name, part in zip(value.shape, axes, tuple(want) + (None,) * (len(axes) - len(want))):
                if name == "embed":  # every hidden-size dimension must be split over fsdp=8
                    assert part == "fsdp" and dim % 8 == 0, (path, axes, want)
            shard_shape = NamedSharding(mesh, want).shard_shape(value.shape)
            nbytes = jnp.dtype(value.dtype).itemsize
            total += math.prod(value.shape) * nbytes
            per_device += math.prod(shard_shape) * nbytes
            sharded += any(p is not None for p in want)
        assert per_device <= total / 8 * 1.01, (per_device, total)
        print("ok", c.model.preset, sharded, total, per_device)
    for file in sys.argv[1:]:
        spec = importlib.util.spec_from_file_location("paper", file)
        paper = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(paper)
        check(paper.get_config("greso"))
""")


@pytest.mark.slow  # a subprocess that builds the three paper-size abstract models on 8 simulated devices
def test_abstract_models_shard_over_fsdp8():
    """One subprocess for all three configs: the simulated device count is fixed at JAX start-up."""
    files = sorted(PAPER_FILES)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", MESH_SCRIPT, *(os.path.join(ROOT, "experiments", f) for f in files)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split() for line in result.stdout.splitlines() if line.startswith("ok ")]
    assert [line[1] for line in lines] == [PAPER_FILES[f][0] for f in files]
    expected = {"qwen2.5-math-1.5b": 1.54e9, "qwen2.5-math-7b": 7.6e9, "deepseek-r1-distill-qwen-1.5b": 1.78e9}
    for _, preset, sharded, total, per_device in lines:
        params = int(total) / 4  # f32 parameters
        assert abs(params - expected[preset]) / expected[preset] < 0.02, (preset, params)
        assert int(sharded) > 0 and int(per_device) <= int(total) / 8 * 1.01


def test_the_headline_task_and_its_variants_validate_for_every_strategy():
    headline = load_experiment("arith_headline.py")
    for name in training_strategies():
        plain, consistent = headline.get_config(name), headline.get_config(f"{name},consistent")
        validate(plain), validate(consistent)
        assert plain.selection.strategy == consistent.selection.strategy == name
        assert plain.train.warmstart_levels == () and consistent.train.warmstart_levels == (0, 1, 2, 3, 5)
        assert consistent.data.arith_level_weights != plain.data.arith_level_weights
        mastered = validate(headline.get_config(f"{name},mastered"))
        assert mastered.selection.strategy == name and mastered.train.warmstart_band_levels == (0, 1)
        assert mastered.train.warmstart_level_weights != mastered.data.arith_level_weights
        unseen = validate(headline.get_config(f"{name},unseen"))
        assert unseen.selection.strategy == name and unseen.train.warmstart_num_problems > 0
        assert mastered.train.warmstart_num_problems == 0
        assert (unseen.data.arith_level_weights, unseen.train.warmstart_level_weights) == (
            mastered.data.arith_level_weights, mastered.train.warmstart_level_weights)
        long_run = validate(headline.get_config(f"{name},long"))
        assert long_run.selection.strategy == name and long_run.data.arith_num_train == 4 * unseen.data.arith_num_train
        assert long_run.train.num_steps > unseen.train.num_steps and long_run.checkpoint.every_steps > 0
        assert (long_run.train.warmstart_num_problems, long_run.sampling.temperature) == (
            unseen.train.warmstart_num_problems, unseen.sampling.temperature)


def test_a_paper_config_runs_at_a_smoke_shape_with_a_trained_tokenizer(shared_data, tmp_path):
    """experiments/bench/paper_shape.py (what the GPU check runs at the 1.5B shape): random weights,
    real DAPO prompts, a BPE tokenizer trained on them, the GRESO config's trainer, one pass a step."""
    script = os.path.join(ROOT, "experiments", "bench", "paper_shape.py")
    result = subprocess.run([sys.executable, script, "--tiny", "--steps", "1", "--data_dir", shared_data,
                             "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    row = next(line for line in result.stdout.splitlines() if line.startswith("| 1 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "64" and cells[2] == "1,024"  # 8 prompts x G 8, 16 tokens each (no EOS from random weights)
    assert cells[3] == "0"  # every group zero-variance: nothing to train on
    assert os.path.isfile(tmp_path / "tokenizer" / "tokenizer.json")
