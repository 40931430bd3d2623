"""Math grading: a hand-checked table of (response, gold, expected) cases, answer
extraction, reward shaping, and adversarial inputs (timeouts, no code execution)."""

import time

import pytest

from greso_jax.rewards import math as grading

B = "The answer is \\boxed{%s}."  # wraps an answer in a boxed response

CASES = [
    # integers, negatives, thousands separators
    (B % "5", "5", True),
    (B % "6", "5", False),
    (B % "-5", "-5", True),
    (B % "5", "-5", False),
    (B % "-5", "5", False),
    (B % "0", "0", True),
    (B % "-0", "0", True),
    (B % "1,000", "1000", True),
    (B % "1{,}000", "1000", True),
    (B % "1\\,000", "1000", True),
    (B % "12,345,678", "12345678", True),
    (B % "1000", "1,000", True),
    (B % "1,001", "1000", False),
    (B % "007", "7", True),
    (B % "10^{10}", "10000000000", True),
    (B % "2^{10}", "1024", True),
    (B % "2^{10}", "1023", False),
    (B % "3!", "6", True),
    (B % "\\binom{5}{2}", "10", True),
    (B % "\\binom{5}{2}", "20", False),
    # decimals, fractions
    (B % "0.5", "\\frac{1}{2}", True),
    (B % "\\frac{1}{2}", "0.5", True),
    (B % "\\dfrac{1}{2}", "\\frac12", True),
    (B % "\\tfrac{3}{4}", "0.75", True),
    (B % "1/2", "\\frac{1}{2}", True),
    (B % "\\frac{2}{4}", "\\frac{1}{2}", True),
    (B % "\\frac{1}{3}", "0.3333", False),
    (B % "0.333333333", "\\frac{1}{3}", True),
    (B % "\\frac{1}{3}", "\\frac{1}{4}", False),
    (B % "-\\frac{3}{2}", "-1.5", True),
    (B % "\\frac{-3}{2}", "-\\frac{3}{2}", True),
    (B % "\\frac{3}{2}", "-\\frac{3}{2}", False),
    (B % "3.0", "3", True),
    (B % "3.10", "3.1", True),
    (B % "3.14", "3.15", False),
    (B % ".5", "0.5", True),
    (B % "2\\frac{1}{2}", "\\frac{5}{2}", True),
    (B % "\\frac{7}{2}", "3.5", True),
    (B % "\\frac{22}{7}", "3.14", False),
    (B % "1.5", "\\frac{3}{2}", True),
    # percentages
    (B % "50\\%", "50", True),
    (B % "50\\%", "0.5", True),
    (B % "50", "50\\%", True),
    (B % "25\\%", "50\\%", False),
    (B % "12.5\\%", "12.5", True),
    (B % "40\\%", "60", False),
    # roots, pi
    (B % "\\sqrt{8}", "2\\sqrt{2}", True),
    (B % "2\\sqrt{2}", "\\sqrt{8}", True),
    (B % "\\sqrt{2}", "\\sqrt{3}", False),
    (B % "\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}2", True),
    (B % "\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}", True),
    (B % "\\sqrt[3]{27}", "3", True),
    (B % "3\\sqrt{3}", "\\sqrt{27}", True),
    (B % "\\sqrt{3}", "1.732", False),
    (B % "\\pi", "\\pi", True),
    (B % "\\frac{\\pi}{2}", "\\pi/2", True),
    (B % "2\\pi", "\\pi", False),
    (B % "\\frac{3\\pi}{4}", "\\frac{3}{4}\\pi", True),
    (B % "4\\pi", "4 \\pi", True),
    (B % "\\pi r^2", "\\pi r^{2}", True),
    (B % "6\\pi", "18.85", False),
    (B % "1+\\sqrt{5}", "\\sqrt{5}+1", True),
    (B % "1-\\sqrt{5}", "1+\\sqrt{5}", False),
    # degrees
    (B % "30^\\circ", "30", True),
    (B % "30^{\\circ}", "30", True),
    (B % "30", "30^\\circ", True),
    (B % "45^\\circ", "30^\\circ", False),
    (B % "90^\\circ", "90", True),
    (B % "120^\\circ", "120^{\\circ}", True),
    # units in \text{}
    (B % "5\\text{ cm}", "5", True),
    (B % "5 \\text{cm}", "5", True),
    (B % "12\\text{ meters}", "12", True),
    (B % "\\$18", "18", True),
    (B % "18 \\text{ dollars}", "18", True),
    (B % "7\\text{ cm}", "5", False),
    (B % "3\\text{ hours}", "3", True),
    (B % "\\text{(B)}", "B", True),
    (B % "\\text{B}", "B", True),
    (B % "B", "C", False),
    # intervals
    (B % "(1,2]", "(1,2]", True),
    (B % "[1,2]", "(1,2]", False),
    (B % "(-\\infty, 3)", "(-\\infty,3)", True),
    (B % "(-\\infty, 3]", "(-\\infty,3)", False),
    (B % "[0, \\infty)", "[0,\\infty)", True),
    (B % "(-\\infty,-1)\\cup(1,\\infty)", "(-\\infty,-1)\\cup(1,\\infty)", True),
    (B % "(-\\infty,1)\\cup(1,\\infty)", "(-\\infty,-1)\\cup(1,\\infty)", False),
    (B % "[2,5)", "[2, 5)", True),
    # sets, tuples, several answers
    (B % "\\{1,2\\}", "\\{2,1\\}", True),
    (B % "\\{1,2,3\\}", "\\{1,2\\}", False),
    (B % "1,2", "2,1", True),
    (B % "1, 2, 3", "3, 2, 1", True),
    (B % "1, 2", "1, 3", False),
    (B % "(2,3)", "(2,3)", True),
    (B % "(3,2)", "(2,3)", False),
    (B % "(1,-2)", "(1, -2)", True),
    (B % "(0,3)", "\\left( 0, 3 \\right)", True),
    (B % "\\left(3, \\frac{\\pi}{2}\\right)", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
    (B % "(3, \\pi)", "\\left( 3, \\frac{\\pi}{2} \\right)", False),
    (B % "-2, 3", "3, -2", True),
    (B % "-2", "3, -2", False),
    (B % "\\pm 2", "2, -2", True),
    # x = 3 forms and equations
    (B % "x = 3", "3", True),
    (B % "x=3", "3", True),
    (B % "x = 4", "3", False),
    (B % "3", "x = 3", True),
    (B % "y = 2x + 1", "y=2x+1", True),
    (B % "y = 2x + 1", "y=2x-1", False),
    (B % "a = 5", "5", True),
    (B % "x = 2, y = 3", "x=2, y=3", True),
    # scientific notation
    (B % "1.5\\times10^{3}", "1500", True),
    (B % "1.5 \\times 10^3", "1500", True),
    (B % "1.5e3", "1500", True),
    (B % "3 \\cdot 10^{-2}", "0.03", True),
    (B % "6.02\\times10^{23}", "6.02\\times10^{23}", True),
    (B % "6.02\\times10^{22}", "6.02\\times10^{23}", False),
    (B % "2.5e-3", "0.0025", True),
    (B % "1.5e3", "150", False),
    # matrices and vectors
    (B % "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", True),
    (B % "\\begin{pmatrix}1&2\\\\3&5\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", False),
    (B % "\\begin{bmatrix}1&0\\\\0&1\\end{bmatrix}", "\\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}", True),
    (B % "\\begin{pmatrix} 2 \\\\ -1 \\end{pmatrix}", "\\begin{pmatrix}2\\\\-1\\end{pmatrix}", True),
    (B % "\\begin{pmatrix} -1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}2\\\\-1\\end{pmatrix}", False),
    (B % "\\begin{pmatrix}\\frac12\\\\1\\end{pmatrix}", "\\begin{pmatrix}0.5\\\\1\\end{pmatrix}", True),
    # algebraic expressions
    (B % "x^2+2x+1", "(x+1)^2", True),
    (B % "x^2+2x+1", "(x-1)^2", False),
    (B % "2x", "x+x", True),
    (B % "\\frac{x}{2}", "0.5x", True),
    (B % "a+b", "b+a", True),
    (B % "\\log_2 8", "3", True),
    (B % "\\ln(e^2)", "2", True),
    (B % "\\sin(\\frac{\\pi}{6})", "\\frac{1}{2}", True),
    (B % "2i", "2i", True),
    (B % "3+4i", "3+4i", True),
    (B % "3-4i", "3+4i", False),
    # no box
    ("The result is 5", "5", False),
    ("5", "5", False),
    ("I am not sure.", "5", False),
    ("", "5", False),
    ("So x equals 5 in the end", "5", False),
    # "The answer is" fallback
    ("Adding them gives the answer is 42.", "42", True),
    ("Final answer: 42", "42", True),
    ("The answer is $\\frac{1}{2}$.", "0.5", True),
    ("The answer is 41.", "42", False),
    # several boxes: the last wins
    ("First \\boxed{3}, then corrected: \\boxed{5}", "5", True),
    ("First \\boxed{5}, then corrected: \\boxed{3}", "5", False),
    ("\\boxed{1} \\boxed{2} \\boxed{3}", "3", True),
    ("\\boxed{5} and a broken \\boxed{6", "5", True),
    ("\\fbox{7}", "7", True),
    ("\\boxed 7", "7", True),
    ("$\\boxed{8}$ and \\fbox{9}", "9", True),
    # nested braces
    (B % "\\frac{\\frac{1}{2}}{2}", "\\frac{1}{4}", True),
    (B % "{{5}}", "5", True),
    (B % "\\sqrt{\\frac{1}{4}}", "\\frac{1}{2}", True),
    (B % "2^{2^{2}}", "16", True),
    (B % "\\frac{1}{\\frac{1}{3}}", "3", True),
    (B % "\\left\\{1, \\{2\\}\\right\\}", "5", False),
    # GSM8K golds after ####
    (B % "18", "Janet sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\n#### 18", True),
    (B % "17", "She makes 9 * 2 = $18.\n#### 18", False),
    (B % "1,080", "Total 1080 dollars\n#### 1080", True),
    (B % "-3", "so it drops by 3\n#### -3", True),
    (B % "0.5", "half\n#### .5", True),
    ("The answer is 70000", "70000 profit\n#### 70000", True),
    # golds that are full solutions with \boxed
    (B % "3", "Therefore the answer is $\\boxed{3}$.", True),
    (B % "\\frac{\\pi}{2}", "the angle is $\\boxed{\\frac{\\pi}{2}}$", True),
    (B % "4", "so we get $\\boxed{3}$.", False),
    # a response that is mostly reasoning, then the answer
    ("Let x be the number. Then 2x = 10, so x = 5. " * 20 + "\\boxed{5}", "5", True),
    ("We compute \\frac{a}{b} = \\boxed{\\frac{7}{3}}", "\\frac{7}{3}", True),
    ("We compute \\boxed{\\dfrac{14}{6}}", "\\frac{7}{3}", True),
]


@pytest.fixture(scope="module", autouse=True)
def warm():
    grading.warm_up()


def test_table_has_enough_cases():
    assert len(CASES) >= 150


@pytest.mark.parametrize("response,gold,expected", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_table(response, gold, expected):
    result = grading.grade(response, gold, timeout_s=5.0)
    assert result.status == "ok"
    assert result.correct is expected
    assert grading.is_correct(response, gold, timeout_s=5.0) is expected


@pytest.mark.parametrize("text,answer", [
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("a \\boxed{1} b \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
    ("\\fbox{x^{2}}", "x^{2}"),
    ("\\boxed{{a}{b}}", "{a}{b}"),
    ("unclosed \\boxed{3", None),
    ("earlier \\boxed{4} then unclosed \\boxed{3", "4"),
    ("no answer here", None),
    ("Thus the final answer is 12.", "12"),
    ("The answer is: $7$", "7"),
])
def test_extract_answer(text, answer):
    assert grading.extract_answer(text) == answer


def test_answer_is_fallback_can_be_disabled():
    assert grading.extract_answer("The answer is 3", answer_is_fallback=False) is None


@pytest.mark.parametrize("field,answer", [
    ("Some work.\n#### 1,234", "1,234"),
    ("so $\\boxed{\\frac{\\pi}{2}}$.", "\\frac{\\pi}{2}"),
    ("$42$", "42"),
    (" 7 ", "7"),
])
def test_gold_answer(field, answer):
    assert grading.gold_answer(field) == answer


@pytest.mark.parametrize("response,binary,greso", [
    ("\\boxed{5}", 1.0, 1.0),
    ("\\boxed{6}", 0.0, 0.1),
    ("no box, 6", 0.0, 0.0),
    ("The answer is 5", 1.0, 1.0),
    ("The answer is 6", 0.0, 0.0),
])
def test_shaping(response, binary, greso):
    assert grading.score(response, "5") == binary
    assert grading.score(response, "5", shaping="greso") == pytest.approx(greso)


def test_unknown_shaping_is_an_error():
    with pytest.raises(ValueError, match="shaping"):
        grading.score("\\boxed{5}", "5", shaping="dense")


def canary_responses(canary):
    code = f"__import__('os').system('touch {canary}')"
    return [
        f"\\boxed{{{code}}}",
        f"\\boxed{{open('{canary}', 'w').write('x')}}",
        f"The answer is {code}",
        f"\\boxed{{exec(\"import os; os.system('touch {canary}')\")}}",
        f"\\boxed{{\\text{{{code}}}}}",
    ]


ADVERSARIAL = [
    "\\boxed{9^{9^{9^{9}}}}",
    "\\boxed{2^{2^{40}}}",
    "\\boxed{(10^{10})!}",
    "\\boxed{100000!}",
    "\\boxed{((10^{6})!)!}",
    "\\boxed{(\\frac{1}{1000})^{-100000}}",
    "x" * 100_000,
    "\\boxed{" + "1+" * 50_000 + "1}",
    "{" * 10_000 + "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",
    "\\boxed{" * 10_000,
    "\\boxed{" + "\\sqrt{" * 150 + "2" + "}" * 151,
]


@pytest.mark.parametrize("index", range(len(ADVERSARIAL)))
def test_adversarial_in_process_finishes_within_timeout(index):
    start = time.monotonic()
    result = grading.grade(ADVERSARIAL[index], "1", timeout_s=2.0)
    assert time.monotonic() - start < 2.5
    assert not result.correct


def test_code_in_answers_never_runs(tmp_path):
    canary = tmp_path / "canary"
    for response in canary_responses(canary):
        assert not grading.is_correct(response, "0")
        grading.score(response, "0", shaping="greso")
    assert not canary.exists()


def test_deadline_interrupts_python_work():
    start = time.monotonic()
    with pytest.raises(grading.GradingTimeout):
        with grading.deadline(0.2):
            while True:
                pass
    assert time.monotonic() - start < 1.0


def test_deadline_is_not_swallowed_by_broad_except():
    with pytest.raises(grading.GradingTimeout):
        with grading.deadline(0.1):
            try:
                time.sleep(2)
            except Exception:  # what sympy / math-verify do internally
                pass


def test_a_dropped_timeout_fires_again_and_none_fires_after_the_block():
    """Python drops an exception raised by the alarm handler inside a finalizer or a C callback
    (reported as unraisable): the deadline then fires again, and never after its block."""
    start = time.monotonic()
    with pytest.raises(grading.GradingTimeout):
        with grading.deadline(0.2):
            try:
                while True:
                    pass
            except grading.GradingTimeout:
                pass  # dropped, as an unraisable exception is
            while time.monotonic() - start < 3:
                pass
    assert time.monotonic() - start < 1.0
    with grading.deadline(0.05):
        pass
    time.sleep(0.3)  # a stray re-armed alarm would raise here
