"""Rule scorers with hand-written cases: gsm8k (strict/flexible), MATH boxed, arithmetic, countdown, shapes, dispatch."""

import pytest

from hybridrl.utils.reward_score import default_compute_score, gsm8k
from hybridrl.utils.reward_score import math as math_score
from hybridrl.utils.reward_score.arithmetic import compute_score as arithmetic_score
from hybridrl.utils.reward_score.countdown import compute_score as countdown_score
from hybridrl.utils.reward_score.countdown import evaluate_equation
from hybridrl.utils.reward_score.shapes import compute_score as shapes_score


# ---------------------------------------------------------------------------- gsm8k
@pytest.mark.parametrize(
    "text, method, expected",
    [
        ("so 3+4=7\n#### 72", "strict", "72"),
        ("#### 1,234", "strict", "1234"),  # commas removed in strict mode
        ("#### $15", "strict", None),  # regex needs a digit right after '#### '
        ("#### -5", "strict", "-5"),
        ("#### 72.", "strict", "72."),  # trailing period is part of the match, as verl
        ("#### 3 then #### 4", "strict", "4"),  # last match wins
        ("The answer is 72", "strict", None),  # no '####'
        ("The answer is 72", "flexible", "72"),
        ("earned 1,000 dollars", "flexible", "1,000"),  # flexible keeps commas (verl)
        ("total -12 apples.", "flexible", "-12"),
        ("no numbers here.", "flexible", "."),  # verl quirk: the last candidate tried is returned
        ("no digits", "flexible", None),
    ],
)
def test_gsm8k_extract(text, method, expected):
    assert gsm8k.extract_solution(text, method=method) == expected


def test_gsm8k_scores_and_clip():
    assert gsm8k.compute_score("work... #### 18", "18") == 1.0
    assert gsm8k.compute_score("work... #### 17", "18") == 0.0  # format_score default 0.0
    assert gsm8k.compute_score("work... #### 17", "18", format_score=0.1) == 0.1
    assert gsm8k.compute_score("I do not know", "18") == 0
    assert gsm8k.compute_score("#### 72.", "72") == 0.0  # '72.' != '72'
    # only the last 300 characters are searched: an early answer followed by 300 chars is lost
    assert gsm8k.compute_score("#### 18" + "x" * 300, "18") == 0
    assert gsm8k.compute_score("x" * 1000 + "#### 18", "18") == 1.0


# ---------------------------------------------------------------------------- MATH
def test_math_boxed_extraction_nested():
    s = r"so $x = \boxed{\frac{1}{2}}$ and finally \boxed{\sqrt{2}+{3}}"
    assert math_score.last_boxed_only_string(s) == r"\boxed{\sqrt{2}+{3}}"
    assert math_score.remove_boxed(r"\boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert math_score.last_boxed_only_string(r"answer \boxed 5$ done") == r"\boxed 5"
    assert math_score.last_boxed_only_string("no box") is None
    assert math_score.last_boxed_only_string(r"\boxed{unclosed") is None


@pytest.mark.parametrize(
    "answer, truth, equal",
    [
        (r"\dfrac{1}{2}", r"\frac12", True),  # dfrac→frac, \frac12→\frac{1}{2}
        ("0.5", r"\frac{1}{2}", True),
        ("1/2", r"\frac{1}{2}", True),
        (r"x = 3", "3", True),  # short 'x =' prefix dropped
        (r"\left( 1, 2 \right)", "(1,2)", True),
        (r"90^\circ", "90", True),
        (r"50\%", "50", True),
        (r"10 \text{ cm}", "10", True),
        (".5", r"\frac{1}{2}", True),  # '.5' → '0.5' → \frac{1}{2}
        ("3", "4", False),
    ],
)
def test_math_is_equiv(answer, truth, equal):
    assert math_score.is_equiv(answer, truth) is equal


def test_math_compute_score():
    assert math_score.compute_score(r"We get \boxed{\dfrac{3}{4}}.", r"\frac{3}{4}") == 1.0
    assert math_score.compute_score(r"We get \boxed{5}.", "6") == 0.0
    assert math_score.compute_score("no box, 5", "5") == 0.0
    assert math_score.compute_score(r"\fbox{5}", "5") == 0.0  # verl: remove_boxed rejects \fbox


# ---------------------------------------------------------------------------- arithmetic
@pytest.mark.parametrize(
    "text, truth, score",
    [
        ("The answer is 42", "42", 1.0),
        ("-7", "-7", 1.0),
        ("40 + 2 = 42.", "42", 1.0),
        ("42 then 41", "42", 0.0),
        ("no number", "3", 0.0),
        ("1,234", "1234", 1.0),
    ],
)
def test_arithmetic(text, truth, score):
    assert arithmetic_score(text, truth) == score


# ---------------------------------------------------------------------------- countdown
GT = {"target": 24, "numbers": [4, 6, 1]}


@pytest.mark.parametrize(
    "text, score",
    [
        ("<think>..</think><answer>4 * 6 * 1</answer>", 1.0),
        ("<answer>(6 - 1) * 4</answer>", 0.1),  # valid numbers, equals 20 ≠ 24 → format score
        ("<answer>4 * 6</answer>", 0.1),  # 1 unused
        ("<answer>4 * 6 * 1 * 1</answer>", 0.1),  # 1 used twice
        ("<answer>__import__('os')</answer>", 0.1),  # rejected before any evaluation
        ("<answer>6 / (1 - 1) * 4</answer>", 0.1),  # uses 1 twice anyway; division by zero is safe
        ("4*6*1 = 24", 0.0),  # no tag
        ("<answer>1+1</answer> ... <answer>6 * 4 / 1</answer>", 1.0),  # last tag counts
    ],
)
def test_countdown(text, score):
    assert countdown_score(text, GT) == score


def test_countdown_evaluator_is_not_eval():
    assert evaluate_equation("(1 + 2) / 3") == 1.0
    assert evaluate_equation("-3 + 5") == 2.0
    for bad in ("2 ** 10", "abs(3)", "[1][0]", "1 if 1 else 2"):
        with pytest.raises((ValueError, SyntaxError)):
            evaluate_equation(bad)


# ---------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("text, score", [
    ("Red", 1.0),
    ("The shape is red.", 1.0),
    ("blue, no: red", 0.0),  # the first colour word counts
    ("reddish", 0.0),  # whole words only
    ("no idea", 0.0),
])
def test_shapes(text, score):
    assert shapes_score(text, "red") == score


# ---------------------------------------------------------------------------- dispatch
def test_default_compute_score_dispatch():
    assert default_compute_score("openai/gsm8k", "#### 5", "5") == 1.0
    for source in ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"):
        assert default_compute_score(source, r"\boxed{5}", "5") == 1.0
    assert default_compute_score("arithmetic", "12", "12") == 1.0
    assert default_compute_score("countdown", "<answer>4*6*1</answer>", GT) == 1.0
    assert default_compute_score("shapes", "green", "green") == 1.0
    assert isinstance(default_compute_score("openai/gsm8k", "nothing", "5"), float)  # 0 → 0.0
    with pytest.raises(NotImplementedError, match="my/new_dataset"):
        default_compute_score("my/new_dataset", "x", "y")
