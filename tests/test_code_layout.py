"""The code's shape stays the one the redesign set (docs/design.md, "Layers"): the trainer is only
the loop, no module grows into two jobs, and the step driver knows no strategy by name."""

import os
import re

from greso_jax.selection import STRATEGIES

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "greso_jax")


def _lines(path: str) -> int:
    with open(path) as f:
        return sum(1 for _ in f)


def test_the_package_top_holds_only_the_command_lines():
    top = sorted(name for name in os.listdir(PACKAGE) if name.endswith(".py"))
    assert top == ["__init__.py", "evaluate.py", "export.py", "train.py"]


def test_the_trainer_is_only_the_loop():
    assert _lines(os.path.join(PACKAGE, "run", "trainer.py")) <= 250


def test_no_module_passes_400_lines():
    too_long = {os.path.relpath(os.path.join(root, name), PACKAGE): _lines(os.path.join(root, name))
                for root, _, names in os.walk(PACKAGE) for name in names if name.endswith(".py")}
    assert {path: n for path, n in too_long.items() if n > 400} == {}


def test_the_step_driver_names_no_strategy():
    with open(os.path.join(PACKAGE, "selection", "driver.py")) as f:
        source = f.read().lower()
    names = set(STRATEGIES.names()) | {"dapo", "dynamic sampling"}
    named = {n for n in names if re.search(rf"\b{re.escape(n.lower())}\b", source)}
    assert named == set()
