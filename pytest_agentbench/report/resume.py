"""Resume an interrupted run in its own folder.

The controller reads the run's records file (a torn last line is dropped with a warning and cut off
the file, so new records start on a clean line), checks that the settings are those of the
interrupted run (``settings.json``, written with the first record), and hands the finished records'
byte length to xdist workers, which read exactly that prefix: later lines are this run's own.
Finished items are then reported from their records, not run again (see ``plugin.run_item``).
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .. import records as rec
from .baseline import settings_differences

SETTINGS_FILE = "settings.json"
WORKER_KEY = "agentbench_resume_bytes"


@dataclass
class Resumed:
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    size: int = 0


def resume_dir(config: pytest.Config, text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = Path(config.invocation_params.dir) / path
    if not path.is_dir():
        raise pytest.UsageError(f"agentbench: --bench-resume {path} is not a folder; give the run folder of the "
                                f"interrupted run (reports/<benchmark>/<model>/<run-id>)")
    return path


def check_settings(run_dir: Path, settings: dict[str, Any]) -> None:
    file = run_dir / SETTINGS_FILE
    if not file.is_file():
        return  # the run was killed before its first record: nothing to protect
    old = json.loads(file.read_text(encoding="utf-8"))
    diffs = settings_differences(old, settings)
    if old.get("model") != settings.get("model"):
        diffs.insert(0, f"model: {old.get('model')} vs {settings.get('model')}")
    if diffs:
        raise pytest.UsageError(f"agentbench: --bench-resume {run_dir}: this run's settings differ from the "
                                f"interrupted run's: {'; '.join(diffs)}; resume with the same options")


def load_for_controller(records_path: Path) -> Resumed:
    """Read the finished records; cut a torn or corrupt line off the file so appends stay whole."""
    out = Resumed()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = rec.read_records(records_path)
    for w in caught:
        out.notes.append(str(w.message))
        warnings.warn(str(w.message), stacklevel=2)
    if caught:
        rec.rewrite_records(records_path, records)
    out.records = rec.latest_by_id(records)
    out.size = records_path.stat().st_size if records_path.exists() else 0
    out.notes.insert(0, f"resuming {records_path.parent}: {len(out.records)} finished record(s) reused, "
                        f"the rest runs now")
    return out


def load_for_worker(records_path: Path, size: int) -> Resumed:
    """The records the controller saw: the first ``size`` bytes of the file (whole lines only)."""
    out = Resumed(size=size)
    if not size:
        return out
    with open(records_path, "rb") as fh:
        head = fh.read(size)
    for line in head.split(b"\n"):
        if line.strip():
            record = json.loads(line)
            out.records[record["id"]] = record
    return out


class ResumeXdist:
    """Controller side under xdist: tell each worker how much of the records file is the old run's."""

    def __init__(self, size: int) -> None:
        self.size = size

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[WORKER_KEY] = self.size


def write_settings_once(run_dir: Path, settings: dict[str, Any]) -> None:
    file = run_dir / SETTINGS_FILE
    if file.exists():
        return
    from .reporter import write_atomic

    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(file, json.dumps(settings, indent=2, sort_keys=True, default=rec._fallback))
