"""Math answer grading: extract the final answer of a response, compare it with the gold
answer through math-verify (LaTeX → sympy), with length bounds and a per-item timeout.

Model output is untrusted. Nothing from it is evaluated as Python: only math-verify's LaTeX
parser is used (its plain-expression parser calls sympy's `parse_expr`, i.e. `eval`), inputs
are cut to fixed lengths, expressions whose evaluation would explode (power towers, huge
factorials) are refused before sympy simplifies them, and every item runs under a deadline
(a SIGALRM interval timer, so only in a process's main thread; elsewhere the worker pool's
hard kill is the backstop).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import re
import signal
import threading
from decimal import Decimal, InvalidOperation

SHAPINGS = ("binary", "greso")
MAX_RESPONSE_CHARS = 32_000  # only the tail is searched: the final answer sits at the end
MAX_ANSWER_CHARS = 400  # longer "answers" are not graded (no real gold is that long)
MAX_EXPRESSION_NODES = 2_000
MAX_SAFE_EXPONENT = 10_000  # |exponent| above this on a numeric base is refused
MAX_SAFE_FACTORIAL = 1_000
GRESO_FORMAT_REWARD = 0.1  # GRESO's shaping: a boxed but wrong answer

# We disable math-verify's SIGALRM timeouts on purpose (ours wraps the whole item); silence its notice.
for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).setLevel(logging.ERROR)

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_ANSWER_IS = re.compile(r"(?:final answer|the answer)\s*(?:is|:)\s*:?\s*(.{1,200}?)\s*(?:\.\s*)?$",
                        re.IGNORECASE | re.DOTALL)
_PLAIN_NUMBER = re.compile(r"-?(?:\d+|\d{1,3}(?:,\d{3})+)(?:\.\d+)?")
_SCIENTIFIC = re.compile(r"^(-?\d+(?:\.\d+)?)[eE]([+-]?\d+)$")


class GradingTimeout(BaseException):
    """Raised by the item deadline. A BaseException so that the broad `except Exception`
    blocks inside math-verify and sympy cannot swallow it."""


@dataclasses.dataclass(frozen=True)
class Grade:
    """One graded item. status: "ok", "timeout" (deadline hit) or "error" (grader raised)."""

    reward: float
    correct: bool
    status: str = "ok"


# ---------------------------------------------------------------------------------------
# Answer extraction (linear scans over bounded text; no regex backtracking on model output)


def _closing_braces(text: str) -> dict[int, int]:
    """Position of each "{" → position of its matching "}" (unescaped braces; one pass)."""
    pairs, stack = {}, []
    for i, ch in enumerate(text):
        if ch in "{}" and i and text[i - 1] == "\\":
            continue
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            pairs[stack.pop()] = i
    return pairs


def _last_boxed(text: str) -> str | None:
    """Content of the last complete \\boxed{...} / \\fbox{...} (or `\\boxed 5`) in `text`."""
    pairs = None
    end = len(text)
    while True:
        start = max(text.rfind(cmd, 0, end) for cmd in _BOX_COMMANDS)
        if start < 0:
            return None
        cmd = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
        after = start + len(cmd)
        rest = text[after:after + 1]
        if rest == "{":
            pairs = _closing_braces(text) if pairs is None else pairs
            if after in pairs:
                return text[after + 1:pairs[after]]
        elif rest == " ":
            token = text[after + 1:after + 1 + MAX_ANSWER_CHARS].split("$", 1)[0].split()
            if token:
                return token[0]
        end = start  # truncated or malformed box: try the one before it


def _extract(text: str, answer_is_fallback: bool) -> tuple[str | None, bool]:
    """(final answer or None, whether it came from a box)."""
    text = text[-MAX_RESPONSE_CHARS:]
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip(), True
    if answer_is_fallback:
        match = _ANSWER_IS.search(text[-400:])
        if match:
            return match.group(1).strip().strip("$").strip(), False
    return None, False


def extract_answer(text: str, *, answer_is_fallback: bool = True) -> str | None:
    """The final answer written in `text`: the last \\boxed{}/\\fbox{} (nested braces
    allowed); else, optionally, what follows a closing "The answer is" / "Final answer:";
    else None."""
    return _extract(text, answer_is_fallback)[0]


def gold_answer(ground_truth: str) -> str:
    """The answer inside a gold field: after GSM8K's "####", else the last \\boxed{} of a
    solution, else the field itself without surrounding `$`."""
    if "####" in ground_truth:
        return ground_truth.rsplit("####", 1)[1].strip()
    boxed = _last_boxed(ground_truth)
    if boxed is not None:
        return boxed.strip()
    return ground_truth.strip().strip("$").strip()


# ---------------------------------------------------------------------------------------
# Comparison


def _normalise(answer: str) -> str:
    out = answer.strip().strip("$").rstrip(".").strip()
    for old, new in (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\left", ""), ("\\right", ""),
                     ("\\!", ""), ("\\,", ""), ("\\;", ""), ("{,}", ","), (" ", "")):
        out = out.replace(old, new)
    return out


def _plain_number(answer: str) -> Decimal | None:
    if not _PLAIN_NUMBER.fullmatch(answer):
        return None
    try:
        return Decimal(answer.replace(",", ""))
    except InvalidOperation:
        return None


def _strip_percent(answer: str) -> str:
    return answer.removesuffix("\\%").removesuffix("%")


def _latex_for_parser(answer: str) -> str:
    """Rewrites forms the LaTeX parser misreads (1.5e3 would become 1.5·e·3)."""
    match = _SCIENTIFIC.fullmatch(answer)
    if match:
        return f"{match.group(1)}\\times 10^{{{match.group(2)}}}"
    return answer


def _log_scale(expr) -> float:
    """log of an upper bound on max(|x|, 1/|x|) for a numeric sympy expression, computed in
    floating point without evaluating it (inf when unknown or astronomically large)."""
    import sympy

    if expr.is_Rational:
        return math.log(max(abs(expr.p), abs(expr.q), 1))
    if expr.is_Float:
        value = abs(float(expr))
        return abs(math.log(value)) if value else 0.0
    if isinstance(expr, sympy.NumberSymbol) or expr is sympy.I:
        return 2.0
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        logs = [_log_scale(arg) for arg in expr.args]
        return sum(logs) if expr.is_Mul else max(logs) + math.log(len(logs))
    if isinstance(expr, sympy.Pow):
        base, exponent = (_log_scale(arg) for arg in expr.args)
        return math.inf if exponent > 700 else math.exp(exponent) * base
    if isinstance(expr, sympy.factorial):
        n = _log_scale(expr.args[0])
        return math.inf if n > 14 else math.lgamma(math.exp(n) + 1)
    return math.inf


def _is_explosive(expr) -> bool:
    """True when simplifying `expr` could take unbounded time or memory: numeric power
    towers, numeric powers with huge exponents, factorials of huge numbers, huge trees."""
    import sympy

    nodes = 0
    for node in sympy.preorder_traversal(expr):
        nodes += 1
        if nodes > MAX_EXPRESSION_NODES:
            return True
        if isinstance(node, sympy.Pow):
            base, exponent = node.args
            if base.is_number and exponent.is_number and _log_scale(base) > 0 \
                    and _log_scale(exponent) > math.log(MAX_SAFE_EXPONENT):
                return True
        elif isinstance(node, (sympy.factorial, sympy.factorial2, sympy.subfactorial, sympy.gamma)):
            if not node.args[0].is_number or _log_scale(node.args[0]) > math.log(MAX_SAFE_FACTORIAL):
                return True
        elif isinstance(node, sympy.Integer) and abs(node.p).bit_length() > 4_000:
            return True
    return False


def _parse_latex(answer: str) -> list:
    from math_verify import LatexExtractionConfig, parse

    config = [LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=True)]
    # math-verify's own timeouts use signal.alarm and would cancel ours: the caller's deadline rules.
    return parse("\\boxed{" + _latex_for_parser(answer) + "}", extraction_config=config, parsing_timeout=None)


def answers_match(predicted: str, gold: str) -> bool:
    """Mathematical equivalence of two extracted answers (no deadline of its own)."""
    predicted, gold = predicted[:MAX_ANSWER_CHARS + 1], gold
    if len(predicted) > MAX_ANSWER_CHARS:
        return False
    norm_pred, norm_gold = _normalise(predicted), _normalise(gold)
    if norm_pred == norm_gold and norm_pred:
        return True
    num_pred, num_gold = _plain_number(norm_pred), _plain_number(norm_gold)
    if num_pred is not None and num_gold is not None:
        return num_pred == num_gold
    # "12.5\%" against 12.5: the percent sign is a unit here (math-verify only sometimes agrees)
    pct_pred, pct_gold = _plain_number(_strip_percent(norm_pred)), _plain_number(_strip_percent(norm_gold))
    if pct_pred is not None and pct_pred == pct_gold:
        return True
    from math_verify import verify

    parsed_gold = _parse_latex(gold)
    parsed_pred = _parse_latex(predicted)
    if not parsed_gold or not parsed_pred:
        return False
    if any(_is_explosive(p) for p in parsed_pred if not isinstance(p, str)):
        return False
    return bool(verify(parsed_gold, parsed_pred, timeout_seconds=None))


# ---------------------------------------------------------------------------------------
# Deadline and public entry points


_DEADLINE_REARM_S = 0.05  # a dropped timeout fires again after this long


@contextlib.contextmanager
def deadline(seconds: float):
    """Raises GradingTimeout in the block after `seconds` (SIGALRM interval timer). Outside
    the main thread signals are unavailable and the block runs without a deadline."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    active = [True]

    def on_alarm(signum, frame):
        if active[0]:
            # The exception lands wherever Python is when the signal arrives; inside a finalizer or
            # a C callback (JAX's garbage-collection hook, for one) it is reported as unraisable
            # and dropped. Re-arming first means a dropped timeout fires again shortly.
            signal.setitimer(signal.ITIMER_REAL, _DEADLINE_REARM_S)
            raise GradingTimeout(f"grading exceeded {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        while True:  # a timeout raised before the flag is cleared must not skip the disarm
            try:
                active[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                break
            except GradingTimeout:
                continue


def warm_up() -> None:
    """Imports sympy / math-verify and builds the LaTeX parser (about a second), so that the
    first graded item does not spend its deadline on imports."""
    answers_match("\\frac{1}{2}", "0.5")


def _check_shaping(shaping: str) -> None:
    if shaping not in SHAPINGS:
        raise ValueError(f"shaping: {shaping!r} is not one of {', '.join(SHAPINGS)}")


def _wrong_reward(shaping: str, boxed: bool) -> float:
    return GRESO_FORMAT_REWARD if shaping == "greso" and boxed else 0.0


def grade(response: str, ground_truth: str, shaping: str = "binary", timeout_s: float = 2.0) -> Grade:
    """Grades one response against a gold field; never raises on bad model output."""
    _check_shaping(shaping)
    boxed = False
    try:
        with deadline(timeout_s):
            predicted, boxed = _extract(response, answer_is_fallback=True)
            correct = predicted is not None and answers_match(predicted, gold_answer(ground_truth))
    except GradingTimeout:
        return Grade(_wrong_reward(shaping, boxed), False, "timeout")
    except (Exception, RecursionError):  # a parser failure on hostile text is a wrong answer
        return Grade(_wrong_reward(shaping, boxed), False, "error")
    return Grade(1.0, True) if correct else Grade(_wrong_reward(shaping, boxed), False)


def is_correct(response: str, ground_truth: str, timeout_s: float = 2.0) -> bool:
    """Whether the response's final answer equals the gold answer (False on timeout)."""
    return grade(response, ground_truth, timeout_s=timeout_s).correct


def score(response: str, ground_truth: str, shaping: str = "binary", timeout_s: float = 2.0) -> float:
    """Reward of one response. binary: 1.0 correct, 0.0 otherwise. greso: 1.0 correct,
    0.1 boxed but wrong, 0.0 without a boxed answer. A timeout scores as wrong."""
    return grade(response, ground_truth, shaping, timeout_s).reward
