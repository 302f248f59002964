"""CORE-Bench v1.1 grading: the rules the benchmark's authors published with the 2026 task sets.

Facts from the authors' harness (HAL, branch ``feat/corebenchv2-prefect``, grading commit ``fe0a1ef``); the code here
is our own. What differs from v1 (``scorer.score_report``):

* Numeric: the 95% prediction interval ``[L, U]`` is widened by ``0.5 * 10**-d`` on both sides, ``d`` the most
  decimals any reference run shows (``str()`` of the stored value, trailing zeros dropped: ``5.0`` has 0, ``0.85`` 2,
  a full-precision float 14 to 16); a value is also right when ``np.isclose`` (rtol 1e-5, atol 1e-8) holds against
  either widened bound.
* String: a True/False reference accepts a bool and the numbers 1 and 0 (and so "1"/"0", which become numbers
  first); a question with aliases (by capsule and exact question text) accepts any alias, case-insensitively.
* List: an aliased list question accepts a list of strings equal, as a case-insensitive set, to one alias subset;
  every other list compares ordered and exact, as in v1.
* Every reported string loses its ``%`` signs and becomes a float when it parses, as in v1.
* A task passes only when every question of the first reference run is right; missing answers are wrong.

Upstream grades the reported keys in report order inside one ``try``: the first value that raises (text for a
numeric question, a number in an aliased list) ends the grading of every later key. That changes per-question
counts, never a task's verdict (the raising question is wrong anyway). ``upstream_abort=True`` (the run's
``--bench-set upstream_abort=true``, the same switch as v1's) reproduces it; by default such a value fails only its own
question.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import numpy as np

from .scorer import (
    CapsuleScore,
    IncomparableValue,
    QuestionVerdict,
    normalize_reported,
    prediction_interval,
    question_kinds,
    settle,
    short_repr,
)

# Rules a verdict names (QuestionVerdict.rule)
INTERVAL, WIDENING, ISCLOSE, ALIAS, BOOL, STRING, LIST = (
    "interval",
    "widening",
    "isclose",
    "alias",
    "bool",
    "string",
    "list",
)

# Answer aliases: capsule -> exact question text -> every accepted answer (the reference's among them), compared
# case-insensitively. Not in the dataset files: the authors keep them beside the grader.
STRING_ALIASES: dict[str, dict[str, frozenset[str]]] = {
    "capsule-2816027": {
        "fig For CTCF Signature Enrichment, report the name of the group with the highest median GSVA score.": (
            frozenset({"D538G", "MCF7_D538G"})
        ),
    },
    "capsule-3639589": {
        "fig Report the color of the line with the highest maximum activation for target memory activation, DM.": (
            frozenset({"blue", "green"})
        ),
    },
    "capsule-2151475": {
        "fig Report the name of the university ranked #1 by impact factor.": frozenset(
            {"Chicago", "University of Chicago"}
        ),
        "fig Report the name of the journal with the highest 2011 impact factor from the analysis of 30 journals.": (
            frozenset({"JEL", "Journal of Economic Literature"})
        ),
    },
    "capsule-0152700": {
        "Given the Kruskal-Wallis for Group 0-2 (Group 1 vs. Group 3), what is the p-value?": frozenset(
            {"2.341092434893948e-10", "1.0728737137836577e-09", "2.0438111587013562e-09"}
        ),
    },
}
# List aliases: capsule -> exact question text -> the accepted subsets (a list is right when its items, lowered, form
# one of them as a set).
LIST_ALIASES: dict[str, dict[str, tuple[frozenset[str], ...]]] = {
    "capsule-9477017": {
        "fig Pearson correlation coefficients between the estimated proportions of different cell types were "
        "calculated, what is the highest pearson correlation related to? Give response in a list of strings": (
            frozenset({"Smooth.1", "Endo.1"}),
            frozenset({"Smooth.1", "B"}),
        ),
    },
}


def decimal_places(value: Any) -> int:
    """Decimals of ``str(value)`` once trailing zeros are dropped (``5.0`` -> 0, ``0.85`` -> 2, ``1e-10`` -> 10,
    ``100.0`` -> 0); 0 for what is no finite decimal number (a bool, infinity, text)."""
    try:
        exponent = Decimal(str(value)).normalize().as_tuple().exponent
        return max(0, -int(exponent))
    except (ArithmeticError, ValueError, TypeError):  # "True", "inf" (exponent "F"), "nan" ("n")
        return 0


def widening(runs: list[Any]) -> tuple[int, float]:
    """(d, 0.5 * 10**-d) for the reference runs of a numeric question."""
    d = max((decimal_places(v) for v in runs), default=0)
    return d, 0.5 * 10.0**-d


def _compare(value: Any, op: Any) -> bool:
    """``op(value)`` as upstream evaluates it (numpy broadcasting included); IncomparableValue when it raises."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(op(value))
    except (TypeError, ValueError, OverflowError, RecursionError, AttributeError) as exc:
        raise IncomparableValue(f"{short_repr(value)} cannot be compared with a number") from exc


