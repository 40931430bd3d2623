"""Synthetic arithmetic: a seeded, finite pool of integer problems with difficulty levels,
in a format a tiny from-scratch model can learn (see greso_jax.rewards.arith).

Format, chosen so that every output digit depends on few, aligned input digits:
- prompt: operands zero-padded to their level's width, then "=", e.g. "47+85-29=";
- response: the running total after every operation, in evaluation order, each written
  least-significant digit first and zero-padded to one width per problem (the digits of the
  largest value the prompt's shape allows), ";"-separated; the last field is the answer:
  "47+85-29=" → totals 132, 103 → "231;301";
- every running total is non-negative;
- ground truth: the answer in ordinary decimal ("103").

The worked chains (levels 8-12) write every operand as wide as the totals ("085+063+051+026="),
so a prompt's operands and the response's totals share one stride: the digit a total adds sits
at the same distance back from it for every operation of the chain. Written at their own width
(three characters an operand against four a total) the tiny model did not learn the chains
(experiments/results/2026-12-02-worked-regime.md).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from greso_jax.data.rows import PromptRow
from greso_jax.rewards.arith import TOTAL_SEPARATOR

ARITH_ALPHABET = "0123456789+-*()=" + TOTAL_SEPARATOR
DATA_SOURCE = "arith"


@dataclasses.dataclass(frozen=True)
class Level:
    """A problem shape. `pattern` uses one letter per operand and the operators + - * ( )."""

    pattern: str
    widths: tuple[int, ...]  # digits of each operand's value, in order
    band: str  # "easy" / "medium" / "hard": the expected difficulty for the tiny model
    aligned: bool = False  # operands zero-padded to the totals' width (else to their own)

    @property
    def total_width(self) -> int:
        """Digits of the largest running total the shape allows: every total is padded to it."""
        letters = iter(str(10 ** w - 1) for w in self.widths)
        return answer_width("".join(next(letters) if ch.isalpha() else ch for ch in self.pattern) + "=")

    def written_widths(self) -> tuple[int, ...]:
        """The zero-padded digits each operand is written with."""
        return tuple(self.total_width for _ in self.widths) if self.aligned else self.widths


# level → shape; the level number is the row's `difficulty` label.
LEVELS: dict[int, Level] = {
    0: Level("a+b", (2, 2), "easy"),
    1: Level("a-b", (2, 2), "easy"),
    2: Level("a+b", (3, 3), "easy"),
    3: Level("a+b-c", (2, 2, 2), "medium"),
    4: Level("a+b+c", (2, 2, 2), "medium"),
    5: Level("a*b", (2, 1), "medium"),
    6: Level("(a+b)*c", (2, 2, 1), "hard"),
    7: Level("a*b", (2, 2), "hard"),
    # Worked chains: one running total per operation, so a response runs to tens of tokens and its
    # length grows with the level; a slip anywhere in the chain is carried to the answer, so
    # accuracy falls with length and the levels span mastered to out of reach.
    8: Level("a+b+c+d", (2,) * 4, "medium", aligned=True),
    9: Level("a+b-c+d-e", (2,) * 5, "medium", aligned=True),
    10: Level("a+b+c-d+e+f", (2,) * 6, "medium", aligned=True),
    11: Level("a+b-c+d+e-f+g+h", (2,) * 8, "hard", aligned=True),
    12: Level("a+b+c-d+e+f-g+h+i-j", (2,) * 10, "hard", aligned=True),
}
# Weighted towards shapes the tiny model learns within its warm start (a+b, a-b, a*b with a
# one-digit factor), so that RL starts from partial competence; the hard shapes supply the
# all-wrong groups. No shape of this mix is longer than 10 prompt + 10 response tokens.
DEFAULT_LEVEL_WEIGHTS: dict[int, float] = {0: 0.3, 1: 0.2, 2: 0.05, 3: 0.1, 4: 0.05, 5: 0.15, 6: 0.05, 7: 0.1}


def check_levels(levels) -> str | None:
    """Why `levels` (a config's level list) is invalid, or None."""
    if any(not isinstance(v, int) or isinstance(v, bool) or v not in LEVELS for v in levels):
        return f"levels must be among {sorted(LEVELS)}, got {tuple(levels)}"
    if len(set(levels)) != len(levels):
        return f"levels must be distinct, got {tuple(levels)}"
    return None


def check_level_weights(weights) -> str | None:
    """Why `weights` (data.arith_level_weights) is invalid, or None."""
    if not weights:
        return None
    if len(weights) > len(LEVELS):
        return f"at most one weight per level (levels 0-{len(LEVELS) - 1}), got {len(weights)}"
    if any(not isinstance(w, (int, float)) or isinstance(w, bool) or w < 0 for w in weights) or sum(weights) <= 0:
        return "weights must be non-negative numbers with a positive sum"
    return None


def level_weights(weights_by_level) -> dict[int, float]:
    """data.arith_level_weights (weights of levels 0, 1, ... in order; levels past the end weigh 0;
    empty: the default mix) as {level: weight} for `make_arith_pools`."""
    weights = [float(w) for w in weights_by_level]
    if not weights:
        return dict(DEFAULT_LEVEL_WEIGHTS)
    if len(weights) > len(LEVELS):
        raise ValueError(f"data.arith_level_weights: at most {len(LEVELS)} weights (levels 0-{len(LEVELS) - 1}), "
                         f"got {len(weights)}")
    return dict(enumerate(weights))


# ---------------------------------------------------------------------------------------
# Evaluation of our own prompt format (a tiny recursive-descent parser; nothing is eval'ed)


class _Parser:
    """expr := term (("+"|"-") term)*; term := atom ("*" atom)*; atom := digits | "(" expr ")".
    `evaluate` returns the value of each operation in evaluation order (the running totals)."""

    def __init__(self, text: str, operand_value, combine):
        self.text, self.pos, self.totals = text, 0, []
        self.operand_value, self.combine = operand_value, combine

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _apply(self, op: str, left: int, right: int) -> int:
        value = self.combine(op, left, right)
        self.totals.append(value)
        return value

    def expr(self) -> int:
        value = self.term()
        while self._peek() in ("+", "-"):
            op = self._peek()
            self.pos += 1
            value = self._apply(op, value, self.term())
        return value

    def term(self) -> int:
        value = self.atom()
        while self._peek() == "*":
            self.pos += 1
            value = self._apply("*", value, self.atom())
        return value

    def atom(self) -> int:
        if self._peek() == "(":
            self.pos += 1
            value = self.expr()
            if self._peek() != ")":
                raise ValueError(f"arith: unbalanced parenthesis in {self.text!r}")
            self.pos += 1
            return value
        start = self.pos
        while self._peek().isdigit():
            self.pos += 1
        if start == self.pos:
            raise ValueError(f"arith: expected a number at position {start} of {self.text!r}")
        return self.operand_value(self.text[start:self.pos])


def _exact(op: str, left: int, right: int) -> int:
    return left + right if op == "+" else left - right if op == "-" else left * right


def _upper_bound(op: str, left: int, right: int) -> int:
    return left + right if op == "+" else left if op == "-" else left * right


def _totals(question: str, operand_value, combine) -> list[int]:
    body = question[:-1] if question.endswith("=") else question
    parser = _Parser(body, operand_value, combine)
    value = parser.expr()
    if parser.pos != len(body):
        raise ValueError(f"arith: unexpected {body[parser.pos]!r} in {question!r}")
    return parser.totals or [value]


def running_totals(question: str) -> list[int]:
    """The value after each operation of an arith prompt ("47+85-29=" → [132, 103])."""
    return _totals(question, int, _exact)


def answer_width(question: str) -> int:
    """Digits of the largest running total the prompt's shape allows (operands all 9s,
    subtracting 0): the width every total of the response is padded to."""
    return len(str(max(_totals(question, lambda digits: 10 ** len(digits) - 1, _upper_bound))))


def solution_text(row: PromptRow) -> str:
    """The full target response for an arith prompt (what precedes EOS)."""
    totals = running_totals(row.question)
    if min(totals) < 0:
        raise ValueError(f"arith: {row.question!r} has a negative running total")
    # An aligned level's padded operands would overstate the bound: its width comes from the shape.
    level = LEVELS.get(row.difficulty)
    width = level.total_width if level is not None and level.aligned else answer_width(row.question)
    return TOTAL_SEPARATOR.join(str(t).zfill(width)[::-1] for t in totals)


# ---------------------------------------------------------------------------------------
# Generation


def _operands(rng: np.random.Generator, level: Level) -> list[int]:
    """Random operands for `level`, drawing subtrahends so every running total stays >= 0."""
    letters = [ch for ch in level.pattern if ch.isalpha()]
    values: list[int] = []
    total = 0
    for i, (letter, width) in enumerate(zip(letters, level.widths)):
        op = level.pattern[level.pattern.index(letter) - 1] if i else "+"
        high = 10 ** width - 1
        if op == "-":
            high = min(high, total)
        values.append(int(rng.integers(0, high + 1)))
        total = _exact(op, total, values[-1])
    return values


def make_problem(rng: np.random.Generator, level: int) -> str:
    """One prompt of the given level, e.g. "47+85-29="."""
    shape = LEVELS[level]
    values = iter(_operands(rng, shape))
    widths = iter(shape.written_widths())
    return "".join(str(next(values)).zfill(next(widths)) if ch.isalpha() else ch for ch in shape.pattern) + "="


def pool_capacity(weights: dict[int, float]) -> int:
    """How many distinct problems the levels of positive weight in `weights` (level → weight) hold."""
    return sum(math.prod(10 ** w for w in LEVELS[level].widths) for level, weight in weights.items() if weight > 0)


def _draw_distinct(rng: np.random.Generator, weights: dict[int, float], count: int, taken=frozenset(),
                   who: str = "make_arith_pools") -> list[tuple[str, int]]:
    """`count` distinct (question, level) pairs, levels drawn by `weights`, none of them in `taken`."""
    unknown = set(weights) - set(LEVELS)
    if unknown or not weights or min(weights.values()) < 0 or sum(weights.values()) <= 0:
        raise ValueError(f"level_weights: need non-negative weights over levels {sorted(LEVELS)}, got {weights}")
    levels = np.array(sorted(weights))
    probabilities = np.array([weights[level] for level in levels], dtype=np.float64)
    probabilities /= probabilities.sum()
    capacity = pool_capacity(weights)
    if count + len(taken) > capacity:
        raise ValueError(f"{who}: {count} distinct problems requested beside {len(taken)} taken, levels {weights} "
                         f"have at most {capacity}")
    drawn: dict[str, int] = {}
    misses = 0
    while len(drawn) < count:
        for level in rng.choice(levels, size=count - len(drawn), p=probabilities):
            question = make_problem(rng, int(level))
            if question in drawn or question in taken:
                misses += 1
            else:
                drawn[question] = int(level)
        if misses > 20 * count + 1000:
            raise ValueError(f"{who}: could not draw {count} distinct problems from levels {weights}")
    return list(drawn.items())


def _rows(items) -> list[PromptRow]:
    return [PromptRow(prompt_id=i, question=q, ground_truth=str(running_totals(q)[-1]), data_source=DATA_SOURCE,
                      difficulty=level) for i, (q, level) in enumerate(items)]


def make_arith_pools(num_train: int, num_heldout: int, seed: int,
                     level_weights: dict[int, float] | None = None) -> tuple[list[PromptRow], list[PromptRow]]:
    """Disjoint training and held-out pools of distinct problems, deterministic in `seed`.
    `level_weights` (level → weight) is the difficulty knob; prompt ids are dense per pool."""
    if num_train < 0 or num_heldout < 0:
        raise ValueError(f"make_arith_pools: sizes must be >= 0, got {num_train}, {num_heldout}")
    weights = dict(DEFAULT_LEVEL_WEIGHTS if level_weights is None else level_weights)
    problems = _draw_distinct(np.random.default_rng(seed), weights, num_train + num_heldout)
    return _rows(problems[:num_train]), _rows(problems[num_train:])


def make_apart_pool(num: int, num_train: int, num_heldout: int, seed: int,
                    level_weights: dict[int, float] | None = None) -> list[PromptRow]:
    """`num` distinct problems of the same generator settings, none in the training or held-out pool
    of `make_arith_pools(num_train, num_heldout, seed, level_weights)`: a warm start's own supervision
    set, so that RL meets prompts the policy has never seen. Deterministic in `seed` (its own stream)."""
    weights = dict(DEFAULT_LEVEL_WEIGHTS if level_weights is None else level_weights)
    train, heldout = make_arith_pools(num_train, num_heldout, seed, weights)
    taken = frozenset(row.question for row in train + heldout)
    return _rows(_draw_distinct(np.random.default_rng([seed, 1]), weights, num, taken, who="make_apart_pool"))


def difficulty_band(level: int) -> str:
    """"easy" / "medium" / "hard" label of a level."""
    return LEVELS[level].band
