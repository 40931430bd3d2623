"""Prompt sources: every shared data file loads with its README row count and non-empty
golds; bad rows are errors naming file and row, or skipped and counted."""

import json
import os

import pytest

from greso_jax.data.sources import (DataError, load_benchmark, load_eval_sets, load_jsonl, load_source,
                                    load_verl_parquet)

README_ROWS = {
    "gsm8k/train.jsonl": 7473, "gsm8k/test.jsonl": 1319, "math500/test.jsonl": 500, "aime24/test.jsonl": 30,
    "amc23/test.jsonl": 40, "minerva_math/test.jsonl": 272, "olympiadbench/test.jsonl": 675,
    "gaokao2023en/test.jsonl": 385,
}


@pytest.mark.parametrize("relative", sorted(README_ROWS))
def test_shared_jsonl_files_load(shared_data, relative):
    rows = load_jsonl(os.path.join(shared_data, relative))
    assert len(rows) == README_ROWS[relative] and rows.num_bad_rows == 0
    assert [r.prompt_id for r in rows] == list(range(len(rows)))
    assert all(r.ground_truth.strip() and r.question.strip() for r in rows)
    assert {r.data_source for r in rows} == {relative.split("/")[0]}


def test_every_shared_file_is_covered(shared_data):
    found = {os.path.relpath(os.path.join(d, f), shared_data) for d, _, fs in os.walk(shared_data) for f in fs
             if f.endswith((".jsonl", ".parquet"))}
    assert found == set(README_ROWS) | {"dapo_math17k_cleaned/train.parquet"}


def test_shared_parquet_loads(shared_data):
    rows = load_verl_parquet(os.path.join(shared_data, "dapo_math17k_cleaned", "train.parquet"))
    assert len(rows) == 17917
    assert all(r.ground_truth.strip() for r in rows)
    assert rows[0].ground_truth == "34" and rows[0].data_source == "dapo_math"
    assert rows[0].messages[0]["role"] == "user" and rows[0].question == rows[0].messages[0]["content"]


@pytest.mark.parametrize("name,index,gold", [
    ("gsm8k", 0, "18"), ("math500", 0, "\\left( 3, \\frac{\\pi}{2} \\right)"), ("amc23", 0, "27"),
    ("aime24", 0, "204"), ("minerva_math", 0, "1.6"),
])
def test_gold_fields(shared_data, name, index, gold):
    assert load_benchmark(name, shared_data)[index].ground_truth == gold


def test_gaokao_answers_carried_in_the_question(shared_data):
    rows = load_benchmark("gaokao2023en", shared_data)
    assert rows[167].ground_truth == "\\frac{3}{10}" and "answers:" not in rows[167].question
    assert rows[192].ground_truth == "A"


def test_olympiadbench_joins_multiple_answers(tmp_path):
    path = tmp_path / "olympiadbench" / "test.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps({"question": "q", "final_answer": ["$1$", "$2$"]}) + "\n")
    assert load_jsonl(str(path))[0].ground_truth == "1, 2"


def write_lines(tmp_path, folder, lines):
    path = tmp_path / folder / "test.jsonl"
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return str(path)


GOOD = json.dumps({"question": "1+1?", "answer": "so\n#### 2"})


@pytest.mark.parametrize("bad,message", [
    ("{not json", "Expecting"),
    (json.dumps({"answer": "#### 2"}), "missing field"),
    (json.dumps({"question": "q"}), "'answer' must be a string"),
    (json.dumps({"question": 5, "answer": "#### 2"}), "'question' must be a string"),
    (json.dumps({"question": "q", "answer": "no marker"}), "####"),
    (json.dumps(["a", "list"]), "JSON object"),
])
def test_bad_rows_name_file_and_row(tmp_path, bad, message):
    path = write_lines(tmp_path, "gsm8k", [GOOD, bad, GOOD])
    with pytest.raises(DataError, match=f"{path}:2: .*{message}"):
        load_jsonl(path)
    rows = load_jsonl(path, skip_bad_rows=True)
    assert len(rows) == 2 and rows.num_bad_rows == 1 and [r.prompt_id for r in rows] == [0, 1]


def test_empty_source_is_an_error(tmp_path):
    with pytest.raises(DataError, match="no usable prompts"):
        load_jsonl(write_lines(tmp_path, "gsm8k", [""]))
    with pytest.raises(DataError, match="no usable prompts .*1 bad"):
        load_jsonl(write_lines(tmp_path, "gsm8k", ["{bad"]), skip_bad_rows=True)


def test_boxed_formats_need_a_box(tmp_path):
    path = write_lines(tmp_path, "math500", [json.dumps({"question": "q", "answer": "no box"})])
    with pytest.raises(DataError, match=r":1: .*boxed"):
        load_jsonl(path)


def test_unknown_folder_uses_generic_format(tmp_path):
    path = write_lines(tmp_path, "mine", [json.dumps({"problem": "p", "solution": "it is $\\boxed{4}$"})])
    rows = load_jsonl(path)
    assert rows[0].ground_truth == "4" and rows[0].data_source == "generic"


