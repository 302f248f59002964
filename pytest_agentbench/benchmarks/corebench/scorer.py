"""CORE-Bench scoring, with the same verdicts as upstream ``benchmark/evaluations.py``.

Rules (facts read from siegelz/core-bench; the code here is our own):

* A question's type comes from the first reference run: int/float -> numeric, list -> list,
  anything else -> string. A question is a figure question when ``"fig"`` occurs in its text
  (case-sensitive, so "Figure 2" alone counts as a written question, as upstream).
* Every reported string loses its ``%`` signs and becomes a float when ``float()`` accepts it.
* Numeric: correct when ``mean - h <= value <= mean + h`` with
  ``h = t.ppf(0.975, n-1) * s * sqrt(1 + 1/n)`` and ``s`` the sample std (ddof=1) of the n runs.
* String: ``str(value).lower() == str(expected).lower()`` (no stripping).
* List: ``value == expected`` with the first run's list.
* A missing question is wrong; keys that are not questions are ignored.
* A capsule is correct when every written and every figure question is correct.

Upstream evaluates the reported keys in report order and stops at the first value that raises
when compared (a string or null given for a numeric question); every later key then earns
nothing. By default such a value only fails its own question; ``upstream_abort=True`` keeps
upstream's behaviour.
"""
from __future__ import annotations

import json
import math
import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

REPORT_NAME = "report.json"
MAX_REPORT_BYTES = 10 * 1024 * 1024  # a report is a handful of answers; refuse runaway files


class IncomparableValue(Exception):
    """A reported value that upstream's comparison raises on."""


@dataclass
class QuestionVerdict:
    question: str
    kind: str  # "numeric", "string" or "list"
    figure: bool
    answered: bool
    submitted: Any  # the value as found in the report (JSON)
    expected: Any  # [low, high] for numeric questions, else the reference value
    correct: bool
    note: str | None = None  # why it is wrong when that is not obvious


@dataclass
class CapsuleScore:
    verdicts: list[QuestionVerdict] = field(default_factory=list)
    aborted_at: str | None = None  # upstream mode: the question whose value stopped the scoring

    def _count(self, figure: bool, correct_only: bool) -> int:
        return sum(1 for v in self.verdicts if v.figure == figure and (v.correct or not correct_only))

    @property
    def total_written(self) -> int:
        return self._count(False, False)

    @property
    def total_figure(self) -> int:
        return self._count(True, False)

    @property
    def correct_written(self) -> int:
        return self._count(False, True)

    @property
    def correct_figure(self) -> int:
        return self._count(True, True)

    @property
    def all_correct(self) -> bool:
        return all(v.correct for v in self.verdicts)

    def to_record(self) -> dict[str, Any]:
        return {
            "questions": [asdict(v) for v in self.verdicts],
            "correct_written": self.correct_written,
            "total_written": self.total_written,
            "correct_figure": self.correct_figure,
            "total_figure": self.total_figure,
            "aborted_at": self.aborted_at,
        }


# --------------------------------------------------------------------------- question facts

def is_figure_question(question: str) -> bool:
    return "fig" in question


def question_kind(reference_value: Any) -> str:
    if isinstance(reference_value, (int, float)):  # bool is an int, as upstream
        return "numeric"
    if isinstance(reference_value, list):
        return "list"
    return "string"


def prediction_interval(values: list[float]) -> tuple[float, float]:
    """95% prediction interval for one more run, from the n reference runs."""
    n = len(values)
    if n < 2:
        raise ValueError(f"a numeric question needs at least 2 reference runs, got {n}")
    mean = np.mean(values)
    std = np.std(values, ddof=1)
    from scipy.stats import t as student_t  # here, not at import: scipy.stats costs a second at every pytest start

    half = student_t.ppf(0.975, n - 1) * std * math.sqrt(1 + 1 / n)
    return float(mean - half), float(mean + half)


def question_totals(results: list[Mapping[str, Any]]) -> tuple[int, int]:
    """(written, figure) question counts of a task, for records that could not be scored."""
    questions = list(results[0]) if results else []
    figure = sum(1 for q in questions if is_figure_question(q))
    return len(questions) - figure, figure


# --------------------------------------------------------------------------- value handling

def normalize_reported(value: Any) -> Any:
    """Upstream's coercion: strings lose every ``%`` and become floats when they parse."""
    if not isinstance(value, str):
        return value
    stripped = value.replace("%", "")
    try:
        return float(stripped)
    except ValueError:
        return stripped


def _within(value: Any, low: float, high: float) -> bool:
    """``low <= value <= high`` with numpy float bounds, like upstream; raise when that raises."""
    lo, hi = np.float64(low), np.float64(high)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # numpy broadcasts lists, so a one-number list compares like upstream's does
            return bool(lo <= value) and bool(value <= hi)
    except (TypeError, ValueError) as exc:
        raise IncomparableValue(f"{value!r} cannot be compared with a number") from exc


