"""Human review of CORE-Bench verdicts: question-level overrides read from a YAML file (``--bench-review``).

Automatic grading is known to be wrong sometimes (an answer format upstream's grader cannot read, a reference
value itself in doubt), so a person may record a verdict beside the automatic one::

    overrides:
      - capsule: capsule-0201225
        question: "Report the AUC at the 'sample-level'."
        verdict: correct            # or wrong
        reviewer: ada
        reason: the report gives 0.91 as "91%" in a sentence; the paper's value

The file is read with ``yaml.safe_load`` and checked against the run's split when the run starts (``load_review``):
a malformed entry, or one naming a capsule or question the split does not have, is a ``ConfigError`` naming the
file, the line and the entry. Records keep the automatic verdict (``questions[i]["correct"]``, ``status``); an
override adds ``questions[i]["review"]`` (verdict and provenance) and ``record["review"]`` (the reviewed status
and counts, ``apply_review``), from which the summary computes the ``reviewed`` score beside the ``automatic`` one.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError
from . import scorer

VERDICTS = {"correct": True, "wrong": False}
FIELDS = ("capsule", "question", "verdict", "reviewer", "reason")
SCORED_STATUSES = ("pass", "fail")  # a record whose answers were scored: only those can be reviewed


@dataclass(frozen=True)
class Override:
    capsule: str
    question: str
    correct: bool
    reviewer: str
    reason: str
    line: int  # 1-based line of the entry in its file
    entry: int  # 1-based position in the overrides list

    @property
    def verdict(self) -> str:
        return "correct" if self.correct else "wrong"

    def where(self, file: str) -> str:
        return f"{file}:{self.line} (entry {self.entry})"


@dataclass(frozen=True)
class Review:
    file: str  # as given, named in every record it changes
    sha256: str
    overrides: tuple[Override, ...]

    def of_capsule(self, capsule: str) -> dict[str, Override]:
        return {o.question: o for o in self.overrides if o.capsule == capsule}

    def outside(self, capsules: Iterable[str]) -> list[Override]:
        """Overrides naming a capsule of the split that is not among ``capsules`` (this run's selection)."""
        chosen = set(capsules)
        return [o for o in self.overrides if o.capsule not in chosen]


# --------------------------------------------------------------------------- loading and checking


def questions_of(task: Mapping[str, Any]) -> list[str]:
    """The scored questions of a task, as the scorer sees them (first reference run, null/objects left out)."""
    results = task.get("results")
    if not isinstance(results, list) or not results or not isinstance(results[0], Mapping):
        return []
    return [q for q, value in results[0].items() if scorer.question_kind(value) is not None]


def entry_lines(text: str) -> list[int]:
    """1-based line of each item of the top-level ``overrides`` list (the values come from ``yaml.safe_load``;
    this reads the same text as nodes only to name lines in errors)."""
    import yaml  # why: only a run with a review file needs it

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        return []
    for key, value in root.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "overrides" and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return []


def load_review(path: Path | str, tasks: Sequence[Mapping[str, Any]], split: str) -> Review:
    """Read and check the review file ``path`` against the split's ``tasks`` (every capsule of the split, before
    any selection). Raises ConfigError naming the file, line and entry of the first problem found."""
    import yaml  # why: only a run with a review file needs it

    path = Path(path)
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--bench-review: {path} cannot be read ({exc}); give a YAML file of overrides") from None
    try:
        data = yaml.safe_load(text)
        lines = entry_lines(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"--bench-review: {path}{at} is not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict) or set(data) != {"overrides"} or not isinstance(data["overrides"], list):
        raise ConfigError(
            f"--bench-review: {path}:1: the file must be a mapping with one key, `overrides:`, "
            f"holding a list of entries ({', '.join(FIELDS)}); see docs/corebench.md"
        )
    by_capsule = {str(t.get("capsule_id")): t for t in tasks}
    overrides: list[Override] = []
    seen: dict[tuple[str, str], Override] = {}
    for number, entry in enumerate(data["overrides"], start=1):
        line = lines[number - 1] if number - 1 < len(lines) else 1
        override = check_entry(entry, number, line, path, by_capsule, split)
        earlier = seen.get((override.capsule, override.question))
        if earlier is not None:
            raise ConfigError(
                f"--bench-review: {path}:{line} (entry {number}): {override.capsule} question "
                f"{override.question!r} is already reviewed at line {earlier.line}; keep one entry"
            )
        seen[(override.capsule, override.question)] = override
        overrides.append(override)
    return Review(file=str(path), sha256=hashlib.sha256(raw).hexdigest(), overrides=tuple(overrides))


def check_entry(
    entry: Any, number: int, line: int, path: Path, by_capsule: Mapping[str, Mapping[str, Any]], split: str
) -> Override:
    where = f"--bench-review: {path}:{line} (entry {number})"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: an entry must be a mapping with {', '.join(FIELDS)}")
    unknown = sorted(str(k) for k in entry if k not in FIELDS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; an entry has {', '.join(FIELDS)}")
    missing = [k for k in FIELDS if k not in entry]
    if missing:
        raise ConfigError(f"{where}: missing {', '.join(missing)}; an entry has {', '.join(FIELDS)}")
    for key in FIELDS:
        if not isinstance(entry[key], str) or not entry[key].strip():
            raise ConfigError(f"{where}: {key} must be non-empty text, got {entry[key]!r}")
    capsule, question, verdict = entry["capsule"].strip(), entry["question"], entry["verdict"].strip().lower()
    if verdict not in VERDICTS:
        raise ConfigError(f"{where}: verdict must be correct or wrong, got {entry['verdict']!r}")
    task = by_capsule.get(capsule)
    if task is None:
        raise ConfigError(
            f"{where}: capsule {capsule!r} is not in the CORE-Bench {split} split; check the id "
            f"(capsule-NNNNNNN) and --bench-split"
        )
    questions = questions_of(task)
    if question not in questions:
        close = difflib.get_close_matches(question, questions, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else f"; its questions: {questions!r}"
        raise ConfigError(
            f"{where}: capsule {capsule} has no question {question!r} (the text must match the dataset's exactly){hint}"
        )
    return Override(
        capsule=capsule,
        question=question,
        correct=VERDICTS[verdict],
        reviewer=entry["reviewer"].strip(),
        reason=entry["reason"].strip(),
        line=line,
        entry=number,
    )


# --------------------------------------------------------------------------- records


def strip_review(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record as the automatic grader left it (a review of an earlier session removed)."""
    out = {k: v for k, v in record.items() if k != "review"}
    if isinstance(out.get("questions"), list):
        out["questions"] = [
            {k: v for k, v in q.items() if k != "review"} if isinstance(q, dict) else q for q in out["questions"]
        ]
    return out


def apply_review(record: Mapping[str, Any], review: Review | None) -> dict[str, Any]:
    """The record with this run's review applied (replacing any earlier one); automatic verdicts are kept.

    An overridden question gains ``review`` (verdict, reviewer, reason, file, line); the record gains ``review``
    with the reviewed ``status`` and ``correct_written``/``correct_figure`` and how many verdicts changed. A record
    whose answers were never scored (an error) has nothing to review: its overrides are listed as not applied."""
    out = strip_review(record)
    if review is None:
        return out
    mine = review.of_capsule(str(record.get("task", record.get("id"))))
    if not mine:
        return out
    questions = out.get("questions")
    if out.get("status") not in SCORED_STATUSES or not isinstance(questions, list) or not questions:
        out["review"] = {
            "file": review.file,
            "status": out.get("status"),
            "overrides": 0,
            "changed": 0,
            "not_applied": sorted(mine),
            "why": f"the capsule ended in {out.get('status')}, with no scored answers to review",
        }
        return out
    reviewed: list[Any] = []
    changed = applied = 0
    for question in questions:
        name = question.get("question") if isinstance(question, dict) else None
        override = mine.get(name) if isinstance(name, str) else None
        if override is None:
            reviewed.append(question)
            continue
        applied += 1
        changed += bool(question.get("correct")) != override.correct
        reviewed.append(
            {
                **question,
                "review": {
                    "verdict": override.verdict,
                    "reviewer": override.reviewer,
                    "reason": override.reason,
                    "file": review.file,
                    "line": override.line,
                },
            }
        )
    out["questions"] = reviewed
    correct = [effective_correct(q) for q in reviewed if isinstance(q, dict)]
    figure = [bool(q.get("figure")) for q in reviewed if isinstance(q, dict)]
    out["review"] = {
        "file": review.file,
        "status": "pass" if correct and all(correct) else "fail",
        "correct_written": sum(1 for c, f in zip(correct, figure) if c and not f),
        "correct_figure": sum(1 for c, f in zip(correct, figure) if c and f),
        "overrides": applied,
        "changed": changed,
    }
    return out


def effective_correct(question: Mapping[str, Any]) -> bool:
    """A question's verdict after review: the reviewer's when there is one, else the automatic one."""
    review = question.get("review")
    if isinstance(review, Mapping) and review.get("verdict") in VERDICTS:
        return VERDICTS[review["verdict"]]
    return bool(question.get("correct"))


def reviewed_view(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """What the reviewed score counts of a record: its reviewed status and counts where it has them."""
    review = record.get("review")
    if not isinstance(review, Mapping) or review.get("status") is None or "correct_written" not in review:
        return record
    return {
        **record,
        "status": review["status"],
        "correct_written": review["correct_written"],
        "correct_figure": review["correct_figure"],
    }
