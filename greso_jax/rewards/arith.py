"""Exact-match grader for the synthetic arithmetic task (format: greso_jax.data.arith).

A response is the running totals of the problem, each written least-significant digit
first and zero-padded to the problem's width, separated by ";": "47+85-29=" has the totals
132 and 103, written "231;301". The final answer is the last ";"-separated field; it is read back to front
and compared as an integer with the ground truth (plain decimal, most-significant first).
"""

from __future__ import annotations

TOTAL_SEPARATOR = ";"
MAX_ANSWER_DIGITS = 18


def final_answer(response: str) -> int | None:
    """The integer written (LSD first) in the last ";"-field of `response`, or None."""
    field = response.strip().rsplit(TOTAL_SEPARATOR, 1)[-1].strip()
    if not field or len(field) > MAX_ANSWER_DIGITS or not (field.isascii() and field.isdigit()):
        return None
    return int(field[::-1])


def is_correct(response: str, ground_truth: str) -> bool:
    """Whether the response's final field, read LSD first, equals the integer ground truth."""
    answer = final_answer(response)
    try:
        gold = int(ground_truth.strip())
    except ValueError:
        raise ValueError(f"arith ground truth {ground_truth!r} is not an integer") from None
    return answer is not None and answer == gold
