"""CORE-Bench v1.1 grading: a table of cases built from the published rules (each rule, each alias, each documented
example), the rule each verdict names, upstream's abort-on-first-raise behind the upstream-abort switch, and where
v1 and v1.1 give different verdicts on the same answer."""

from __future__ import annotations

import pytest

from pytest_agentbench.benchmarks.corebench.grading_v11 import (
    LIST_ALIASES,
    STRING_ALIASES,
    decimal_places,
    score_report_v11,
)
from pytest_agentbench.benchmarks.corebench.scorer import score_report

FULL = 96.12499135323452  # a full-precision reference value: d = 14
Q = "Report the value."
FIGQ = "fig Report the colour."


def one(gold_value, answer, capsule="capsule-1", question=Q, runs=None, **kw):
    gold = runs if runs is not None else [{question: gold_value}] * 3
    score = score_report_v11(gold, {question: answer}, capsule, **kw)
    (verdict,) = score.verdicts
    return verdict


# --------------------------------------------------------------------------- the decimals d


@pytest.mark.parametrize(
    ("value", "d"),
    [(5, 0), (5.0, 0), (0.85, 2), (100.0, 0), (FULL, 14), (1e-10, 10), (True, 0), (float("inf"), 0), ("x", 0)],
)
def test_decimal_places_count_the_str_of_the_stored_value(value, d):
    assert decimal_places(value) == d


# --------------------------------------------------------------------------- numeric questions

NUMERIC_CASES = [
    # (reference runs' value, answer, correct, rule) -- the documented examples first
    (FULL, 96.125, True, "isclose"),
    (FULL, 96.1249, True, "isclose"),
    (FULL, 96.12, False, "interval"),
    (FULL, True, False, "interval"),  # a bool compares as 1
    (5, 4.5, True, "widening"),  # d = 0: tolerance 0.5
    (5, 5.5, True, "widening"),
    (5, 5.51, False, "interval"),
    (5, "5", True, "interval"),  # text that parses is a number
    (5, 5, True, "interval"),
    (5, 5.4, True, "widening"),
    (0.85, 0.855, True, "widening"),  # d = 2: tolerance 0.005
    (0.85, 0.8551, False, "interval"),
    (0.85, "85%", False, "interval"),  # "%" is stripped, nothing rescaled
    (96.125, "96.125%", True, "interval"),
    (100.0, 100.4, True, "widening"),  # 100.0 has d = 0
    (1e-10, 1.5e-10, True, "widening"),  # d = 10: tolerance 5e-11 (and isclose's atol 1e-8 covers it anyway)
    (1000.0, 1000.6, False, "interval"),  # isclose: 0.1 + 1e-8 + 1e-5*1000.5 < 0.6 -- wrong
    (1000.0, 1000.509, True, "isclose"),  # just past the widening, within rtol 1e-5 of the bound
]


@pytest.mark.parametrize(("gold", "answer", "correct", "rule"), NUMERIC_CASES)
def test_numeric_questions(gold, answer, correct, rule):
    verdict = one(gold, answer)
    assert (verdict.correct, verdict.rule) == (correct, rule)
    assert verdict.evidence["decimals"] == decimal_places(gold)


def test_numeric_spread_runs_use_the_prediction_interval_then_widen_it():
    runs = [{Q: 1.0}, {Q: 2.0}, {Q: 3.0}]  # mean 2, s 1: PI 2 -/+ 4.968; d = 0 -> +/- 0.5 more
    verdict = one(None, 6.9, runs=runs)
    assert (verdict.correct, verdict.rule) == (True, "interval")
    verdict = one(None, 7.3, runs=runs)
    assert (verdict.correct, verdict.rule) == (True, "widening")
    assert verdict.expected == pytest.approx([2 - 4.96828 - 0.5, 2 + 4.96828 + 0.5], abs=1e-4)
    assert verdict.evidence["interval"] == pytest.approx([2 - 4.96828, 2 + 4.96828], abs=1e-4)
    assert one(None, 7.6, runs=runs).correct is False


# --------------------------------------------------------------------------- string and True/False questions

