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
import stat
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from ...core.text import repair_value
from ...core.trees import TreePastBound, walk_tree

REPORT_NAME = "report.json"
MAX_REPORT_BYTES = 10 * 1024 * 1024  # a report is a handful of answers; refuse runaway files
# A report is an object of answers (depth 1, a list answer 2 or 3). Deeper JSON is refused before it is decoded:
# the decoder, the text repair, the verdicts' copies and the record's encoding all recurse once per level, and
# about 900 levels already exhaust Python's recursion limit in one of them.
MAX_JSON_DEPTH = 100


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
    rule: str | None = None  # v1.1 grading: the rule that decided (interval, widening, isclose, alias, bool, ...)
    evidence: dict[str, Any] | None = None  # v1.1 numeric: the raw interval, the decimals d and the tolerance

    def to_record(self) -> dict[str, Any]:
        """The verdict as a record field; ``rule`` and ``evidence`` only when set, so v1 records stay as they were."""
        out = asdict(self)
        for extra in ("rule", "evidence"):
            if out[extra] is None:
                del out[extra]
        return out


@dataclass
class CapsuleScore:
    verdicts: list[QuestionVerdict] = field(default_factory=list)
    aborted_at: str | None = None  # upstream mode: the question whose value stopped the scoring
    error: str | None = None  # the gold itself could not be used (upstream: 0 correct for the capsule)

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
        return self.error is None and all(v.correct for v in self.verdicts)

    def to_record(self) -> dict[str, Any]:
        return {
            "questions": [v.to_record() for v in self.verdicts],
            "correct_written": self.correct_written,
            "total_written": self.total_written,
            "correct_figure": self.correct_figure,
            "total_figure": self.total_figure,
            "aborted_at": self.aborted_at,
            "scoring_error": self.error,
        }


# --------------------------------------------------------------------------- question facts


def is_figure_question(question: str) -> bool:
    return "fig" in question


def question_kind(reference_value: Any) -> str | None:
    """The type of a question from the first reference run's value; None: not a question (null, an object)."""
    if isinstance(reference_value, (int, float)):  # bool is an int, as upstream
        return "numeric"
    if isinstance(reference_value, list):
        return "list"
    if isinstance(reference_value, str):
        return "string"
    return None


def prediction_interval(values: list[Any]) -> tuple[float, float]:
    """95% prediction interval for one more run, from the n reference runs, computed as upstream.

    One run gives a NaN interval (no value lies in it). Values numpy cannot average (a missing
    run, text, huge integers) raise, as they do upstream."""
    n = len(values)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one run: numpy warns about ddof; the NaN is the answer
        mean = np.mean(values)
        std = np.std(values, ddof=1)
        from scipy.stats import t as student_t  # here, not at import: scipy.stats costs a second at every pytest start

        half = student_t.ppf(0.975, n - 1) * std * math.sqrt(1 + 1 / n)
        return float(mean - half), float(mean + half)


def question_kinds(results: Any) -> dict[str, str]:
    """question -> kind, for the questions of the first reference run (an unusable gold has none)."""
    if not isinstance(results, (list, tuple)) or not results or not isinstance(results[0], Mapping):
        return {}
    return {q: kind for q, v in results[0].items() if (kind := question_kind(v)) is not None}


def question_totals(results: list[Mapping[str, Any]]) -> tuple[int, int]:
    """(written, figure) question counts of a task, for records that could not be scored."""
    questions = list(question_kinds(results))
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
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise IncomparableValue(f"{short_repr(value)} cannot be compared with a number") from exc


