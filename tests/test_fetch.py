"""The data catalog and `greso_jax.data.fetch`: recorded hashes, conversion, checksum failures,
offline use and the one-line errors for missing files, all on the real files of ../shared/data.

The network download itself (raw.githubusercontent.com, the Hugging Face Hub) cannot run on
these machines, which reach only package registries: no test downloads, and none pretends to.
`install` — everything after the download — runs here on the shared copies as the raw files.
"""

import json
import os
import shutil

import pytest

from greso_jax.config import ConfigError, get_config, validate
from greso_jax.data import catalog, fetch
from greso_jax.data.sources import DataError, load_benchmark
from greso_jax.core.files import sha256_of
from greso_jax.run.build import rows_from_config

ALL_FILES = [(name, f) for name, d in catalog.DATASETS.items() for f in d.files]


@pytest.mark.parametrize("name,file", ALL_FILES, ids=[f.relpath for _, f in ALL_FILES])
def test_recorded_hashes_and_sizes_match_the_shared_copy(shared_data, name, file):
    path = os.path.join(shared_data, file.relpath)
    assert sha256_of(path) == file.sha256
    if file.relpath.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            assert sum(1 for line in f if line.strip()) == file.rows
    assert file.upstream.pinned == (file.upstream.sha256 is not None)  # an unpinned source has no known raw hash
    if file.upstream.pinned:
        assert len(file.upstream.revision) == 40


def test_install_copies_a_verified_file_the_loader_reads(shared_data, tmp_path):
    file = catalog.DATASETS["aime24"].files[0]
    target = fetch.install(file, os.path.join(shared_data, file.relpath), str(tmp_path))
    assert target == str(tmp_path / "aime24" / "test.jsonl")
    assert len(load_benchmark("aime24", str(tmp_path))) == 30


def test_math500_conversion_reproduces_the_shared_file(shared_data, tmp_path):
    """The Hub's MATH-500 rows carry problem/solution/answer/subject/level/unique_id (the published
    layout; not downloadable here): rows in that layout, made from the shared copy, convert back
    byte for byte to the recorded hash."""
    file = catalog.DATASETS["math500"].files[0]
    raw = tmp_path / "raw.jsonl"
    with open(os.path.join(shared_data, file.relpath), encoding="utf-8") as f, open(raw, "w") as out:
        for i, line in enumerate(f):
            row = json.loads(line)
            out.write(json.dumps({"problem": row["question"], "solution": row["answer"], "answer": "x",
                                  "subject": "Algebra", "level": 1, "unique_id": f"test/{i}.json"}) + "\n")
    root = tmp_path / "data"
    fetch.install(file, str(raw), str(root))
    assert (root / "math500" / "test.jsonl").read_bytes() == open(os.path.join(shared_data, file.relpath), "rb").read()
    assert len(load_benchmark("math500", str(root))) == 500


def test_a_raw_file_with_the_wrong_hash_is_refused(shared_data, tmp_path):
    file = catalog.DATASETS["gsm8k"].files[1]
    raw = tmp_path / "test.jsonl"
    shutil.copyfile(os.path.join(shared_data, file.relpath), raw)
    with open(raw, "a") as f:
        f.write("\n")
    with pytest.raises(fetch.FetchError, match=r"^gsm8k/test\.jsonl: the download of openai/grade-school-math/.* "
                                               r"has sha256 [0-9a-f]{64}, expected 3730d3"):
        fetch.install(file, str(raw), str(tmp_path / "data"))
    assert not (tmp_path / "data" / "gsm8k").exists()


def test_a_converted_file_with_the_wrong_hash_is_not_installed(shared_data, tmp_path):
    file = catalog.DATASETS["math500"].files[0]  # unpinned upstream: only the converted hash is known
    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps({"problem": "1+1?", "solution": "\\boxed{2}"}) + "\n")
    with pytest.raises(fetch.FetchError, match=r"^math500/test\.jsonl: converted file has sha256 .*unpinned"):
        fetch.install(file, str(raw), str(tmp_path))
    assert os.listdir(tmp_path / "math500") == []  # neither the target nor the partial file