def test_bad_parquet_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = {"prompt": [{"role": "user", "content": "q"}], "data_source": "d",
            "reward_model": {"ground_truth": "3", "style": "rule"}}
    bad = {"prompt": [{"role": "user", "content": "q"}], "data_source": "d",
           "reward_model": {"ground_truth": None, "style": "rule"}}
    path = str(tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist([good, bad, good]), path)
    with pytest.raises(DataError, match=f"{path}: row 2: .*ground_truth"):
        load_verl_parquet(path)
    rows = load_verl_parquet(path, skip_bad_rows=True)
    assert len(rows) == 2 and rows.num_bad_rows == 1
    with pytest.raises(DataError, match="no such file"):
        load_verl_parquet(str(tmp_path / "missing.parquet"))


def test_load_source_takes_explicit_arguments(shared_data, tmp_path):
    amc = os.path.join(shared_data, "amc23", "test.jsonl")
    assert [r.question for r in load_source(source="jsonl", path=amc)] == [r.question for r in load_jsonl(amc)]
    rows = load_source(source="arith", arith_num_train=30, arith_num_heldout=5, arith_seed=0)
    assert len(rows) == 30 and rows[0].data_source == "arith" and rows.path == "arith"
    assert [r.prompt_id for r in rows] == list(range(30))
    assert rows == load_source(source="arith", arith_num_train=30, arith_num_heldout=5, arith_seed=0)
    assert rows != load_source(source="arith", arith_num_train=30, arith_num_heldout=5, arith_seed=1)
    heldout = load_benchmark("synthetic", "", arith_num_train=30, arith_num_heldout=5, arith_seed=0)
    assert len(heldout) == 5 and not {r.question for r in heldout} & {r.question for r in rows}
    bad = write_lines(tmp_path, "mine", [json.dumps({"question": "q", "answer": "1"}), "{", ""])
    with pytest.raises(DataError, match=r"mine/test.jsonl:2"):
        load_source(source="jsonl", path=bad)
    assert len(load_source(source="jsonl", path=bad, skip_bad_rows=True)) == 1
    with pytest.raises(DataError, match="source: unknown prompt source 'csv'"):
        load_source(source="csv", path=amc)


def test_load_eval_sets_in_order_cut_and_named(shared_data, tmp_path):
    sets = load_eval_sets(["amc23", "synthetic"], data_dir=shared_data, max_problems=3, arith_num_train=30,
                          arith_num_heldout=5, arith_seed=0)
    assert list(sets) == ["amc23", "synthetic"]
    assert sets["amc23"] == load_benchmark("amc23", shared_data)[:3]
    assert sets["synthetic"] == load_benchmark("synthetic", "", arith_num_train=30, arith_num_heldout=5,
                                               arith_seed=0)[:3]
    assert len(load_eval_sets(["amc23"], data_dir=shared_data)["amc23"]) == 40
    with pytest.raises(DataError, match=f"aime24 \\(data_dir {tmp_path}\\): .*not found; fetch it with"):
        load_eval_sets(["aime24"], data_dir=str(tmp_path))


def test_minerva_math_gets_one_level_per_problem_type(shared_data):
    minerva = load_jsonl(os.path.join(shared_data, "minerva_math", "test.jsonl"), level_field="type")
    with open(os.path.join(shared_data, "minerva_math", "test.jsonl")) as f:
        types = sorted({json.loads(line)["type"] for line in f if line.strip()})
    assert sorted({r.difficulty for r in minerva}) == list(range(len(types))) and len(types) > 1
    assert all(r.difficulty >= 0 for r in minerva)


def test_a_level_field_numbers_the_rows_levels_in_sorted_order(tmp_path):
    lines = [json.dumps({"question": "q", "answer": "#### 1", **extra})
             for extra in ({"meta": {"level": 10}}, {"meta": {"level": 9}}, {}, {"meta": {"level": "hard"}})]
    rows = load_jsonl(write_lines(tmp_path, "gsm8k", lines), level_field="meta.level")
    assert [r.difficulty for r in rows] == [1, 0, -1, 2]  # numbers in numeric order, then strings; none: -1
    assert all(r.difficulty == -1 for r in load_jsonl(write_lines(tmp_path, "gsm8k", lines)))
    bad = write_lines(tmp_path, "gsm8k", [lines[0], json.dumps({"question": "q", "answer": "#### 1", "meta": {
        "level": [1]}})])
    with pytest.raises(DataError, match=r":2: data.level_field 'meta.level' must hold a string or a finite number"):
        load_jsonl(bad, level_field="meta.level")
    with pytest.raises(DataError, match=r"no row has the field data.level_field='meta.levle'"):
        load_jsonl(write_lines(tmp_path, "gsm8k", lines), level_field="meta.levle")


def test_a_parquet_mixture_gets_one_level_per_data_source(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from greso_jax.run.build import prompt_levels

    row = lambda source: {"prompt": [{"role": "user", "content": "q"}], "data_source": source,  # noqa: E731
                          "reward_model": {"ground_truth": "3", "style": "rule"}}
    path = str(tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist([row("math"), row("aime"), row("math")]), path)
    rows = load_source(source="parquet", path=path, level_field="data_source")
    assert list(prompt_levels(rows)) == [1, 0, 1]  # the levels the posterior's level priors read
