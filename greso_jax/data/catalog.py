"""The public data sets the configs name: where each comes from, its checksum, and where it lives locally.

A data folder has the layout of ../shared/data (docs/data.md): `<set>/test.jsonl` for the
benchmarks, `gsm8k/train.jsonl` and `dapo_math17k_cleaned/train.parquet` for training.
The folder is `data.data_dir` / `eval.data_dir` when set, else `$GRESO_DATA`, else the
user's cache (`$XDG_CACHE_HOME/greso_jax/data`, default `~/.cache/greso_jax/data`).
`python -m greso_jax.data.fetch` fills it. Stdlib only: config.validation imports it.
"""

from __future__ import annotations

import dataclasses
import os

_QWEN_MATH = "QwenLM/Qwen2.5-Math"
_QWEN_MATH_COMMIT = "a45202bd16f1ec06f433442dc1152d0074773465"
_GRESO = "Infini-AI-Lab/GRESO"
_GRESO_COMMIT = "b27784315479921ea1977178d7e6c4858b2ae5a1"
_GSM8K = "openai/grade-school-math"
_GSM8K_COMMIT = "3101c7d5072418e28b9008a6636bde82a006892c"


class MissingDataError(FileNotFoundError):
    """A data file is not in the data folder; the message names it and the fetch command."""


@dataclasses.dataclass(frozen=True)
class Upstream:
    """One public file. `revision` is a commit id when `pinned`; `sha256` is the raw file's
    hash, None where we could not compute it (then only the converted file is checked)."""

    host: str  # "github" (raw file at a commit) or "huggingface" (a Hub data set repo)
    repo: str
    path: str
    revision: str
    pinned: bool
    sha256: str | None

    @property
    def url(self) -> str:
        if self.host == "github":
            return f"https://raw.githubusercontent.com/{self.repo}/{self.revision}/{self.path}"
        return f"https://huggingface.co/datasets/{self.repo}/resolve/{self.revision}/{self.path}"


@dataclasses.dataclass(frozen=True)
class DataFile:
    """A file of the local layout: `relpath` under the data folder, made from `upstream` by
    `convert` ("copy", or the name of a converter in greso_jax.data.fetch); `sha256` is the
    converted file's hash, taken from the copy in ../shared/data."""

    relpath: str
    upstream: Upstream
    sha256: str
    rows: int
    convert: str = "copy"


@dataclasses.dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    files: tuple[DataFile, ...]
    train_file: str = ""  # relpath of the training file ("" = evaluation only)

    @property
    def format(self) -> str:
        return "parquet" if self.train_file.endswith(".parquet") else "jsonl"


def _qwen_math(name: str, sha256: str, rows: int) -> DataFile:
    # byte-identical to QwenLM/Qwen2.5-Math evaluation/data/<name>/test.jsonl at the pinned commit
    return DataFile(f"{name}/test.jsonl", Upstream("github", _QWEN_MATH, f"evaluation/data/{name}/test.jsonl",
                                                   _QWEN_MATH_COMMIT, True, sha256), sha256, rows)


def _gsm8k(split: str, sha256: str, rows: int) -> DataFile:
    return DataFile(f"gsm8k/{split}.jsonl", Upstream("github", _GSM8K, f"grade_school_math/data/{split}.jsonl",
                                                     _GSM8K_COMMIT, True, sha256), sha256, rows)


