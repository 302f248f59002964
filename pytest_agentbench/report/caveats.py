"""The warnings a run's reports lead with, from one source: the terminal, summary.md and report.html each render
``run_warnings(summary)``, so no page tells less than another.

A run is incomplete when selected items did not run (``summary["incomplete"]``), its score is incomplete when
items ended in an error, no verdict on the model (``summary["errors"]``: a model, environment or harness error, a
step blocked by one), and its answers may be earlier samples replayed from the response cache. Both of the first
two are mended by resuming the run (``--bench-resume`` runs the items not run and those that ended in an error
again, and keeps the pass and fail verdicts): the summary carries the command (``resume``), which the plugin
writes in, and each page shows it once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core import records as rec
from ..core.io import natural_key
from .served import summary_text as served_text
from .usage import replayed_text

LISTED = 30  # ids named in a warning; summary.json lists them all


@dataclass(frozen=True)
class RunWarning:
    kind: str  # "incomplete", "errors", "replayed" or "served": the style a page gives it
    text: str  # the headline
    detail: str = ""  # what it means for the numbers, and what to do


def errors_of(records: Iterable[rec.RecordLike]) -> dict[str, Any] | None:
    """``{"items": N, "counts": {status: n}, "ids": [...]}`` of the scored items that ended in an error (no
    verdict on the model, ``records.ERROR_STATUSES``), else None."""
    errors = [
        r
        for r in records
        if r.get("scored", True)
        and r.get("status") != "skipped"
        and rec.ended_in_error(r)
        and not rec.runs_again_on_resume(r)  # lost or unplaced: counted once, with the items not run
    ]
    if not errors:
        return None
    return {
        "items": len(errors),
        "counts": rec.count_statuses(errors),
        "ids": sorted((rec.record_key(r) for r in errors), key=natural_key),
    }


def listed(ids: Iterable[str], limit: int = LISTED) -> str:
    items = [str(i) for i in ids]
    return ", ".join(items[:limit]) + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def incomplete_text(incomplete: Mapping[str, Any], limit: int = LISTED) -> str:
    """``incomplete: 2 of 5 items not run: 2.2, 3.1``."""
    return (
        f"incomplete: {incomplete['not_run']} of {incomplete['selected']} items not run: "
        f"{listed(incomplete.get('items') or [], limit)}"
    )


def errors_text(errors: Mapping[str, Any]) -> str:
    """``2 item(s) ended in an error (1 model_error, 1 blocked): 29.2, 29.3``."""
    return (
        f"{errors['items']} item(s) ended in an error ({rec.counts_text(errors.get('counts') or {})}): "
        f"{listed(errors.get('ids') or [])}"
    )


def resume_command(summary: Mapping[str, Any]) -> str | None:
    """The command that runs again what the run lacks (the items not run, those that ended in an error)."""
    for key in ("incomplete", "errors"):
        part = summary.get(key)
        if isinstance(part, Mapping) and part.get("resume"):
            return str(part["resume"])
    return None


def run_warnings(summary: Mapping[str, Any]) -> list[RunWarning]:
    """The run's warnings, most important first: items not run, items that ended in an error, replayed answers,
    answers from another model than the one asked for."""
    out = []
    incomplete = summary.get("incomplete")
    if isinstance(incomplete, Mapping) and incomplete.get("not_run"):
        out.append(
            RunWarning(
                "incomplete",
                incomplete_text(incomplete),
                "Every metric is over the whole selection: an item not run counts as not passed.",
            )
        )
    errors = summary.get("errors")
    if isinstance(errors, Mapping) and errors.get("items"):
        out.append(
            RunWarning(
                "errors",
                errors_text(errors),
                "They are no verdict on the model and count as not passed: the score is incomplete. Resuming the "
                "run runs them again with its own settings and keeps the pass and fail verdicts.",
            )
        )
    replayed = replayed_text(summary.get("usage") or {}, summary.get("settings") or {})
    if replayed:  # at a temperature above 0 a "new" sample is the old one
        out.append(RunWarning("replayed", replayed))
    served = served_text(summary)
    if served:  # the scores are another model's
        out.append(RunWarning("served", served))
    return out
