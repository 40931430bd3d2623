"""Prompt sources: verl parquet, the benchmark jsonl formats of ../shared/data, synthetic
arithmetic; all become lists of `PromptRow` with dense integer prompt ids.

Prompt ids are row positions (0 … N−1 after bad rows are skipped) in file order, so they are
stable across epochs and restarts as long as the file and `skip_bad_rows` stay the same;
the selectors index their per-prompt history arrays by them.

A file's rows can carry a level (`PromptRow.difficulty`, which the arithmetic pools set): the
values of a `level_field` (a dotted path into the record, e.g. "type", "data_source" or
"extra_info.level"), numbered in sorted order of the distinct values (numbers before strings),
-1 where a row has none. Selectors that use levels (the posterior's level priors) group prompts by it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from typing import Any, Callable, Sequence

from greso_jax.data import arith
from greso_jax.data.rows import PromptRow, PromptRows
from greso_jax.data import catalog
from greso_jax.rewards.math import gold_answer

_log = logging.getLogger(__name__)

JSONL_FORMATS = ("gsm8k", "math500", "aime24", "amc23", "minerva_math", "olympiadbench", "gaokao2023en")
BENCHMARKS = JSONL_FORMATS + ("synthetic",)


class DataError(ValueError):
    """Bad prompt data; the message names the file and the 1-based row."""


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"field {field!r} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"field {field!r} is empty")
    return value


def _first_field(record: dict, names: tuple[str, ...]) -> tuple[str, Any]:
    for name in names:
        if record.get(name) is not None:
            return name, record[name]
    raise ValueError(f"missing field: one of {', '.join(names)}")


def _number_text(value: Any, field: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"field {field!r} must be a finite number or a string, got {value!r}")
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _answer_text(value: Any, field: str) -> str:
    if isinstance(value, str):
        return _text(value, field)
    return _number_text(value, field)


def _boxed_gold(record: dict, field: str) -> str:
    solution = _text(record.get(field), field)
    answer = gold_answer(solution)
    if "\\boxed" not in solution and "\\fbox" not in solution:
        raise ValueError(f"field {field!r} has no \\boxed{{}} answer")
    return answer


def _gsm8k_gold(record: dict) -> str:
    solution = _text(record.get("answer"), "answer")
    if "####" not in solution:
        raise ValueError("field 'answer' has no '#### <answer>' line")
    return gold_answer(solution)


def _olympiad_gold(record: dict) -> str:
    answers = record.get("final_answer")
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        raise ValueError("field 'final_answer' must be a non-empty list of non-empty strings")
    return ", ".join(a.strip().strip("$").strip() for a in answers)


def _generic_gold(record: dict) -> str:
    field, value = _first_field(record, ("answer", "final_answer", "ground_truth", "solution"))
    if isinstance(value, list):
        return _olympiad_gold({"final_answer": value})
    return gold_answer(_answer_text(value, field))


def _gaokao_row(record: dict) -> tuple[str, str]:
    """Two rows of gaokao2023en have an empty answer and carry it at the end of the question
    ("...answers: $\\frac{3}{10}$", "...Answer: A"): split it off there."""
    question = _text(record.get("question"), "question")
    answer = record.get("answer")
    if isinstance(answer, str) and not answer.strip():
        match = _TRAILING_ANSWER.search(question)
        if match:
            return question[:match.start()].rstrip(), gold_answer(match.group(1))
    return question, gold_answer(_answer_text(answer, "answer"))


def _field_value(record: dict, path: str) -> Any:
    """The value at a dotted path of a record (None where a part is missing)."""
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _level_key(record: dict, level_field: str):
    """The record's level as a sort key (numbers in numeric order, then strings); None: no level."""
    if not level_field:
        return None
    value = _field_value(record, level_field)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or (
            isinstance(value, float) and not math.isfinite(value)):
        raise ValueError(f"data.level_field {level_field!r} must hold a string or a finite number, "
                         f"got {value!r:.80}")
    return (1, value) if isinstance(value, str) else (0, float(value))


def _number_levels(rows: PromptRows, keys: list, level_field: str) -> PromptRows:
    """Sets each row's difficulty to the rank of its level key among the distinct keys (-1: none)."""
    present = {k for k in keys if k is not None}
    if level_field and not present:  # a misspelt path would switch the level priors off without a word
        raise DataError(f"{rows.path}: no row has the field data.level_field={level_field!r}")
    rank = {key: i for i, key in enumerate(sorted(present))}
    for row, key in zip(rows, keys):
        row.difficulty = rank.get(key, -1)
    return rows


def _reader(question_fields: tuple[str, ...], read_gold: Callable[[dict], str]):
    def read(record: dict) -> tuple[str, str]:
        field, question = _first_field(record, question_fields)
        return _text(question, field), read_gold(record)
    return read


_TRAILING_ANSWER = re.compile(r"\s*answers?:\s*(\S.{0,200}?)\s*$", re.IGNORECASE)