STRING_CASES = [
    ("blue", "Blue", True, "string"),
    ("blue", " blue", False, "string"),  # no whitespace strip
    ("blue", "blue.", False, "string"),  # no punctuation removal
    ("True", True, True, "bool"),
    ("True", 1, True, "bool"),
    ("True", 1.0, True, "bool"),
    ("True", "1", True, "bool"),  # "1" becomes 1.0 first
    ("True", "true", True, "string"),
    ("True", " True", False, "string"),
    ("True", "yes", False, "string"),
    ("True", 2, False, "string"),
    ("False", 0, True, "bool"),
    ("False", "0", True, "bool"),
    ("False", False, True, "bool"),
    ("False", True, False, "bool"),
    ("7", "7", False, "string"),  # a numeric-looking text reference: "7" became 7.0, compared as "7.0"
    ("2.341092434893948e-10", "2.341092434893948e-10", True, "string"),  # round-trips through float
]


@pytest.mark.parametrize(("gold", "answer", "correct", "rule"), STRING_CASES)
def test_string_questions(gold, answer, correct, rule):
    verdict = one(gold, answer)
    assert (verdict.correct, verdict.rule) == (correct, rule)


# --------------------------------------------------------------------------- aliases


def alias_cases():
    for capsule, questions in STRING_ALIASES.items():
        for question, accepted in questions.items():
            reference = sorted(accepted)[0]
            for answer in sorted(accepted):
                yield capsule, question, reference, answer, True
                yield capsule, question, reference, answer.upper(), True
            yield capsule, question, reference, "none of them", False


@pytest.mark.parametrize(("capsule", "question", "gold", "answer", "correct"), list(alias_cases()))
def test_every_string_alias_is_accepted_case_insensitively(capsule, question, gold, answer, correct):
    verdict = one(gold, answer, capsule=capsule, question=question)
    assert (verdict.correct, verdict.rule) == (correct, "alias")


def test_aliases_are_keyed_by_capsule_and_exact_question():
    question = next(iter(STRING_ALIASES["capsule-3639589"]))
    assert one("blue", "green", capsule="capsule-3639589", question=question).correct is True
    assert one("blue", "green", capsule="capsule-0000001", question=question).correct is False  # another capsule
    assert one("blue", "green", capsule="capsule-3639589", question=question + " ").correct is False
    assert one("blue", " green", capsule="capsule-3639589", question=question).correct is False  # no strip


def test_the_p_value_aliases_hold_after_the_float_round_trip():
    (question,) = STRING_ALIASES["capsule-0152700"]
    for answer in ("1.0728737137836577e-09", "2.0438111587013562e-09", 2.0438111587013562e-09):
        verdict = one("2.341092434893948e-10", answer, capsule="capsule-0152700", question=question)
        assert (verdict.correct, verdict.rule) == (True, "alias")
    assert one("2.341092434893948e-10", "3e-09", capsule="capsule-0152700", question=question).correct is False


LIST_CAPSULE = "capsule-9477017"
(LIST_Q,) = LIST_ALIASES[LIST_CAPSULE]

LIST_CASES = [
    # (capsule, question, reference, answer, correct, rule)
    ("capsule-7655932", Q, [1, 2], [1.0, 2.0], True, "list"),
    ("capsule-7655932", Q, [1, 2], [2, 1], False, "list"),
    ("capsule-7655932", Q, [1, 2], ["1", "2"], False, "list"),
    ("capsule-7655932", Q, ["a", "b"], ["A", "b"], False, "list"),  # unaliased: exact
    (LIST_CAPSULE, LIST_Q, ["Smooth.1", "Endo.1"], ["Smooth.1", "Endo.1"], True, "alias"),
    (LIST_CAPSULE, LIST_Q, ["Smooth.1", "Endo.1"], ["endo.1", "SMOOTH.1"], True, "alias"),
    (LIST_CAPSULE, LIST_Q, ["Smooth.1", "Endo.1"], ["Smooth.1", "B"], True, "alias"),
    (LIST_CAPSULE, LIST_Q, ["Smooth.1", "Endo.1"], ["B", "Smooth.1", "B"], True, "alias"),  # duplicates
    (LIST_CAPSULE, LIST_Q, ["Smooth.1", "Endo.1"], ["Smooth.1"], False, "alias"),
    (LIST_CAPSULE, LIST_Q, ["Smooth.1", "Endo.1"], ["Smooth.1", "Endo.1", "B"], False, "alias"),
]


