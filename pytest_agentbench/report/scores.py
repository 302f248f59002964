"""Which score a run is judged on: ``automatic`` (the grader's verdicts) or ``reviewed`` (human overrides applied).

A benchmark with a review (CORE-Bench's ``--bench-review``) puts both into its summary as ``scores`` (each with
its own ``metrics``) and each reviewed item's status as ``reviewed_status`` in ``items``; ``metrics`` and each
item's ``status`` stay the automatic ones. ``--bench-set=gate_score=reviewed`` makes the gates and the baseline
comparison read the reviewed ones through ``score_view``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.records import RecordLike

AUTOMATIC, REVIEWED = "automatic", "reviewed"


def reviewed_status_of(record: RecordLike) -> dict[str, str]:
    """``{"reviewed_status": ...}`` for a summary item whose record carries a human review, else nothing."""
    review = record.get("review")
    if isinstance(review, Mapping) and isinstance(review.get("status"), str):
        return {"reviewed_status": review["status"]}
    return {}


def score_view(summary: Mapping[str, Any], score: str) -> dict[str, Any]:
    """The summary as the ``score`` sees it: for ``reviewed``, the reviewed metrics and item statuses (a summary
    without a reviewed score has no metrics then, so a gate on it fails and says so); else the summary itself."""
    if score != REVIEWED:
        return dict(summary)
    reviewed = (summary.get("scores") or {}).get(REVIEWED)
    metrics = dict(reviewed.get("metrics") or {}) if isinstance(reviewed, Mapping) else {}
    items = [{**item, "status": item.get("reviewed_status", item.get("status"))} for item in summary.get("items", [])]
    return {**summary, "metrics": metrics, "items": items}