DATASETS: dict[str, Dataset] = {d.name: d for d in (
    Dataset("dapo_math17k", "DAPO-Math-17K (cleaned), the GRESO paper's training set (verl parquet)",
            (DataFile("dapo_math17k_cleaned/train.parquet",
                      Upstream("github", _GRESO, "data/dapo_math/train.parquet", _GRESO_COMMIT, True,
                               "55c94795c01e30913a67c503272b0fc85d5095eda49839eb188dbac9a90b62ea"),
                      "55c94795c01e30913a67c503272b0fc85d5095eda49839eb188dbac9a90b62ea", 17917),),
            train_file="dapo_math17k_cleaned/train.parquet"),
    Dataset("math500", "MATH-500 (the HuggingFaceH4 subset of MATH)",
            # Hub revision and raw hash unknown here: "main" is unpinned and only the converted
            # file is checked (its hash is of the ../shared/data copy)
            (DataFile("math500/test.jsonl",
                      Upstream("huggingface", "HuggingFaceH4/MATH-500", "test.jsonl", "main", False, None),
                      "27866aafb9474291b4168f8c2b5db6b92e1ba8f4e682d86db9a7f3fe5dd6a34b", 500,
                      convert="math500"),)),
    Dataset("aime24", "AIME 2024",
            (_qwen_math("aime24", "af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac", 30),)),
    Dataset("amc23", "AMC 2023",
            (_qwen_math("amc23", "43707e1ca784602d8479de24ee8ce36609dbebc46dd152b0b12a46611aa898a4", 40),)),
    Dataset("minerva_math", "Minerva math",
            (_qwen_math("minerva_math", "0e656b430d3a0a1dab6aa853f453ba3805e28e2cabe4fc72486a897cc09d8ba2", 272),)),
    Dataset("olympiadbench", "OlympiadBench (English, open-ended)",
            (_qwen_math("olympiadbench", "bb8c1e38a16ea9eacb77530315a674d883f267fbff79183effc53681b4fcc416", 675),)),
    Dataset("gaokao2023en", "Gaokao 2023 (English), as shipped with the GRESO code",
            (DataFile("gaokao2023en/test.jsonl",
                      Upstream("github", _GRESO, "raw-data/gaokao-2023en-test.jsonl", _GRESO_COMMIT, True,
                               "e1503ee5bd33bacb677b707344d64cfa44c9b841428544a14df7a6b643376977"),
                      "e1503ee5bd33bacb677b707344d64cfa44c9b841428544a14df7a6b643376977", 385),)),
    Dataset("gsm8k", "GSM8K (MIT licence)",
            (_gsm8k("train", "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465", 7473),
             _gsm8k("test", "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14", 1319)),
            train_file="gsm8k/train.jsonl"),
)}
# names the fetch command accepts for several sets at once
GROUPS = {"paper": ("dapo_math17k", "math500", "aime24", "amc23", "minerva_math", "olympiadbench", "gaokao2023en"),
          "all": tuple(DATASETS)}
TRAINING_SETS = tuple(name for name, d in DATASETS.items() if d.train_file)


def default_root() -> str:
    """$GRESO_DATA, else the user's cache folder for greso_jax data."""
    if os.environ.get("GRESO_DATA"):
        return os.path.abspath(os.path.expanduser(os.environ["GRESO_DATA"]))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "greso_jax", "data")


def data_root(data_dir: str = "") -> str:
    """The data folder: `data_dir` when given, else `default_root()`."""
    return os.path.abspath(os.path.expanduser(data_dir)) if data_dir else default_root()


def fetch_command(name: str, root: str) -> str:
    dest = "" if root == default_root() else f" --dest {root}"
    return f"python -m greso_jax.data.fetch {name}{dest}"


def missing_files(root: str) -> dict[str, list[str]]:
    """The catalog's files absent from the data folder `root`, by data set (sets complete in
    `root` are left out): what `python -m greso_jax.data.fetch` would still have to download."""
    missing = {name: [f.relpath for f in d.files if not os.path.exists(os.path.join(root, f.relpath))]
               for name, d in DATASETS.items()}
    return {name: files for name, files in missing.items() if files}


def locate(name: str, relpath: str, data_dir: str = "") -> str:
    """The path of `relpath` of data set `name` in the data folder; MissingDataError (one line,
    with the fetch command) when it is not there."""
    root = data_root(data_dir)
    path = os.path.join(root, relpath)
    if not os.path.exists(path):
        raise MissingDataError(f"{path}: not found; fetch it with `{fetch_command(name, root)}`")
    return path


def training_file(name: str, data_dir: str = "") -> str:
    """The training file of the named set (see TRAINING_SETS) in the data folder."""
    if name not in TRAINING_SETS:
        raise ValueError(f"{name!r} is not a training set (one of {', '.join(TRAINING_SETS)})")
    return locate(name, DATASETS[name].train_file, data_dir)


