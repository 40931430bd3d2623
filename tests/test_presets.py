"""Preset shapes by abstract evaluation (no allocation), and weight-loading errors."""

import json

import pytest

from conftest import make_hf_checkpoint
from greso_jax.models import PRESETS, abstract_model, count_parameters, from_pretrained

PAPER_PARAMETER_COUNTS = {
    "qwen2.5-math-1.5b": 1_543_714_304,
    "qwen2.5-math-7b": 7_615_616_512,
    "deepseek-r1-distill-qwen-1.5b": 1_777_088_000,
}


@pytest.mark.parametrize("name", sorted(PAPER_PARAMETER_COUNTS))
def test_preset_parameter_counts(name):
    assert count_parameters(abstract_model(PRESETS[name])) == PAPER_PARAMETER_COUNTS[name]


def test_loading_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        from_pretrained(str(tmp_path / "absent"))
    make_hf_checkpoint(tmp_path / "m", tied=False)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps(config | {"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="unsupported model_type 'gpt2'"):
        from_pretrained(str(tmp_path / "m"))
    (tmp_path / "m" / "config.json").write_text(json.dumps(config | {"intermediate_size": 80}))
    with pytest.raises(ValueError, match=r"model\.layers\.0\.mlp\.(gate|up|down)_proj\.weight has shape"):
        from_pretrained(str(tmp_path / "m"))
    (tmp_path / "m" / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 3}))
    with pytest.raises(ValueError, match=r"missing tensors: .*model\.layers\.2\."):
        from_pretrained(str(tmp_path / "m"))
    (tmp_path / "m" / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 1}))
    with pytest.raises(ValueError, match=r"unexpected tensors: .*model\.layers\.1\."):
        from_pretrained(str(tmp_path / "m"))
