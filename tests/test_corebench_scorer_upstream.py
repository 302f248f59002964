"""CORE-Bench's scorer against upstream: a transcription of upstream ``eval_result_json``'s
rules and the scorer agree on fixed cases and on random reports in abort mode, the default mode never crashes,
and finding the report gives a verdict for every file."""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest

from pytest_agentbench.benchmarks.corebench.scorer import load_submission, question_totals, score_report

# --------------------------------------------------------------------------- 12: upstream's rules, transcribed


def upstream_counts(gold, report):
    """Our own transcription of upstream ``eval_result_json``'s rules: (correct written, correct figure,
    total written, total figure). Question types come from the first run (int/float/bool numeric, list,
    str; anything else is no question); reported strings lose '%' and become floats when they parse; every
    numeric interval is computed first (any failure: nothing correct); then report keys in order, the
    first comparison that raises ends the scoring; a report that is not an object scores nothing."""
    first = gold[0]
    kinds = {}
    for key, value in first.items():
        if isinstance(value, (int, float)):
            kinds[key] = "numeric"
        elif isinstance(value, list):
            kinds[key] = "list"
        elif isinstance(value, str):
            kinds[key] = "string"
    total_fig = sum(1 for k in kinds if "fig" in k)
    totals = (len(kinds) - total_fig, total_fig)
    if not isinstance(report, dict):
        return (0, 0, *totals)
    values = {}
    for key, value in report.items():
        if isinstance(value, str):
            value = value.replace("%", "")
            try:
                value = float(value)
            except ValueError:
                pass
        values[key] = value
    n = len(gold)
    bounds = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from scipy.stats import t

            for key, kind in kinds.items():
                if kind == "numeric":
                    column = [run[key] for run in gold]
                    mean, std = np.mean(column), np.std(column, ddof=1)
                    half = t.ppf(0.975, n - 1) * std * math.sqrt(1 + 1 / n)
                    bounds[key] = (mean - half, mean + half)
    except Exception:
        return (0, 0, *totals)
    right = [0, 0]
    try:
        for key, value in values.items():
            kind = kinds.get(key)
            if kind == "numeric":
                ok = bool(bounds[key][0] <= value) and bool(value <= bounds[key][1])
            elif kind == "list":
                ok = value == first[key]
            elif kind == "string":
                ok = str(value).lower() == str(first[key]).lower()
            else:
                continue
            if ok:
                right["fig" in key] += 1
    except Exception:
        pass
    return (right[0], right[1], *totals)


def ours(gold, report):
    score = score_report(gold, report, upstream_abort=True)
    return (score.correct_written, score.correct_figure, score.total_written, score.total_figure)


DEEP = []
for _ in range(5000):
    DEEP = [DEEP]

FIXED = [  # (gold, report, upstream's counts written here from its rules)
    # one reference run: NaN interval, the numeric answer is wrong, the string still scores
    ([{"acc": 0.5, "name": "Adam", "fig n": 3}], {"acc": 0.5, "name": "adam", "fig n": 3}, (1, 0, 2, 1)),
    # a run lacks a numeric key: the interval fails, nothing is correct
    ([{"acc": 1.0, "name": "x"}, {"name": "x"}, {"acc": 1.0, "name": "x"}], {"acc": 1.0, "name": "x"}, (0, 0, 2, 0)),
    # mixed types in the runs: 0 on every question
    ([{"acc": 1.0, "s": "a"}, {"acc": "1.0", "s": "a"}], {"acc": 1.0, "s": "a"}, (0, 0, 2, 0)),
    # null and object gold values are not questions
    (
        [{"a": None, "b": {"x": 1}, "c": "y"}, {"a": None, "b": {}, "c": "y"}],
        {"a": None, "b": {"x": 1}, "c": "Y"},
        (1, 0, 1, 0),
    ),
    # gold integers too large for a float: upstream raises (OverflowError) in its interval: 0 correct
    ([{"big": 10**400, "s": "a"}] * 3, {"big": 10**400, "s": "a"}, (0, 0, 2, 0)),
    # a reported integer too large for a float: that comparison raises, scoring stops there
    ([{"s": "a", "n": 1.0, "t": "b"}] * 3, {"s": "a", "n": 10**400, "t": "b"}, (1, 0, 3, 0)),
    # an integer beyond Python's str() digit limit for a string question: str() raises, scoring stops
    ([{"s": "a", "t": "b"}] * 2, {"t": "b", "s": 10**5000}, (1, 0, 2, 0)),
    # a list nested thousands deep for a string question: str() raises RecursionError, scoring stops
    ([{"s": "a", "t": "b"}] * 2, {"t": "b", "s": DEEP}, (1, 0, 2, 0)),
    # text for a numeric question: comparison raises, later keys earn nothing
    ([{"n": 1.0, "s": "a"}, {"n": 2.0, "s": "a"}, {"n": 3.0, "s": "a"}], {"n": "n/a", "s": "a"}, (0, 0, 2, 0)),
    # a report that is not an object
    ([{"s": "a"}] * 2, ["s", "a"], (0, 0, 1, 0)),
    # empty report (what invalid UTF-8 gives)
    ([{"s": "a", "fig": 1.0}] * 2, {}, (0, 0, 1, 1)),
]