@pytest.mark.parametrize(("capsule", "question", "gold", "answer", "correct", "rule"), LIST_CASES)
def test_list_questions(capsule, question, gold, answer, correct, rule):
    verdict = one(gold, answer, capsule=capsule, question=question)
    assert (verdict.correct, verdict.rule) == (correct, rule)


# --------------------------------------------------------------------------- upstream's abort on the first raise

NUM, TEXT = "q num", "q s"
GOLD = [{NUM: 5, TEXT: "abc"}] * 3


def correct_count(report, **kw):
    score = score_report_v11(GOLD, report, "capsule-1", **kw)
    return score.correct_written + score.correct_figure, score


def test_upstream_abort_stops_at_the_first_raising_key_in_report_order():
    assert correct_count({NUM: "N/A", TEXT: "abc"}, upstream_abort=True)[0] == 0
    assert correct_count({TEXT: "abc", NUM: "N/A"}, upstream_abort=True)[0] == 1
    count, score = correct_count({NUM: "N/A", TEXT: "abc"}, upstream_abort=True)
    assert score.aborted_at == NUM
    assert "not scored" in {v.question: v for v in score.verdicts}[TEXT].note


def test_by_default_a_raising_value_fails_only_its_own_question():
    for report in ({NUM: "N/A", TEXT: "abc"}, {TEXT: "abc", NUM: None}, {NUM: [1, 2], TEXT: "abc"}):
        count, score = correct_count(report)
        assert count == 1 and score.aborted_at is None
        assert score.all_correct is False  # the verdict is the same either way


def test_a_number_in_an_aliased_list_raises_like_upstream():
    gold = [{LIST_Q: ["Smooth.1", "Endo.1"], TEXT: "abc"}] * 3
    report = {LIST_Q: ["Smooth.1", 1], TEXT: "abc"}
    aborted = score_report_v11(gold, report, LIST_CAPSULE, upstream_abort=True)
    assert aborted.correct_written == 0 and aborted.aborted_at == LIST_Q
    assert score_report_v11(gold, report, LIST_CAPSULE).correct_written == 1


# --------------------------------------------------------------------------- the task verdict


def test_a_task_passes_only_when_every_question_is_right():
    gold = [{NUM: 5, TEXT: "abc", FIGQ: "red"}] * 3
    assert score_report_v11(gold, {NUM: 5.2, TEXT: "ABC", FIGQ: "Red"}).all_correct is True
    missing = score_report_v11(gold, {NUM: 5.2, TEXT: "ABC"})
    assert missing.all_correct is False
    assert (missing.total_written, missing.total_figure, missing.correct_figure) == (2, 1, 0)
    extra = score_report_v11(gold, {NUM: 5.2, TEXT: "ABC", FIGQ: "Red", "other": 1})
    assert extra.all_correct is True  # extra keys are ignored


def test_unusable_reference_runs_score_nothing_under_upstream_abort():
    gold = [{NUM: 5, TEXT: "abc"}, {NUM: "x", TEXT: "abc"}, {NUM: 5, TEXT: "abc"}]
    assert score_report_v11(gold, {NUM: 5, TEXT: "abc"}, upstream_abort=True).error
    assert score_report_v11(gold, {NUM: 5, TEXT: "abc"}).correct_written == 1


# --------------------------------------------------------------------------- v1 and v1.1 differ


@pytest.mark.parametrize(
    ("gold", "answer"),
    [(FULL, 96.125), (5, 5.4), ("True", 1)],
)
def test_v1_and_v11_give_different_verdicts_on_the_same_answer(gold, answer):
    runs = [{Q: gold}] * 3
    assert score_report(runs, {Q: answer}).all_correct is False
    assert score_report_v11(runs, {Q: answer}).all_correct is True


def test_records_name_the_rule_and_v1_records_are_unchanged():
    runs = [{Q: 5}] * 3
    v11 = score_report_v11(runs, {Q: 5.4}).to_record()["questions"][0]
    assert v11["rule"] == "widening" and v11["evidence"]["tolerance"] == 0.5
    v1 = score_report(runs, {Q: 5.4}).to_record()["questions"][0]
    assert "rule" not in v1 and "evidence" not in v1
