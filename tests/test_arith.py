"""Synthetic arithmetic: deterministic pools, disjoint splits, labelled difficulty, format
invariants, and the exact-match grader."""

import collections

import pytest

from greso_jax.data import arith
from greso_jax.data.rows import PromptRow
from greso_jax.models.tokenizer import CharTokenizer
from greso_jax.rewards import arith as arith_grader


def test_deterministic_per_seed():
    a = arith.make_arith_pools(500, 100, seed=7)
    b = arith.make_arith_pools(500, 100, seed=7)
    c = arith.make_arith_pools(500, 100, seed=8)
    assert a == b
    assert [r.question for r in a[0]] != [r.question for r in c[0]]


def test_pools_disjoint_distinct_and_densely_numbered():
    train, heldout = arith.make_arith_pools(3000, 600, seed=1234)
    questions = [r.question for r in train + heldout]
    assert len(set(questions)) == len(questions) == 3600
    assert [r.prompt_id for r in train] == list(range(3000))
    assert [r.prompt_id for r in heldout] == list(range(600))


def test_apart_pool_is_distinct_from_both_pools_deterministic_and_leaves_them_unchanged():
    weights = {0: 1.0, 2: 1.0}  # two-digit sums: 10,000 problems, so collisions are drawn and must be refused
    train, heldout = arith.make_arith_pools(3000, 600, seed=3, level_weights=weights)
    apart = arith.make_apart_pool(4000, 3000, 600, seed=3, level_weights=weights)
    assert apart == arith.make_apart_pool(4000, 3000, 600, seed=3, level_weights=weights)
    questions = [r.question for r in apart]
    assert len(set(questions)) == 4000 and not set(questions) & {r.question for r in train + heldout}
    assert {r.difficulty for r in apart} == {0, 2} and [r.prompt_id for r in apart] == list(range(4000))
    assert (train, heldout) == arith.make_arith_pools(3000, 600, seed=3, level_weights=weights)
    with pytest.raises(ValueError, match="make_apart_pool: .* beside 3600 taken"):
        arith.make_apart_pool(arith.pool_capacity(weights) - 3599, 3000, 600, seed=3, level_weights=weights)


def test_difficulties_labelled_and_mixed():
    train, heldout = arith.make_arith_pools(3000, 600, seed=1234)
    counts = collections.Counter(r.difficulty for r in train)
    assert set(counts) == set(arith.DEFAULT_LEVEL_WEIGHTS)  # the chain levels weigh 0 in the default mix
    bands = collections.Counter(arith.difficulty_band(r.difficulty) for r in train)
    assert min(bands[b] for b in ("easy", "medium", "hard")) > 300
    for row in train[:200]:
        shape = arith.LEVELS[row.difficulty]
        assert sum(ch.isdigit() for ch in row.question) == sum(shape.widths)


def test_level_weights_are_the_difficulty_knob():
    train, _ = arith.make_arith_pools(200, 0, seed=0, level_weights={7: 1.0})
    assert {r.difficulty for r in train} == {7}
    with pytest.raises(ValueError, match="level_weights"):
        arith.make_arith_pools(10, 0, seed=0, level_weights={99: 1.0})
    with pytest.raises(ValueError, match="distinct"):
        arith.make_arith_pools(10_001, 0, seed=0, level_weights={0: 1.0})  # only 10^4 two-digit sums
    with pytest.raises(ValueError, match="distinct"):
        arith.make_arith_pools(5_100, 0, seed=0, level_weights={1: 1.0})  # a-b >= 0: 5,050 of 10^4


@pytest.mark.parametrize("question,solution,answer", [
    ("47+85=", "231", "132"),
    ("85-47=", "83", "38"),
    ("47+85-29=", "231;301", "103"),
    ("674+047-531+738=", "1270;0910;8290", "928"),
    ("19*4=", "670", "76"),
    ("(64+86)*5=", "0510;0570", "750"),
    ("98*38=", "4273", "3724"),
])
def test_solution_format(question, solution, answer):
    row = PromptRow(0, question, answer, "arith")
    assert arith.solution_text(row) == solution
    assert str(arith.running_totals(question)[-1]) == answer
    assert arith_grader.is_correct(solution, answer)


