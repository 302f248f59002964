"""Re-grading a CORE-Bench run's saved answers under another data set's rules, without an agent or a model.

``--bench-replay=RUN_DIR --bench-dataset=v1.1`` (or ``v1.1-ood``) on a run made on another data set (a v1 run)
reads each capsule's saved submission (``artifacts/<key>/submission.json``, written by every scored item) and scores
it against the chosen set's manifest by its grading rules. Only the capsules both have are graded: the others are
skipped with the reason. Nothing is fetched or run; each record says it is a re-grade and of which run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...core.options import view
from ...core.run_options import RunOptions
from . import dataset, scorer

SETTINGS_FILE = "settings.json"  # the replayed run's settings (report/resume.py writes it)
SUBMISSION = "submission.json"


def replayed_data_set(folder: Path) -> str:
    """The data set a run folder was made on (its settings.json; v1 when it names none or cannot be read)."""
    try:
        stored = json.loads((Path(folder) / SETTINGS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return dataset.V1
    return str(stored.get("dataset") or dataset.V1) if isinstance(stored, dict) else dataset.V1


def regrade_source(opts: Mapping[str, Any]) -> Path | None:
    """The run whose saved answers this run re-grades: a replay on a v1.1 set of a run made on another set."""
    replay = opts.get("replay")  # a report option (--bench-replay), declared above this layer: read by name
    chosen = dataset.data_set(view(RunOptions, opts).dataset)
    if not replay or chosen.manifest is None or replayed_data_set(Path(replay)) == chosen.name:
        return None
    return Path(replay)


def saved_submission_path(folder: Path, key: str) -> Path:
    return Path(folder) / "artifacts" / key / SUBMISSION


def has_saved_submission(folder: Path, capsule_id: str) -> bool:
    """Whether the run saved answers for the capsule (its one attempt, or any of its attempts)."""
    artifacts = Path(folder) / "artifacts"
    return saved_submission_path(folder, capsule_id).is_file() or any(
        artifacts.glob(f"{capsule_id}[[]attempt*[]]/{SUBMISSION}")
    )


def not_in_run_reason(folder: Path) -> str:
    return f"not re-graded: {folder} has no saved answers for this capsule (not in that run, or never scored)"


def load_saved(folder: Path, key: str) -> tuple[scorer.Submission | None, str | None]:
    """(the saved submission, None), or (None, why it cannot be used)."""
    path = saved_submission_path(folder, key)
    try:
        raw = scorer.read_regular_file(path, scorer.MAX_REPORT_BYTES * 2)
        saved = scorer.loads_shallow(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        return None, f"re-grade: {path} cannot be read ({str(exc)[:200]})"
    report = saved.get("report") if isinstance(saved, dict) else None
    if not isinstance(report, dict):
        return None, f"re-grade: {path} holds no report object"
    source = str(saved.get("source") or "none")
    return scorer.Submission(report, source=f"re-grade of {source}", warning=saved.get("warning")), None


def regrade_fields(folder: Path, grading: str) -> dict[str, Any]:
    """What a re-graded record says of its origin."""
    return {"regrade": {"from": str(folder), "replayed_dataset": replayed_data_set(folder), "grading": grading}}