def short_repr(value: Any, limit: int = 80) -> str:
    """A value's repr for a note, safe for values whose repr itself fails (huge ints, deep nesting)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__} too large to print"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _judge(kind: str, value: Any, expected: Any, interval: tuple[float, float] | None) -> bool:
    if kind == "numeric":
        assert interval is not None
        return _within(value, *interval)
    try:
        if kind == "list":
            return value == expected
        return str(value).lower() == str(expected).lower()
    except (ValueError, RecursionError, TypeError, OverflowError) as exc:  # str() of a huge int, deep nesting
        raise IncomparableValue(f"{short_repr(value)} cannot be compared ({type(exc).__name__})") from exc


# --------------------------------------------------------------------------- scoring


def score_report(gold: Any, report: Any, *, upstream_abort: bool = False) -> CapsuleScore:
    """Score one capsule's parsed ``report`` (question text -> answer) against ``gold``, the task's
    ``results`` list of reference runs. Never raises: every input gets a verdict.

    Returns a ``CapsuleScore``: ``verdicts`` (one ``QuestionVerdict`` per question of the first
    reference run, in its order; null and object values are not questions), the written/figure
    counts, ``all_correct`` (the capsule verdict), ``aborted_at`` and ``error``. Plain Python: no
    pytest, no files::

        from pytest_agentbench.benchmarks.corebench import score_report
        score = score_report(task["results"], json.load(open("report.json")))
    """
    kinds = question_kinds(gold)
    if not kinds and not (isinstance(gold, (list, tuple)) and gold and isinstance(gold[0], Mapping)):
        return CapsuleScore(error="the gold has no reference run (expected a list of objects)")
    results = list(gold)
    reference = results[0]
    report = dict(report) if isinstance(report, Mapping) else {}
    normalized = {key: normalize_reported(value) for key, value in report.items()}

    expected: dict[str, Any] = {}
    intervals: dict[str, tuple[float, float]] = {}
    unusable: dict[str, str] = {}  # numeric questions whose reference runs numpy cannot average
    for question, kind in kinds.items():
        expected[question] = reference[question]
        if kind != "numeric":
            continue
        try:
            intervals[question] = prediction_interval([run[question] for run in results])
        except Exception as exc:  # a run lacks it, mixed types, huge integers: upstream's outer handler
            unusable[question] = f"reference runs unusable ({type(exc).__name__}: {short_repr(str(exc), 120)})"
            continue
        expected[question] = list(intervals[question])

    def judge_one(verdict: QuestionVerdict, key: str) -> None:
        verdict.correct = _judge(verdict.kind, normalized[key], reference[key], intervals.get(key))

    return settle(kinds, report, expected, unusable, judge_one, upstream_abort=upstream_abort)


def settle(
    kinds: Mapping[str, str],
    report: Mapping[str, Any],
    expected: Mapping[str, Any],
    unusable: Mapping[str, str],
    judge_one: Callable[[QuestionVerdict, str], None],
    *,
    upstream_abort: bool,
    evidence: Mapping[str, Any] | None = None,
) -> CapsuleScore:
    """The verdicts of one capsule, as upstream reaches them under either rule set: one verdict per question, the
    ``unusable`` questions noted (with ``upstream_abort`` none is scored), then the reported keys judged in report
    order by ``judge_one`` (it sets the verdict's fields, or raises IncomparableValue, which with
    ``upstream_abort`` leaves every later key unscored)."""
    verdicts: dict[str, QuestionVerdict] = {
        q: QuestionVerdict(
            question=q,
            kind=kind,
            figure=is_figure_question(q),
            answered=q in report,
            submitted=report.get(q),
            expected=expected[q],
            correct=False,
            note=None if q in report else "missing",
            evidence=(evidence or {}).get(q),
        )
        for q, kind in kinds.items()
    }
    score = CapsuleScore(verdicts=list(verdicts.values()))
    if unusable:
        for question, why in unusable.items():
            verdicts[question].note = why
        if upstream_abort:  # upstream computes every interval first: one failure gives 0 correct
            score.error = f"{next(iter(unusable))!r}: {next(iter(unusable.values()))}"
            for each in score.verdicts:
                if each.question not in unusable:
                    each.note = "not scored: upstream scores nothing when a reference interval fails"
            return score
    # report order matters only for upstream's abort: later keys are never looked at
    for key in report:
        verdict = verdicts.get(key)
        if verdict is None or key in unusable:
            continue  # not a question (ignored), or noted above
        if score.aborted_at is not None:
            verdict.note = f"not scored: upstream stops at the first value that raises ({score.aborted_at!r})"
            continue
        try:
            judge_one(verdict, key)
        except IncomparableValue as exc:
            verdict.note = str(exc)
            if upstream_abort:
                score.aborted_at = key
    return score


# --------------------------------------------------------------------------- finding the submission

REPORT_STATUSES = ("found", "missing", "invalid", "too large")


@dataclass
class Submission:
    report: dict[str, Any]
    source: str  # "report.json" relative path, "final_answer" or "none"
    warning: str | None = None
    report_status: str = "missing"  # one of REPORT_STATUSES: what became of report.json
    report_path: str | None = None  # relative to the workspace root, when one was found
    text_repaired: int = 0  # characters of the answers replaced by U+FFFD (a JSON "\\udc80" is a lone surrogate)

    @property
    def submission_source(self) -> str:
        """Where the scored answers came from: "report", "final_answer" or "none"."""
        return "report" if self.report_path is not None else self.source


def find_report(workspace: Path) -> Path | None:
    """``report.json`` at the workspace root, else the first one in a sorted top-down walk.

    Symlinks are not followed and a report.json that resolves outside the workspace is skipped:
    the agent controls the workspace, the plugin must not read files it points at. The walk is bounded
    (``core.trees``): past a bound nothing more is looked at. Never raises.
    """
    workspace = Path(workspace)
    try:
        root = workspace.resolve()
    except (OSError, RuntimeError):
        return None
    try:
        for path, info in walk_tree(workspace):
            if PurePosixPath(path).name != REPORT_NAME or stat.S_ISDIR(info.st_mode):
                continue
            candidate = workspace / path
            try:
                resolved = candidate.resolve()
                if resolved.is_file() and resolved.is_relative_to(root):
                    return candidate
            except (OSError, RuntimeError):  # a symlink loop, a file that vanished
                continue
    except TreePastBound:
        return None
    return None


class TooDeep(ValueError):
    """JSON (text or an already decoded value) nested deeper than MAX_JSON_DEPTH."""

    def __init__(self, limit: int = MAX_JSON_DEPTH) -> None:
        super().__init__(f"nested deeper than {limit} levels")


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_text_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON ``text`` (brackets inside strings do not count), found without
    decoding it and without recursion: linear in the text, also for 10 MB of brackets."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if not brackets:
        return 0
    codes = np.frombuffer(brackets.encode("ascii"), dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(np.cumsum(steps).max())


def loads_shallow(text: str, limit: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` for JSON from outside; ``TooDeep`` (a ValueError) before decoding nesting past ``limit``."""
    if json_text_depth(text) > limit:
        raise TooDeep(limit)
    return json.loads(text)