def test_fetch_offline_with_every_file_present(shared_data, tmp_path, monkeypatch, capsys):
    """All files present and verified: no download is attempted (a call would fail the test)."""
    def no_network(*args):
        raise AssertionError("fetch downloaded although every file was present")

    monkeypatch.setattr(fetch, "_download", no_network)
    assert fetch.main(["paper", "gsm8k", "--dest", shared_data]) == 0
    out = capsys.readouterr().out
    assert out.count("present, sha256 verified") == 9

    root = tmp_path / "data"  # one file differing from its hash is fetched again, here: refused offline
    shutil.copytree(os.path.join(shared_data, "amc23"), root / "amc23")
    os.chmod(root / "amc23" / "test.jsonl", 0o644)
    with open(root / "amc23" / "test.jsonl", "a") as f:
        f.write("\n")
    def offline(up, into):
        raise OSError("offline")

    monkeypatch.setattr(fetch, "_download", offline)
    assert fetch.main(["amc23", "--dest", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("fetch: amc23/test.jsonl: cannot download https://raw.githubusercontent.com/QwenLM/")
    assert f"copy the file into {root}/amc23/test.jsonl" in err


def test_fetch_bad_arguments_exit_2(capsys):
    assert fetch.main(["gsm8k", "mmlu"]) == 2
    assert "unknown data set 'mmlu'" in capsys.readouterr().err
    assert fetch.main([]) == 2


def test_fetch_list_shows_presence_and_pinning(shared_data, capsys):
    assert fetch.main(["--list", "--dest", shared_data]) == 0
    out = capsys.readouterr().out
    assert "math500/test.jsonl" in out and "(unpinned)" in out and "verified" in out and "absent" not in out


def test_a_named_training_set_resolves_through_data_dir_or_GRESO_DATA(shared_data, tmp_path, monkeypatch):
    c = get_config()
    c.data.source, c.data.dataset = "parquet", "dapo_math17k"
    c.data.allow_conflicting_golds = True  # 7 prompts of the set occur with two different golds
    monkeypatch.setenv("GRESO_DATA", shared_data)
    validate(c)
    rows, _ = rows_from_config(c)
    assert len(rows) == 17917 and rows.path == os.path.join(shared_data, "dapo_math17k_cleaned", "train.parquet")
    assert len(load_benchmark("gaokao2023en", "")) == 385  # eval.data_dir "" reads the same folder

    monkeypatch.setenv("GRESO_DATA", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match=r"^data\.dataset: .*empty/dapo_math17k_cleaned/train\.parquet: "
                                                  r"not found; fetch it with `python -m greso_jax\.data\.fetch "
                                                  r"dapo_math17k`$"):
        validate(c)
    c.data.data_dir = shared_data
    validate(c)
    c.data.source = "jsonl"
    with pytest.raises(ConfigError, match="data.source: .*is a parquet set"):
        validate(c)
    c.data.dataset = "aime24"
    with pytest.raises(ConfigError, match="data.dataset: must be '' or one of dapo_math17k, gsm8k"):
        validate(c)


def test_a_missing_benchmark_names_the_file_and_the_fetch_command(tmp_path):
    with pytest.raises(DataError) as error:
        load_benchmark("olympiadbench", str(tmp_path))
    assert str(error.value) == (f"{tmp_path}/olympiadbench/test.jsonl: not found; fetch it with "
                                f"`python -m greso_jax.data.fetch olympiadbench --dest {tmp_path}`")


def test_missing_files_lists_what_fetch_still_needs(tmp_path):
    """What the data tests' fixture checks before it hands out a folder: a folder filled by
    `fetch paper` lacks only GSM8K, and the skip names it with the command that fetches it."""
    assert catalog.missing_files(str(tmp_path / "absent")) == {
        name: [f.relpath for f in d.files] for name, d in catalog.DATASETS.items()}
    for name in catalog.GROUPS["paper"]:
        for f in catalog.DATASETS[name].files:
            (tmp_path / f.relpath).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / f.relpath).write_text("")
    assert catalog.missing_files(str(tmp_path)) == {"gsm8k": ["gsm8k/train.jsonl", "gsm8k/test.jsonl"]}
    for f in catalog.DATASETS["gsm8k"].files:
        (tmp_path / f.relpath).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f.relpath).write_text("")
    assert catalog.missing_files(str(tmp_path)) == {}