# format → record → (question, gold answer)
_JSONL_READERS: dict[str, Callable[[dict], tuple[str, str]]] = {
    "gsm8k": _reader(("question",), _gsm8k_gold),
    "math500": _reader(("question", "problem"), lambda r: _boxed_gold(r, "answer" if "answer" in r else "solution")),
    "aime24": _reader(("problem", "question"), lambda r: _answer_text(r.get("answer"), "answer")),
    "amc23": _reader(("question", "problem"), lambda r: _answer_text(r.get("answer"), "answer")),
    "minerva_math": _reader(("problem", "question"), lambda r: _boxed_gold(r, "solution")),
    "olympiadbench": _reader(("question",), _olympiad_gold),
    "gaokao2023en": _gaokao_row,
    "generic": _reader(("question", "problem", "prompt"), _generic_gold),
}


def detect_format(path: str) -> str:
    """The jsonl format named by the file's folder (e.g. .../math500/test.jsonl), else "generic"."""
    folder = os.path.basename(os.path.dirname(os.path.abspath(path))).lower()
    return folder if folder in JSONL_FORMATS else "generic"


def _report_skipped(rows: PromptRows, path: str, first: str) -> None:
    """One warning per file for the rows data.skip_bad_rows dropped, with the first of them."""
    if rows.num_bad_rows:
        n = rows.num_bad_rows
        _log.warning(f"{path}: skipped {n} bad row{'s' if n > 1 else ''} (data.skip_bad_rows); the first: {first}")


def _check_not_empty(rows: PromptRows, path: str) -> PromptRows:
    if not rows:
        raise DataError(f"{path}: no usable prompts ({rows.num_bad_rows} bad rows skipped)")
    return rows


def load_jsonl(path: str, *, format: str | None = None, skip_bad_rows: bool = False,
               level_field: str = "") -> PromptRows:
    """Rows of a jsonl benchmark/training file; `format` defaults to the folder's name; levels from
    `level_field` (module docstring)."""
    format = format or detect_format(path)
    if format not in _JSONL_READERS:
        raise DataError(f"{path}: unknown jsonl format {format!r} (one of {', '.join(_JSONL_READERS)})")
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    read_row = _JSONL_READERS[format]
    rows, first_bad, levels = PromptRows(path=path), "", []
    with open(path, "rb") as f:  # decoded line by line: a non-UTF-8 line is a bad row like any other
        for line_number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
                if not isinstance(record, dict):
                    raise ValueError(f"expected a JSON object, got {type(record).__name__}")
                question, gold = read_row(record)
                row = PromptRow(prompt_id=len(rows), question=question, ground_truth=gold, data_source=format,
                                where=f"{path}:{line_number}")
                if not row.ground_truth.strip():
                    raise ValueError("the gold answer is empty")
                level = _level_key(record, level_field)
            except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
                if not skip_bad_rows:
                    raise DataError(f"{path}:{line_number}: {e}") from None
                rows.num_bad_rows += 1
                first_bad = first_bad or f"line {line_number}: {e}"
                continue
            rows.append(row)
            levels.append(level)
    _report_skipped(rows, path, first_bad)
    return _number_levels(_check_not_empty(rows, path), levels, level_field)


def _parquet_row(record: dict, prompt_id: int) -> PromptRow:
    messages = record.get("prompt")
    if not isinstance(messages, list) or not messages:
        raise ValueError("field 'prompt' must be a non-empty list of {role, content} messages")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("content"), str) or "role" not in message:
            raise ValueError("field 'prompt' has a message without string 'content' and 'role'")
    user = [m["content"] for m in messages if m["role"] == "user"]
    if not user or not user[-1].strip():
        raise ValueError("field 'prompt' has no non-empty user message")
    reward_model = record.get("reward_model")
    if not isinstance(reward_model, dict):
        raise ValueError("field 'reward_model' must be a struct with 'ground_truth'")
    gold = _answer_text(reward_model.get("ground_truth"), "reward_model.ground_truth")
    source = record.get("data_source")
    return PromptRow(prompt_id=prompt_id, question=user[-1], ground_truth=gold_answer(gold),
                     data_source=source if isinstance(source, str) and source else "parquet",
                     messages=[{"role": m["role"], "content": m["content"]} for m in messages])


def load_verl_parquet(path: str, *, skip_bad_rows: bool = False, level_field: str = "") -> PromptRows:
    """Rows of a verl-format parquet: `prompt` (chat list), `reward_model.ground_truth`, `data_source`;
    levels from `level_field` (module docstring)."""
    import pyarrow.parquet as pq

    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several unrelated types for a corrupt file
        raise DataError(f"{path}: not a readable parquet file: {e}") from None
    rows, first_bad, levels = PromptRows(path=path), "", []
    for row_number, record in enumerate(table.to_pylist(), start=1):
        try:
            row, level = _parquet_row(record, len(rows)), _level_key(record, level_field)
            row.where = f"{path}: row {row_number}"
            rows.append(row)
            levels.append(level)
        except ValueError as e:
            if not skip_bad_rows:
                raise DataError(f"{path}: row {row_number}: {e}") from None
            rows.num_bad_rows += 1
            first_bad = first_bad or f"row {row_number}: {e}"
    _report_skipped(rows, path, first_bad)
    return _number_levels(_check_not_empty(rows, path), levels, level_field)


