"""archive_runs.py: an archived root reads back as the root it came from (records, group traces, precise grades),
for the analysis scripts and for precise_eval.py without checkpoints."""

import gzip
import json
import os

import pytest

from experiments.bench import archive_runs, engine_compare, precise_eval
from greso_jax.run.records import RecordsError, read_group_trace, read_lines, read_metrics


def _write_run(workdir, accuracy_gain, *, finished=True, checkpoints=True):
    os.makedirs(workdir)
    records = [{"step": 0, "eval/accuracy": 0.4, "warmstart/steps": 1300}]
    for step in range(1, 11):
        records.append({"step": step, "time/rollout": 0.4, "time/update": 0.5, "time/step": 0.9,
                        "rollout/num_responses": 400 * step, "train/groups": 4, "cpu/rollout": 0.8,
                        "cpu/update": 0.7, "cpu/step": 1.5,
                        **({"eval/accuracy": 0.4 + accuracy_gain * step / 10} if step % 5 == 0 else {})})
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    with open(os.path.join(workdir, "groups.jsonl"), "w") as f:
        f.writelines(json.dumps({"step": s, "prompt_ids": [s, s + 1], "num_correct": [0, 3]}) + "\n"
                     for s in range(1, 11))
    with open(os.path.join(workdir, "config.json"), "w") as f:
        json.dump({"seed": 0}, f)
    if checkpoints:
        os.makedirs(os.path.join(workdir, "checkpoints", "10"))
    if finished:
        with open(os.path.join(workdir, "summary.json"), "w") as f:
            json.dump({"accuracy": 0.4 + accuracy_gain}, f)


def _graded(step, accuracy, samples=8):
    return {"step": step, "samples": samples, "accuracy": accuracy, "recorded": accuracy, "recorded_samples": 4,
            "correct_counts": [4, 2]}


@pytest.fixture
def archived(tmp_path):
    root, out = tmp_path / "runs", tmp_path / "results" / "runs"
    for seed, extra in ((0, 0.0), (1, 0.02)):
        _write_run(root / "ds_fixed" / f"seed{seed}", 0.10 + extra)
        _write_run(root / "greso" / f"seed{seed}", 0.08 + extra)
    _write_run(root / "greso" / "seed2", 0.1, finished=False)  # unfinished: not archived
    (root / "warmstart").mkdir()
    cache = {precise_eval.cache_key(str(root / v / f"seed{s}"), 10, 8): _graded(10, a)
             for v, s, a in (("ds_fixed", 0, 0.5), ("ds_fixed", 1, 0.52), ("greso", 0, 0.49), ("greso", 1, 0.5))}
    cache[precise_eval.cache_key(str(root / "greso" / "seed0"), 5, 8)] = _graded(5, 0.45)
    (tmp_path / "cache.json").write_text(json.dumps(cache))
    assert archive_runs.main(["--root", str(root), "--out", str(out), "--precise_cache",
                              str(tmp_path / "cache.json")]) == 0
    return root, out


def test_an_archive_reads_back_as_its_root(archived):
    root, out = archived
    assert sorted(os.listdir(out)) == ["ds_fixed", "greso"]
    assert sorted(os.listdir(out / "greso")) == ["seed0", "seed1"]
    run = out / "greso" / "seed0"
    assert sorted(os.listdir(run)) == ["config.json", "groups.jsonl.gz", "metrics.jsonl.gz", "precise.json",
                                       "summary.json"]
    source = root / "greso" / "seed0"
    assert read_lines(str(run / "metrics.jsonl")) == read_lines(str(source / "metrics.jsonl"))
    assert read_metrics(str(run)) == read_metrics(str(source))
    assert read_group_trace(str(run)) == read_group_trace(str(source))
    assert json.loads((run / "precise.json").read_text()).keys() == {"10x8", "5x8"}
    # the analysis scripts take the archive as a root
    assert engine_compare.read_runs({"a": str(out)}) == engine_compare.read_runs({"a": str(root)})


def test_archiving_twice_gives_the_same_bytes(archived, tmp_path):
    root, out = archived
    first = (out / "greso" / "seed0" / "metrics.jsonl.gz").read_bytes()
    assert archive_runs.main(["--root", str(root), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "greso" / "seed0" / "metrics.jsonl.gz").read_bytes() == first
    assert not (tmp_path / "again" / "greso" / "seed0" / "precise.json").exists()  # no cache given


def test_precise_eval_pairs_archived_runs_from_their_grades(archived, capsys, monkeypatch):
    _, out = archived
    monkeypatch.setattr(precise_eval, "grade_checkpoint", lambda *a: pytest.fail("an archived run was regraded"))
    assert precise_eval.main(["--root", str(out), "--strategies", "greso", "--seeds", "0,1", "--steps", "10",
                              "--samples", "8"]) == 0
    printed = capsys.readouterr()
    assert "| greso | 10 | 2 | -0.015 [" in printed.out and "-0.010, -0.020" in printed.out
    # the newest archived grade is the default step; a step never graded is named and left out
    assert precise_eval.main(["--root", str(out), "--strategies", "greso", "--seeds", "0", "--samples", "8"]) == 0
    assert "| greso | 10 | 1 |" in capsys.readouterr().out
    graded = precise_eval.graded_steps(str(out / "greso" / "seed0"), [5, 7], 8, {}, "")
    assert list(graded) == [5] and graded[5]["accuracy"] == 0.45
    assert "archived without a grade at step 7" in capsys.readouterr().err


def test_a_damaged_archived_record_names_its_file(archived):
    _, out = archived
    path = out / "greso" / "seed1" / "metrics.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(RecordsError, match=r"metrics.jsonl.gz:2"):
        read_lines(str(out / "greso" / "seed1" / "metrics.jsonl"))


def test_bad_arguments_fail_naming_the_flag(archived, tmp_path, capsys):
    root, _ = archived
    with pytest.raises(SystemExit):
        archive_runs.main(["--root", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert "--root" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        archive_runs.main(["--root", str(root), "--out", str(root / "archive")])
    assert "--out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        archive_runs.main(["--root", str(root), "--out", str(tmp_path / "o"), "--strategies", "mopps"])
    assert "no finished run" in capsys.readouterr().err