def check_value_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """``TooDeep`` when dicts, lists and tuples nest deeper than ``limit`` in ``value`` (a user's client may return
    any object, a cyclic one too: a cycle is infinitely deep). Iterative: safe at any depth."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if not isinstance(item, (dict, list, tuple)):
            continue
        if depth > limit:
            raise TooDeep(limit)
        pending.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))


def _parse_json_object(text: str) -> Any:
    text = text.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, flags=re.DOTALL)
    if fenced:
        text = fenced.group(1)
    try:
        return loads_shallow(text)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        if 0 <= start < end:
            return loads_shallow(text[start : end + 1])  # prose around one JSON object
        raise


# json.loads failures that are not JSONDecodeError: an integer past Python's digit limit (ValueError),
# nesting past MAX_JSON_DEPTH (TooDeep, a ValueError); RecursionError stays as a last guard
JSON_FAILURES = (ValueError, RecursionError)


def _as_object(value: Any, where: str) -> tuple[dict[str, Any], str | None]:
    if isinstance(value, dict):
        return value, None
    return {}, f"{where} is not a JSON object (got {type(value).__name__}); scored as an empty submission"


def _why(exc: BaseException) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]


def read_regular_file(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path``, which must be a regular file itself (not a link, a FIFO or a
    device): the agent owns the workspace and may swap what ``find_report`` saw."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name} is not a regular file")
        return fh.read(limit)


def read_report(path: Path, source: str) -> Submission:
    """A found report.json as a submission; unreadable, oversized or malformed ones score as empty."""
    try:
        raw = read_regular_file(path, MAX_REPORT_BYTES + 1)
        if len(raw) > MAX_REPORT_BYTES:
            return Submission(
                {},
                warning=f"{source} is larger than {MAX_REPORT_BYTES} bytes; scored as empty",
                report_status="too large",
                source=source,
                report_path=source,
            )
    except OSError as exc:
        return Submission(
            {},
            warning=f"{source} cannot be read ({exc}); scored as an empty submission",
            report_status="invalid",
            source=source,
            report_path=source,
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # upstream's harness reads such a report as empty
        return Submission(
            {},
            warning=f"{source} is not UTF-8 ({exc}); scored as an empty submission",
            report_status="invalid",
            source=source,
            report_path=source,
        )
    try:
        value = loads_shallow(text)
    except TooDeep as exc:
        return Submission(
            {},
            warning=f"{source} is refused: {exc}; scored as an empty submission",
            report_status="invalid",
            source=source,
            report_path=source,
        )
    except JSON_FAILURES as exc:
        return Submission(
            {},
            warning=f"{source} is not valid JSON ({_why(exc)}); scored as an empty submission",
            report_status="invalid",
            source=source,
            report_path=source,
        )
    report, warning = _as_object(value, source)
    report, repaired = repair_value(report)  # the answers are text from outside: valid UTF-8 from here on
    return Submission(
        report,
        warning=warning,
        report_status="invalid" if warning else "found",
        text_repaired=repaired,
        source=source,
        report_path=source,
    )


def load_submission(workspace: Path, final_answer: Any = None) -> Submission:
    """The agent's answers: report.json in the workspace wins, else the returned final answer.

    Malformed input never raises: it becomes an empty submission with a warning.
    """
    path = find_report(workspace)
    if path is not None:
        return read_report(path, path.relative_to(workspace).as_posix())
    if final_answer is None:
        return Submission({}, "none", "no report.json in the workspace and no final answer")
    if isinstance(final_answer, str):
        try:
            final_answer = _parse_json_object(final_answer)
        except JSON_FAILURES as exc:
            return Submission(
                {}, "final_answer", f"final answer holds no JSON object ({_why(exc)}); scored as an empty submission"
            )
    try:
        check_value_depth(final_answer)
    except TooDeep as exc:
        return Submission({}, "final_answer", f"final answer is {exc}; scored as an empty submission")
    report, warning = _as_object(final_answer, "final answer")
    report, repaired = repair_value(report)
    return Submission(report, "final_answer", warning, text_repaired=repaired)
