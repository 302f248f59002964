"""The run loop: one process's state, the body of every benchmark item, and records to outcomes.

A process opens the benchmark's run once (the ``bench_run`` fixture, at its first item), runs
each item's sample through it and keeps the record on the item; ``writer.py`` attaches it to the item's
report and, in the only process, appends it to disk (an xdist worker hands it to the controller instead).
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from ..benchmarks.base import Benchmark, BenchRun
from ..core import records as rec
from ..core.options import Settings
from ..core.retrywait import pause_before_retry
from ..core.text import printable, repair_value, repaired
from ..core.types import Sample, Task
from ..models.defaults import backoff_delay
from ..models.retrytime import item_retry_time


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
    files: Any = None  # core.io.RunFiles: DirectoryFiles(run_dir) here, CollectedFiles on an xdist worker
    journal: Any = (
        None  # models.cache.CacheJournal on an xdist worker: the model-cache entries made since the last item
    )
    gates: Any = None  # report.options.GateConfig, controller only
    baseline: Any = None  # the baseline summary dict, when one is given and comparable
    resumed: dict[str, rec.Record] = field(default_factory=dict)  # id -> finished record (--bench-resume)
    notes: list[str] = field(default_factory=list)  # shown in the header (resume, baseline)
    selection_checked: bool = False  # the benchmark's checks of the selection ran before the model preflight
    run: BenchRun | None = None  # opened by the bench_run fixture at the first item of this process
    worker_hosts: dict[str, str] = field(default_factory=dict)  # controller: xdist worker id -> host, from its records
    # A session of several runs (a run file listing several models or agents): the run's name among them, which
    # its items carry (``<id>[<name>]``); None when the run is the session's only one.
    name: str | None = None
    definition: dict[str, Any] | None = None  # this run's settings.json ``_run`` (None: the session's)
    budget_stop: str | None = None  # why no new item starts: the run budget (--bench-max-cost) is spent
    error_stop: str | None = None  # why no new item starts: model errors in a row across the run's processes
    gate: Any = None  # models.concurrency.CallGate of this process's model client (None: it has none)
    unscored: list[dict[str, Any]] = field(default_factory=list)  # model work done ahead no record reports


class Streak:
    """Items in a row that ended in model_error (a skipped or blocked item neither adds nor breaks the row: a step
    blocked by a model error says nothing new of the endpoint), counted on
    the records in the order they finish, whichever process ran them: the controller counts one row for the
    whole run (a failing endpoint fails every worker's items alike)."""

    STATUS = "model_error"

    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0: never stop
        self.count = 0
        self.last = ""

    def add(self, record: Mapping[str, Any]) -> str | None:
        """Count one fresh record; the reason to stop the run once the row reaches the limit, else None."""
        status = record.get("status")
        if status in ("skipped", rec.BLOCKED):
            return None
        self.count = self.count + 1 if status == self.STATUS else 0
        # quoted in pytest's "Interrupted:" line, the plugin's report and summary.md's notes
        self.last = printable(record.get("message", ""), one_line=True, limit=300)
        if self.limit and self.count >= self.limit:
            return (
                f"agentbench: stopped after {self.count} model errors in a row "
                f"(--bench-set=max_consecutive_errors={self.limit}); last: {self.last}"
            )
        return None


STATE = pytest.StashKey[BenchState]()  # the session's first run (its only one, unless a run file lists several)
RUNS = pytest.StashKey[list[BenchState]]()  # every run of the session, in the run file's order
SETTINGS = pytest.StashKey[Settings]()
RECORD = pytest.StashKey[rec.Record | None]()  # the item's record, until it is attached to its report


def state_of(item: pytest.Item) -> BenchState:
    """The state of the run an item belongs to (a benchmark item is collected by its run)."""
    state = getattr(item, "state", None)
    return state if isinstance(state, BenchState) else item.config.stash[STATE]


def states_of(config: pytest.Config) -> list[BenchState]:
    """Every run of this session, in the run file's order (none: no --bench)."""
    runs: list[BenchState] = config.stash.get(RUNS, [])
    return list(runs)


def run_name_of(nodeid: str) -> str | None:
    """The run an item's node id names in a session of several runs: ``77.3[gpt-4o]`` and
    ``77.3[gpt-4o-attempt2]`` -> ``gpt-4o``; None for an item without one (the session's only run)."""
    name = nodeid.rsplit("::", 1)[-1]
    if not name.endswith("]") or "[" not in name:
        return None
    inside = name[name.index("[") + 1 : -1]
    head, dash, attempt = inside.rpartition("-attempt")
    return head if dash and attempt.isdigit() else (None if inside.startswith("attempt") else inside)


def owns(state: BenchState, nodeid: str) -> bool:
    """Whether the item ``nodeid`` (from a report: maybe another process's) belongs to ``state``'s run."""
    return state.name is None or run_name_of(nodeid) == state.name


class SessionRuns:
    """The ``bench_run`` of a session of several runs: each run's ``BenchRun``, opened at its first item (a ``-k``
    that selects one run opens one) and closed at the end of the session."""

    def __init__(self, open_run) -> None:
        self.open_run = open_run  # BenchState -> BenchRun
        self.runs: dict[str | None, BenchRun] = {}

    def of(self, state: BenchState) -> BenchRun:
        if state.name not in self.runs:
            self.runs[state.name] = self.open_run(state)
        return self.runs[state.name]

    def close(self) -> None:
        for run in self.runs.values():
            run.close()


def base_record(sample: Any, state: BenchState) -> dict[str, Any]:
    """The item's identity, the first fields of its record (a fragment: it has no status yet)."""
    record = {**rec.sample_identity(state.benchmark.name, sample), "model": state.settings.get("model")}
    if sample.repeated:  # --bench-attempts K > 1: records of one sample are told apart by their attempt
        record["attempt"] = sample.attempt
    return record


def where_ran() -> dict[str, str]:
    """Which host and which worker ran an item (``main`` without xdist): volatile fields of every fresh record."""
    return {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "host": socket.gethostname()}


# What each stage of an item's life is called in the error record of an item that failed there.
STAGES = {
    "score": "scoring this item",
    "record": "building this item's record",
    "write": "writing this item's record",
    "deliver": "delivering this item's record from its worker",
}
# The fields an error record keeps of the record (or sample) it replaces: which item it is, and where it ran.
IDENTITY_FIELDS = ("benchmark", "task", "id", "split", "scored", "model", "attempt", "worker", "host", "duration")


def describe(exc: BaseException) -> str:
    """``Type: text`` of an exception, repaired (its text may quote the model's); never raises."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # an exception whose __str__ fails
        text = type(exc).__name__
    return repaired(text)


def error_record(record: rec.RecordLike, stage: str, exc: BaseException) -> rec.Record:
    """The record of an item whose ``stage`` (a key of STAGES) failed with ``exc``: an ``error`` naming the
    stage and the cause, with the item's identity from ``record``. What ``record`` held beyond that is dropped:
    it may be what failed (a value that cannot be written, a field a plugin broke)."""
    kept = {k: record[k] for k in IDENTITY_FIELDS if k in record}
    out = {
        **kept,
        "status": "error",
        "message": f"agentbench: {STAGES[stage]} failed: {describe(exc)}",
        "error_stage": stage,
        "traceback": repaired("".join(traceback.format_exception(exc, limit=20))),
    }
    if isinstance(record.get("status"), str):
        out["status_before_error"] = record["status"]
    out.setdefault("duration", 0.0)
    return rec.Record.from_json(out)


def total_repaired(record: rec.Record) -> rec.Record:
    """The item's record with one ``text_repaired``: what its benchmark counted where text entered (the record's
    own count, its generation's: model replies, tool arguments and output) as one total, kept only when above 0."""
    generation = record.get("generation")
    parts = [record.get("text_repaired"), generation.get("text_repaired") if isinstance(generation, dict) else 0]
    total = sum(n for n in parts if isinstance(n, int))
    record = record.without("text_repaired")
    return record.replaced(text_repaired=total) if total else record


def repair_data(data: rec.RecordData) -> rec.RecordData:
    """The record's JSON object with every string valid UTF-8: text a boundary did not repair (a plugin's field,
    a message built from a child's words) is repaired, and added to ``text_repaired``. The writer does it once,
    when the record is finished (after the public hook), before it is written or sent."""
    fixed, count = repair_value(data)
    if count:
        fixed["text_repaired"] = int(fixed.get("text_repaired") or 0) + count
    return fixed


def item_record(identity: Mapping[str, Any], result: rec.Record, where: Mapping[str, Any]) -> rec.Record:
    """The item's record: its identity under the result's fields, then where it ran, with ``text_repaired``
    totalled (the ``Record`` is changed, never turned into its JSON object here)."""
    return total_repaired(result.beneath(identity).replaced(**where))


def run_once(run: BenchRun, sample: Sample) -> rec.Record:
    """One try of the sample: its benchmark's ``Record`` (the fields of a dict a benchmark of another package
    returns made one), with a message and the try's ``duration``."""
    started = time.monotonic()
    try:
        with item_retry_time():  # the item's model requests share one --bench-set model_max_retry_time
            result = rec.as_record(run.run_sample(sample))
    except Exception as exc:  # a bug or an unexpected failure must still leave a record
        error = {"status": "error", "message": describe(exc), "traceback": repaired(traceback.format_exc(limit=20))}
        result = rec.Record.from_json(error)
    message = {} if "message" in result else {"message": ""}
    return result.replaced(**message, duration=round(time.monotonic() - started, 3))


def run_with_retries(run: BenchRun, sample: Sample, max_retries: int, base_delay: float = 0.0) -> rec.Record:
    """The sample's result; an infrastructure failure (``records.ERROR_STATUSES``) is run again up to
    ``max_retries`` times (the run reuses the model answers it has), after the model client's backoff
    (``base_delay`` doubling, with jitter: a failing endpoint gets time to recover). A result that took more
    than one try keeps every try's result in ``tries`` (in order) and says which one counted (``counted_try``,
    1-based: the last); its own fields are the counted try's, its duration the sum of all."""
    result = run_once(run, sample)
    tries = [result]
    # by key: a plain dict of another package's benchmark may lack a status (a KeyError: the item's error)
    while result["status"] in rec.ERROR_STATUSES and len(tries) <= max_retries:
        pause_before_retry(backoff_delay(len(tries) - 1, base_delay))
        result = run_once(run, replace(sample, retry=len(tries)))
        tries.append(result)
    if len(tries) == 1:
        return result
    return result.replaced(
        tries=[t.to_json() for t in tries],
        counted_try=len(tries),
        duration=round(sum(t["duration"] for t in tries), 3),
    )


def run_item(item: pytest.Item, run: BenchRun) -> None:
    """Run one sample, keep its record on the item, and turn its status into the pytest outcome."""
    state = state_of(item)
    sample: Sample = item.sample  # type: ignore[attr-defined]  # a BenchItem's (collect.py); typed on pytest.Item
    if sample.key in state.resumed:  # finished in the interrupted run: reported from its record, not run again
        replay(item, state.resumed[sample.key])
        return
    started = time.monotonic()
    try:
        result = run_with_retries(run, sample, state.options.max_retries, state.options.model_retry_delay)
        record = item_record(base_record(sample, state), result, where_ran())
    except Exception as exc:  # whatever fails while one item is scored is that item's error, never the run's
        identity = {**base_record(sample, state), **where_ran(), "duration": round(time.monotonic() - started, 3)}
        record = error_record(identity, "score", exc)
    item.stash[RECORD] = record
    outcome(record)


def replay(item: pytest.Item, record: rec.Record) -> None:
    item.stash[RECORD] = record
    outcome(record)


def outcome(record: rec.Record) -> None:
    """Turn a record's status into the pytest outcome."""
    status = record["status"]
    if status == rec.PASS:
        return
    # the one place a record's message reaches the terminal, before the writer repairs the record: model text may
    # carry escape sequences, and a message built from a child's words text that is not valid UTF-8
    if status == "skipped":
        pytest.skip(printable(repaired(str(record.get("message") or "skipped"))))
    pytest.fail(f"{status}: {printable(repaired(str(record.get('message', ''))))}", pytrace=False)
