"""The run loop: one process's state, the body of every benchmark item, and records to outcomes.

A process opens the benchmark's run once (the ``bench_run`` fixture, at its first item), runs
each item's sample through it and keeps the record on the item; ``writer.RecordWriter`` appends it to
disk and attaches it to the item's report.
"""
from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..benchmarks.base import Benchmark, BenchRun
from ..core import records as rec
from ..core.options import Settings
from ..core.types import Task


@dataclass
class BenchState:
    """What one process knows about the run, resolved at configure time."""

    benchmark: Benchmark
    split: str
    settings: dict[str, Any]  # the effective run settings (header, settings.json, summary.json)
    options: Settings
    tasks: list[Task]
    run_dir: Path
    only_bench: bool  # no explicit paths: only the benchmark is collected
    records_path: Path
    is_worker: bool
    gates: Any = None  # report.options.GateConfig, controller only
    baseline: Any = None  # the baseline summary dict, when one is given and comparable
    resumed: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> finished record (--bench-resume)
    notes: list[str] = field(default_factory=list)  # shown in the header (resume, baseline)
    run: BenchRun | None = None  # opened by the bench_run fixture at the first item of this process


STATE = pytest.StashKey[BenchState]()
SETTINGS = pytest.StashKey[Settings]()
RECORD = pytest.StashKey[dict]()


def base_record(sample: Any, state: BenchState) -> dict[str, Any]:
    return {"benchmark": state.benchmark.name, "task": sample.task_id, "id": sample.id, "split": sample.split,
            "scored": sample.scored, "model": state.settings.get("model")}


def run_item(item: pytest.Item, run: BenchRun) -> None:
    """Run one sample, keep its record on the item, and turn its status into the pytest outcome."""
    state = item.config.stash[STATE]
    sample = item.sample
    if sample.id in state.resumed:  # finished in the interrupted run: reported from its record, not run again
        replay(item, dict(state.resumed[sample.id]))
        return
    record = base_record(sample, state)
    started = time.monotonic()
    try:
        result = run.run_sample(sample)
    except Exception as exc:  # a bug or an unexpected failure must still leave a record
        result = {"status": "error", "message": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc(limit=20)}
    record.update(result)
    record.setdefault("message", "")
    record["duration"] = round(time.monotonic() - started, 3)
    record["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "main")
    item.stash[RECORD] = record
    outcome(record)


def replay(item: pytest.Item, record: dict[str, Any]) -> None:
    item.stash[RECORD] = record
    outcome(record)


def outcome(record: dict[str, Any]) -> None:
    """Turn a record's status into the pytest outcome."""
    status = record["status"]
    if status == rec.PASS:
        return
    if status == "skipped":
        pytest.skip(record.get("message") or "skipped")
    pytest.fail(f"{status}: {record.get('message', '')}", pytrace=False)
