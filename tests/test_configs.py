"""Config validation: every rejected case names its field."""

import pytest

from greso_jax.config import ConfigError, get_config, validate


def _node(config, dotted):
    for part in filter(None, dotted.split(".")):
        config = config[part]
    return config


def test_base_config_validates():
    validate(get_config())


def test_a_warm_start_band_validates():
    config = get_config()
    config.train.update(warmstart_steps=100, warmstart_accuracy_low=0.25, warmstart_accuracy_high=0.35,
                        warmstart_check_every=50)
    validate(config)


BAD_CASES = [
    ("selection.greso.delta_p", -1.0),
    ("selection.greso.delta_p", "0.01"),
    ("selection.strategy", "greedy"),
    ("rl.group_size", 1),
    ("rl.group_size", 8.5),
    ("rl.loss_aggregation", "mean"),
    ("rl.kl_estimator", "k2"),
    ("rl.dual_clip", 0.5),
    ("train.num_steps", -3),
    ("train.learning_rate", 0.0),
    ("train.learning_rate", float("nan")),
    ("selection.greso.target_zero_variance", 1.5),
    ("sampling.top_p", 0.0),
    ("sampling.temperature", -0.1),
    ("sampling.prompt_length_buckets", (64, 32)),
    ("sampling.live_prompts", -1),
    ("sampling.response_chunks", 0),
    ("mesh.fsdp", 0),
    ("model.dtype", "float8"),
    ("model.preset", "gpt-5"),
    ("seed", True),
    ("replicate", -1),
    ("data.source", "csv"),
    ("checkpoint.keep", 0),
    ("train.warmstart_accuracy_low", 1.5),
    ("train.warmstart_accuracy_low", -0.1),
    ("train.warmstart_accuracy_high", 1.2),
    ("train.warmstart_check_every", 0),
    ("train.warmstart_validation_rows", 0),
    ("train.warmstart_validation_samples", 0),
    ("train.warmstart_cache_dir", None),
    ("train.warmstart_levels", (0, 13)),
    ("train.warmstart_levels", (1, 1)),
    ("train.warmstart_levels", ("0",)),
    ("train.warmstart_band_levels", (8,)),
    ("train.warmstart_level_weights", (1,) * 14),  # at most one weight per level
]


@pytest.mark.parametrize("field,value", BAD_CASES, ids=[f"{f}={v!r}" for f, v in BAD_CASES])
def test_bad_value_names_its_field(field, value):
    config = get_config()
    section, _, name = field.rpartition(".")
    target = _node(config, section)
    with target.ignore_type():
        target[name] = value
    with pytest.raises(ConfigError, match=rf"^{field.replace('.', r'[.]')}:"):
        validate(config)


def test_cross_field_checks_name_the_field(tmp_path):
    cases = [
        ({"selection.greso.p_min": 0.9, "selection.greso.p_max": 0.5}, "selection.greso.p_min"),
        ({"selection.greso.p_easy": 0.99}, "selection.greso.p_easy"),
        ({"rl.mini_batch_size": 48}, "rl.mini_batch_size"),
        ({"selection.stream_lanes": 8, "selection.stream_lookahead": 4}, "selection.stream_lookahead"),
        ({"rl.micro_batch_size": 7}, "rl.micro_batch_size"),
        ({"data.source": "jsonl", "data.path": ""}, "data.path"),
        ({"data.source": "parquet", "data.path": str(tmp_path / "missing.parquet")}, "data.path"),
        ({"model.path": str(tmp_path / "no-model")}, "model.path"),
        ({"model.tokenizer": "hf"}, "model.tokenizer"),  # no folder to read tokenizer.json from
        ({"model.tokenizer": "hf", "model.tokenizer_path": str(tmp_path)}, "model.tokenizer_path"),
        ({"model.tokenizer_path": str(tmp_path)}, "model.tokenizer_path"),  # read only by the 'hf' tokenizer
        ({"selection.strategy": "aero", "selection.aero.n_explore": 16}, "selection.aero.n_explore"),
        ({"train.warmstart_steps": 100, "train.warmstart_accuracy_low": 0.4, "train.warmstart_accuracy_high": 0.3},
         "train.warmstart_accuracy_high"),
        ({"train.warmstart_accuracy_high": 0.5}, "train.warmstart_accuracy_high"),  # a band without its low end
        ({"train.warmstart_accuracy_low": 0.3}, "train.warmstart_steps"),  # no maximum
        ({"train.warmstart_steps": 40, "train.warmstart_accuracy_low": 0.3}, "train.warmstart_check_every"),
        ({"train.warmstart_steps": 100, "train.warmstart_accuracy_low": 0.3, "data.arith_num_train": 256},
         "train.warmstart_validation_rows"),
        ({"train.warmstart_levels": (0,), "data.source": "jsonl", "data.path": __file__}, "train.warmstart_levels"),
        ({"train.warmstart_levels": (6, 7), "data.arith_level_weights": (1, 1, 1, 1, 1, 1, 0, 0)},
         "train.warmstart_levels"),  # no examples left to teach
        ({"train.warmstart_band_levels": (0,)}, "train.warmstart_band_levels"),  # the band is off
        ({"train.warmstart_steps": 100, "train.warmstart_accuracy_low": 0.3, "train.warmstart_levels": (0, 1),
          "train.warmstart_band_levels": (2,)}, "train.warmstart_band_levels"),  # not taught
        ({"train.warmstart_steps": 100, "train.warmstart_accuracy_low": 0.3, "train.warmstart_band_levels": (6,),
          "data.arith_level_weights": (1, 1, 1, 1, 1, 1, 0, 0)}, "train.warmstart_band_levels"),  # no rows to check
        ({"train.warmstart_levels": (0, 1), "train.warmstart_level_weights": (1, 1, 1, 0, 0, 0, 0, 0)},
         "train.warmstart_level_weights"),  # draws from an untaught level
        ({"train.warmstart_level_weights": (1, 0, 0, 0, 0, 0, 0, 0), "data.source": "jsonl", "data.path": __file__},
         "train.warmstart_level_weights"),
        ({"train.warmstart_num_problems": 500}, "train.warmstart_num_problems"),  # no warm start to supervise
        ({"train.warmstart_steps": 100, "train.warmstart_num_problems": 500, "data.source": "jsonl",
          "data.path": __file__}, "train.warmstart_num_problems"),
        ({"train.warmstart_steps": 100, "train.warmstart_num_problems": 17000,
          "data.arith_level_weights": (1, 1, 0, 0, 0, 0, 0, 0)}, "train.warmstart_num_problems"),  # 20,000 in all
        ({"train.warmstart_steps": 100, "train.warmstart_accuracy_low": 0.3, "train.warmstart_num_problems": 256},
         "train.warmstart_validation_rows"),  # its own pool holds the validation rows
    ]
    for overrides, field in cases:
        config = get_config()
        for dotted, value in overrides.items():
            section, _, name = dotted.rpartition(".")
            _node(config, section)[name] = value
        with pytest.raises(ConfigError, match=rf"^{field.replace('.', r'[.]')}:"):
            validate(config)


def test_a_level_field_is_a_dotted_path_and_only_for_files():
    config = get_config()
    config.data.level_field = "extra_info..level"
    with pytest.raises(ConfigError, match="data.level_field: must be a dotted path"):
        validate(config)
    config.data.level_field = "level"
    with pytest.raises(ConfigError, match="data.level_field: the arith source's prompts carry their own levels"):
        validate(config)