@pytest.mark.parametrize("question,level,solution,answer", [
    ("085+063+051+026=", 8, "841;991;522", "225"),
    ("030+004-002+001-005=", 9, "430;230;330;820", "28"),
])
def test_worked_chain_format(question, level, solution, answer):
    row = PromptRow(0, question, answer, "arith", difficulty=level)
    assert arith.solution_text(row) == solution
    assert str(arith.running_totals(question)[-1]) == answer
    assert arith_grader.is_correct(solution, answer)


def test_every_generated_row_is_solvable_short_and_in_alphabet():
    train, heldout = arith.make_arith_pools(3000, 600, seed=3)
    tokenizer = CharTokenizer(arith.ARITH_ALPHABET, 32)
    assert len(arith.ARITH_ALPHABET) <= 30
    for row in train + heldout:
        solution = arith.solution_text(row)
        assert len(row.question) <= 40 and len(solution) <= 24
        assert min(arith.running_totals(row.question)) >= 0
        assert tokenizer.decode(tokenizer.encode(row.question + solution)) == row.question + solution
        assert arith_grader.is_correct(solution, row.ground_truth)


@pytest.mark.parametrize("response,expected", [
    ("231;301", True), ("301", True), ("3010", True), ("231;300", False), ("231;", False), ("", False),
    ("231;30a", False), ("103", False), ("231;301;", False), (" 301 ", True), ("9" * 40, False),
])
def test_grader_reads_last_field_lsd_first(response, expected):
    assert arith_grader.is_correct(response, "103") is expected


def test_grader_rejects_non_integer_gold():
    with pytest.raises(ValueError, match="not an integer"):
        arith_grader.is_correct("1", "x")


def test_parser_rejects_malformed_prompts():
    with pytest.raises(ValueError, match="unbalanced"):
        arith.running_totals("(1+2=")
    with pytest.raises(ValueError, match="expected a number"):
        arith.running_totals("1++2=")


def test_config_level_weights_reach_both_pools():
    from greso_jax.config import ConfigError, get_config, validate
    from greso_jax.run.build import rows_from_config

    config = get_config()
    config.data.arith_num_train, config.data.arith_num_heldout = 200, 50
    config.data.arith_level_weights = (0, 0, 0, 0, 0, 0, 0, 1)  # only two-digit products
    train, evals = rows_from_config(validate(config))
    assert {row.difficulty for row in train} == {row.difficulty for row in evals["synthetic"]} == {7}
    config.data.arith_level_weights = (0, 1)  # levels past the tuple weigh 0: only a-b
    train, _ = rows_from_config(validate(config))
    assert {row.difficulty for row in train} == {1}
    config.data.arith_level_weights = (1,) * (len(arith.LEVELS) + 1)
    with pytest.raises(ConfigError, match=r"data.arith_level_weights: at most one weight per level \(levels 0-12\)"):
        validate(config)


def test_worked_chains_grow_with_the_level_and_fit_the_worked_config():
    from experiments import arith_worked

    weights = arith.level_weights(arith_worked.WORKED_LEVEL_WEIGHTS)
    train, heldout = arith.make_arith_pools(3000, 600, seed=5, level_weights=weights)
    longest: dict[int, int] = collections.defaultdict(int)
    for row in train + heldout:
        solution = arith.solution_text(row)
        assert arith_grader.is_correct(solution, row.ground_truth)
        assert min(arith.running_totals(row.question)) >= 0
        assert len(row.question) <= arith_worked.MAX_PROMPT_LENGTH
        assert len(solution) + 1 <= arith_worked.MAX_NEW_TOKENS  # + EOS
        longest[row.difficulty] = max(longest[row.difficulty], len(solution))
        if arith.LEVELS[row.difficulty].aligned:  # operands and totals share one stride
            operands = row.question[:-1].replace("-", "+").split("+")
            assert {len(o) for o in operands} == {len(t) for t in solution.split(";")} == {3}
    # one three-digit total and a separator per operation after the first
    assert [longest[level] for level in (8, 9, 10, 11, 12)] == [11, 15, 19, 27, 35]
    assert max(len(row.question) for row in train if row.difficulty == 12) == arith_worked.MAX_PROMPT_LENGTH