@pytest.mark.parametrize("gold, report, expected", FIXED)
def test_fixed_cases_match_upstream(gold, report, expected):
    assert upstream_counts(gold, report) == expected  # the transcription agrees with the rules as written
    assert ours(gold, report) == expected
    score_report(gold, report)  # the default mode gives a verdict too


def _value(rng):
    return rng.choice(
        [
            lambda: rng.choice([1.0, 2.0, 3.0, 2.5, -1.0, 0.0]),
            lambda: rng.randint(-3, 5),
            lambda: rng.choice([True, False]),
            lambda: rng.choice(["a", "A", "b", "2.0", "50%", "n/a", " 2", ""]),
            lambda: rng.choice([[1, 2], [1.0], [], ["a"], [[1]]]),
            lambda: None,
            lambda: {"x": 1},
            lambda: rng.choice([10**400, float("nan"), float("inf"), 2**64]),
        ]
    )()


def _pair(rng):
    keys = rng.sample(
        ["acc", "fig 1 value", "name", "count", "list", "Figure 2", "fig text", "other"], rng.randint(1, 5)
    )
    first = {k: _value(rng) for k in keys}
    runs = [first]
    for _ in range(rng.choice([0, 1, 2, 2, 2, 4])):
        run = {}
        for key, value in first.items():
            roll = rng.random()
            if roll < 0.05:
                continue  # a run missing the key
            run[key] = (
                _value(rng)
                if roll < 0.15
                else (value + rng.choice([-0.5, 0, 0.5]) if isinstance(value, float) else value)
            )
        runs.append(run)
    report = {}
    for key in rng.sample(keys + ["extra"], rng.randint(0, len(keys) + 1)):
        roll = rng.random()
        report[key] = first.get(key) if roll < 0.4 else _value(rng)
    return runs, report


def test_differential_against_the_transcription_of_upstream():
    rng = random.Random(12)
    for _ in range(1500):
        gold, report = _pair(rng)
        assert ours(gold, report) == upstream_counts(gold, report), (gold, report)
        score_report(gold, report)  # default mode never raises either


def test_default_mode_fails_only_the_broken_question():
    gold = [{"big": 10**400, "s": "a"}] * 3
    score = score_report(gold, {"big": 1, "s": "a"})
    verdicts = {v.question: v for v in score.verdicts}
    assert verdicts["s"].correct and not verdicts["big"].correct and "unusable" in verdicts["big"].note
    assert question_totals([{"a": None, "b": {}, "c": 1}]) == (1, 0)
    assert score_report([], {}).error and not score_report([], {}).all_correct


@pytest.mark.parametrize(
    "content, status",
    [
        (b'{"a": ' + b"1" * 5000 + b"}", "invalid"),  # past Python's integer digit limit
        (b"[" * 100000 + b"]" * 100000, "invalid"),  # nested far deeper than the recursion limit
        (b'{"a": "\xff\xfe"}', "invalid"),  # not UTF-8: scored as an empty report
        (b'{"a": 1e400}', "found"),  # inf: a number like any other
        (b"x" * (10 * 1024 * 1024 + 1), "too large"),
    ],
    ids=["digit-limit", "deep", "not-utf8", "inf", "too-large"],
)
def test_report_discovery_gives_a_verdict_for_every_file(tmp_path, content, status):
    (tmp_path / "report.json").write_bytes(content)
    sub = load_submission(tmp_path, final_answer={"a": 1})
    assert (sub.report_status, sub.submission_source, sub.report_path) == (status, "report", "report.json")
    score_report([{"a": 1.0}, {"a": 2.0}], sub.report, upstream_abort=True)
    missing = load_submission(tmp_path / "nothing-here", final_answer="[" * 100000)
    assert missing.report_status == "missing" and missing.submission_source == "final_answer"