def judge_numeric(value: Any, interval: tuple[float, float], widened: tuple[float, float]) -> str | None:
    """The rule that accepts ``value`` (interval, widening or isclose), or None when none does."""
    low, high = np.float64(widened[0]), np.float64(widened[1])
    inside = _compare(value, lambda v: bool(low <= v) and bool(v <= high))
    if inside:
        return INTERVAL if _compare(value, lambda v: bool(interval[0] <= v) and bool(v <= interval[1])) else WIDENING
    if _compare(value, lambda v: np.isclose(v, low)) or _compare(value, lambda v: np.isclose(v, high)):
        return ISCLOSE
    return None


def as_bool_text(value: Any) -> tuple[Any, bool]:
    """For a True/False reference: a bool or the number 1/0 as "True"/"False"; (value, whether it was turned)."""
    if isinstance(value, bool):
        return str(value), True
    if isinstance(value, (int, float)):
        if value == 1:
            return "True", True
        if value == 0:
            return "False", True
    return value, False


def judge_string(value: Any, expected: Any, aliases: frozenset[str] | None) -> tuple[bool, str]:
    """(correct, rule) of a string question: compared with the first run, case-insensitively."""
    reference = str(expected)
    rule = ALIAS if aliases is not None else STRING
    if reference.lower() in ("true", "false"):
        value, turned = as_bool_text(value)
        if turned and aliases is None:
            rule = BOOL
    try:
        text = str(value).lower()
    except (ValueError, RecursionError, TypeError) as exc:  # str() of a huge int, deep nesting
        raise IncomparableValue(f"{short_repr(value)} cannot be compared ({type(exc).__name__})") from exc
    if aliases is not None:
        return text in {a.lower() for a in aliases}, rule
    return text == reference.lower(), rule


def judge_list(value: Any, expected: Any, subsets: tuple[frozenset[str], ...] | None) -> tuple[bool, str]:
    """(correct, rule) of a list question: a case-insensitive set equal to an alias subset, else ordered ``==``."""
    if subsets is None:
        try:
            return bool(value == expected), LIST
        except (ValueError, RecursionError, TypeError) as exc:
            raise IncomparableValue(f"{short_repr(value)} cannot be compared ({type(exc).__name__})") from exc
    try:
        # upstream iterates whatever was reported: a string gives its characters, a number raises
        lowered = {item.lower() for item in value}
    except (TypeError, AttributeError) as exc:
        raise IncomparableValue(f"{short_repr(value)} is not a list of strings") from exc
    return any(lowered == {a.lower() for a in subset} for subset in subsets), ALIAS


def score_report_v11(gold: Any, report: Any, capsule_id: str = "", *, upstream_abort: bool = False) -> CapsuleScore:
    """Score one capsule's parsed ``report`` (question text -> answer) against ``gold`` (the task's ``results``) by
    the v1.1 rules; ``capsule_id`` selects the aliases. Never raises. Each verdict names the rule that decided it
    (``rule``) and, for numeric questions, the evidence (interval, d, tolerance, widened bounds); ``expected`` holds
    the widened bounds. Plain Python, like :func:`scorer.score_report`."""
    kinds = question_kinds(gold)
    if not kinds and not (isinstance(gold, (list, tuple)) and gold and isinstance(gold[0], Mapping)):
        return CapsuleScore(error="the gold has no reference run (expected a list of objects)")
    results = list(gold)
    reference = results[0]
    report = dict(report) if isinstance(report, Mapping) else {}
    normalized = {key: normalize_reported(value) for key, value in report.items()}
    string_aliases = STRING_ALIASES.get(capsule_id, {})
    list_aliases = LIST_ALIASES.get(capsule_id, {})

    expected: dict[str, Any] = {q: reference[q] for q in kinds}
    bounds: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {}
    evidence: dict[str, dict[str, Any]] = {}
    unusable: dict[str, str] = {}
    for question, kind in kinds.items():
        if kind != "numeric":
            continue
        runs = [run.get(question) for run in results]
        try:
            interval = prediction_interval(runs)
        except Exception as exc:  # a run lacks it, mixed types, huge integers: upstream's outer handler
            unusable[question] = f"reference runs unusable ({type(exc).__name__}: {short_repr(str(exc), 120)})"
            continue
        d, tolerance = widening(runs)
        widened = (interval[0] - tolerance, interval[1] + tolerance)
        bounds[question] = (interval, widened)
        expected[question] = list(widened)
        evidence[question] = {"interval": list(interval), "decimals": d, "tolerance": tolerance}

    def judge_one(verdict: QuestionVerdict, key: str) -> None:
        verdict.correct, verdict.rule = judge(
            verdict.kind, normalized[key], key, bounds, reference, string_aliases, list_aliases
        )

    return settle(kinds, report, expected, unusable, judge_one, upstream_abort=upstream_abort, evidence=evidence)


def judge(
    kind: str,
    value: Any,
    question: str,
    bounds: Mapping[str, tuple[tuple[float, float], tuple[float, float]]],
    reference: Mapping[str, Any],
    string_aliases: Mapping[str, frozenset[str]],
    list_aliases: Mapping[str, tuple[frozenset[str], ...]],
) -> tuple[bool, str]:
    """(correct, the rule that decided) of one answered question; IncomparableValue when upstream's check raises."""
    if kind == "numeric":
        interval, widened = bounds[question]
        rule = judge_numeric(value, interval, widened)
        return rule is not None, rule or INTERVAL
    if kind == "list":
        return judge_list(value, reference[question], list_aliases.get(question))
    return judge_string(value, reference[question], string_aliases.get(question))