def _judge(kind: str, value: Any, expected: Any, interval: tuple[float, float] | None) -> bool:
    if kind == "numeric":
        assert interval is not None
        return _within(value, *interval)
    if kind == "list":
        return value == expected
    return str(value).lower() == str(expected).lower()


# --------------------------------------------------------------------------- scoring

def score_report(gold: list[Mapping[str, Any]], report: Mapping[str, Any] | None, *,
                 upstream_abort: bool = False) -> CapsuleScore:
    """Score one capsule's parsed ``report`` (question text -> answer) against ``gold``, the task's
    ``results`` list of reference runs.

    Returns a ``CapsuleScore``: ``verdicts`` (one ``QuestionVerdict`` per question of the first
    reference run, in its order), the written/figure counts, ``all_correct`` (the capsule verdict) and
    ``aborted_at``. Plain Python: no pytest, no files::

        from pytest_agentbench.benchmarks.corebench import score_report
        score = score_report(task["results"], json.load(open("report.json")))
    """
    if not gold:
        raise ValueError("a CORE-Bench task needs at least one reference run in 'results'")
    results = gold
    reference = results[0]
    report = dict(report or {})
    normalized = {key: normalize_reported(value) for key, value in report.items()}

    expected: dict[str, Any] = {}
    intervals: dict[str, tuple[float, float]] = {}
    for question, value in reference.items():
        if question_kind(value) == "numeric":
            intervals[question] = prediction_interval([run[question] for run in results])
            expected[question] = list(intervals[question])
        else:
            expected[question] = value

    verdicts: dict[str, QuestionVerdict] = {
        q: QuestionVerdict(question=q, kind=question_kind(v), figure=is_figure_question(q),
                           answered=q in report, submitted=report.get(q), expected=expected[q],
                           correct=False, note=None if q in report else "missing")
        for q, v in reference.items()
    }

    score = CapsuleScore(verdicts=list(verdicts.values()))
    # report order matters only for upstream's abort: later keys are never looked at
    for key in report:
        verdict = verdicts.get(key)
        if verdict is None:
            continue  # not a question: ignored
        if score.aborted_at is not None:
            verdict.note = f"not scored: upstream stops at the first incomparable value ({score.aborted_at!r})"
            continue
        try:
            verdict.correct = _judge(verdict.kind, normalized[key], reference[key], intervals.get(key))
        except IncomparableValue as exc:
            verdict.note = str(exc)
            if upstream_abort:
                score.aborted_at = key
    return score


# --------------------------------------------------------------------------- finding the submission

@dataclass
class Submission:
    report: dict[str, Any]
    source: str  # "report.json" relative path, "final_answer" or "none"
    warning: str | None = None


def find_report(workspace: Path) -> Path | None:
    """``report.json`` at the workspace root, else the first one in a sorted top-down walk.

    Symlinks are not followed and a report.json that resolves outside the workspace is skipped:
    the agent controls the workspace, the plugin must not read files it points at.
    """
    workspace = Path(workspace)
    root = workspace.resolve()
    for directory, subdirs, files in os.walk(workspace):
        subdirs.sort()
        if REPORT_NAME in files:
            candidate = Path(directory) / REPORT_NAME
            resolved = candidate.resolve()
            if resolved.is_file() and resolved.is_relative_to(root):
                return candidate
    return None


def _parse_json_object(text: str) -> Any:
    text = text.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, flags=re.DOTALL)
    if fenced:
        text = fenced.group(1)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        if 0 <= start < end:
            return json.loads(text[start:end + 1])  # prose around one JSON object
        raise


def _as_object(value: Any, where: str) -> tuple[dict[str, Any], str | None]:
    if isinstance(value, dict):
        return value, None
    return {}, f"{where} is not a JSON object (got {type(value).__name__}); scored as an empty submission"


def load_submission(workspace: Path, final_answer: Any = None) -> Submission:
    """The agent's answers: report.json in the workspace wins, else the returned final answer.

    Malformed input never raises: it becomes an empty submission with a warning.
    """
    path = find_report(workspace)
    if path is not None:
        source = path.relative_to(workspace).as_posix()
        if path.stat().st_size > MAX_REPORT_BYTES:
            return Submission({}, source, f"{source} is larger than {MAX_REPORT_BYTES} bytes; scored as empty")
        try:
            value = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except json.JSONDecodeError as exc:
            return Submission({}, source, f"{source} is not valid JSON ({exc}); scored as an empty submission")
        report, warning = _as_object(value, source)
        return Submission(report, source, warning)
    if final_answer is None:
        return Submission({}, "none", "no report.json in the workspace and no final answer")
    if isinstance(final_answer, str):
        try:
            final_answer = _parse_json_object(final_answer)
        except json.JSONDecodeError as exc:
            return Submission({}, "final_answer",
                              f"final answer holds no JSON object ({exc}); scored as an empty submission")
    report, warning = _as_object(final_answer, "final answer")
    return Submission(report, "final_answer", warning)