def load_benchmark(name: str, data_dir: str, *, arith_num_heldout: int = 600, arith_seed: int = 1234,
                   arith_num_train: int = 3000, arith_level_weights: Sequence[float] = ()) -> PromptRows:
    """A named evaluation set: `data_dir/<name>/test.jsonl`, or "synthetic" (the arithmetic
    held-out pool for the given generator settings)."""
    if name == "synthetic":
        _, heldout = arith.make_arith_pools(arith_num_train, arith_num_heldout, arith_seed,
                                            arith.level_weights(arith_level_weights))
        return _check_not_empty(PromptRows(heldout, path="synthetic"), "synthetic")
    if name not in JSONL_FORMATS:
        raise DataError(f"unknown benchmark {name!r} (one of {', '.join(BENCHMARKS)})")
    try:  # "" = the fetch cache / $GRESO_DATA
        return load_jsonl(catalog.locate(name, os.path.join(name, "test.jsonl"), data_dir), format=name)
    except catalog.MissingDataError as e:
        raise DataError(str(e)) from None


def load_eval_sets(benchmarks: Sequence[str], *, data_dir: str = "", max_problems: int = 0,
                   arith_num_train: int = 3000, arith_num_heldout: int = 600,
                   arith_seed: int = 1234, arith_level_weights: Sequence[float] = ()) -> dict[str, PromptRows]:
    """{name: rows} for each of `benchmarks`, in order, each cut to its first `max_problems`
    rows (0: all); "synthetic" is the arithmetic held-out pool of the given generator settings."""
    sets = {}
    for name in benchmarks:
        try:
            rows = load_benchmark(name, data_dir, arith_num_train=arith_num_train,
                                  arith_num_heldout=arith_num_heldout, arith_seed=arith_seed,
                                  arith_level_weights=arith_level_weights)
        except DataError as e:
            where = f"data_dir {data_dir}" if data_dir else "the data cache: $GRESO_DATA or ~/.cache/greso_jax/data"
            raise DataError(f"{name} ({where}): {e}") from None
        if max_problems:
            rows = PromptRows(rows[:max_problems], path=rows.path, num_bad_rows=rows.num_bad_rows)
        sets[name] = rows
    return sets


SOURCES = ("arith", "parquet", "jsonl")


def conflicting_golds(rows: Sequence[PromptRow]) -> list[list[PromptRow]]:
    """The rows of each prompt (question text, surrounding whitespace ignored) that occurs more than
    once with different gold answers, in file order: one list per such prompt."""
    by_question: dict[str, list[PromptRow]] = {}
    for row in rows:
        by_question.setdefault(row.question.strip(), []).append(row)
    return [same for same in by_question.values() if len({r.ground_truth.strip() for r in same}) > 1]


def check_golds(rows: PromptRows, *, allow_conflicts: bool) -> PromptRows:
    """Reports prompts that occur with different gold answers (file, rows, golds): a DataError
    unless `allow_conflicts` (data.allow_conflicting_golds), then one warning. Such a prompt is
    graded wrong against one of its golds whatever the policy answers."""
    conflicts = conflicting_golds(rows)
    if not conflicts:
        return rows
    first = conflicts[0]
    shown = "; ".join(f"{r.where or f'prompt {r.prompt_id}'}: {r.ground_truth!r}" for r in first[:4])
    more = f" (and {len(conflicts) - 1} more prompts)" if len(conflicts) > 1 else ""
    question = first[0].question.strip()
    question = question if len(question) <= 80 else question[:30] + " … " + question[-50:]  # a shared instruction
    message = (f"{rows.path}: the prompt {question!r} has different gold answers ({shown})"
               f"{more}")
    if not allow_conflicts:
        raise DataError(f"{message}; fix the file, or set data.allow_conflicting_golds=true to train on every row")
    _log.warning(f"{message}; training on every row (data.allow_conflicting_golds)")
    return rows


def load_source(*, source: str, path: str = "", skip_bad_rows: bool = False, arith_num_train: int = 3000,
                arith_num_heldout: int = 600, arith_seed: int = 1234,
                arith_level_weights: Sequence[float] = (), level_field: str = "",
                allow_conflicting_golds: bool = False) -> PromptRows:
    """The training prompts: the arithmetic training pool of the given generator settings
    (source "arith", whose rows carry their levels), or the verl parquet / jsonl file at `path`
    (levels from `level_field`, if given; prompts with conflicting golds refused: `check_golds`)."""
    if source == "arith":
        train, _ = arith.make_arith_pools(arith_num_train, arith_num_heldout, arith_seed,
                                          arith.level_weights(arith_level_weights))
        return _check_not_empty(PromptRows(train, path="arith"), "arith")
    if source == "parquet":
        rows = load_verl_parquet(path, skip_bad_rows=skip_bad_rows, level_field=level_field)
    elif source == "jsonl":
        rows = load_jsonl(path, skip_bad_rows=skip_bad_rows, level_field=level_field)
    else:
        raise DataError(f"source: unknown prompt source {source!r} (one of {', '.join(SOURCES)})")
    return check_golds(rows, allow_conflicts=allow_conflicting_golds)
