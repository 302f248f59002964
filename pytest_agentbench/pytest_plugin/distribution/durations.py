"""Expected cost of each scheduling unit, and ``<cache dir>/durations.json`` that feeds it.

The controller (or the only process) writes durations.json at the end of every session from the run's
records (not with ``--bench-cache=ro``, which writes nothing to the cache dir): ``{"format": 1, "durations":
{benchmark: {executor: {task: {sample id: seconds}}}}}`` (merged into
what is there; a lost record, which has no real duration, is left out). The scheduler (placement.py) orders
units by the sum of their samples' last durations under the run's benchmark and executor; a sample never
measured gets the benchmark's declared estimate (``Benchmark.expected_cost``) scaled to seconds by the
samples that were measured (the estimate alone when none was). A broken or missing file only means
estimates: it is a hint, never a result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ...core import records as rec
from ...core.io import write_atomic
from ..collect import session_entries, task_of_nodeid
from ..run import BenchState

DURATIONS_FILE = "durations.json"
FORMAT = 1


def durations_path(state: BenchState) -> Path:
    return Path(state.options.cache_dir) / DURATIONS_FILE


def executor_of(state: BenchState) -> str:
    return str(state.options["executor"]) if "executor" in state.options else "default"


def read_durations(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    found = data.get("durations") if isinstance(data, dict) and data.get("format") == FORMAT else None
    return found if isinstance(found, dict) else {}


def measured(state: BenchState) -> dict[str, dict[str, float]]:
    """task -> sample id -> seconds, from durations.json for this run's benchmark and executor."""
    table = read_durations(durations_path(state)).get(state.benchmark.name, {}).get(executor_of(state), {})
    out: dict[str, dict[str, float]] = {}
    for task, samples in table.items() if isinstance(table, dict) else ():
        if isinstance(samples, dict):
            out[str(task)] = {str(k): float(v) for k, v in samples.items() if isinstance(v, (int, float))}
    return out


def write_durations(state: BenchState, records: Iterable[rec.Record]) -> int:
    """Merge the durations of ``records`` into durations.json; returns how many samples were written."""
    fresh: dict[str, dict[str, float]] = {}
    for record in records:
        duration = record.get("duration")
        if rec.is_lost(record) or not isinstance(duration, (int, float)) or record.status == "skipped":
            continue
        fresh.setdefault(record.task, {})[record.id] = round(float(duration), 3)
    if not fresh:
        return 0
    path = durations_path(state)
    data = read_durations(path)
    table = data.setdefault(state.benchmark.name, {}).setdefault(executor_of(state), {})
    for task, samples in fresh.items():
        table.setdefault(task, {}).update(samples)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"format": FORMAT, "durations": data}, indent=1, sort_keys=True) + "\n")
    return sum(len(s) for s in fresh.values())


def plan_costs(runs: list[BenchState]) -> tuple[Callable[[str], str], Callable[[str, list[str]], float]]:
    """``unit_of(nodeid)`` and ``unit_cost(unit, nodeids)`` for the scheduler over the session's runs: a grouped
    benchmark's unit is a task (one run's, in a session of several), an ungrouped one's an item; other tests are
    grouped as xdist's load-scope does."""
    state = runs[0]
    bench = state.benchmark
    entries = session_entries(runs)
    samples = {nodeid: sample for nodeid, (_, sample) in entries.items()}
    known = measured(state)
    estimate = {nodeid: float(bench.expected_cost(sample)) for nodeid, sample in samples.items()}
    seconds = {
        nodeid: known[sample.task_id][sample.id]
        for nodeid, sample in samples.items()
        if sample.id in known.get(sample.task_id, {})
    }
    both = [nodeid for nodeid in seconds if estimate[nodeid] > 0]
    scale = (sum(seconds[n] for n in both) / sum(estimate[n] for n in both)) if both else 1.0

    def unit_of(nodeid: str) -> str:
        if nodeid not in samples:
            return nodeid.rsplit("::", 1)[0]
        if not bench.group_items:
            return nodeid
        run = entries[nodeid][0].name  # several runs: a task's steps in order per run, the runs apart
        return f"{bench.name}/{task_of_nodeid(nodeid, [bench])}" + (f"[{run}]" if run is not None else "")

    def unit_cost(unit: str, nodeids: list[str]) -> float:
        return sum(seconds.get(n, estimate.get(n, 1.0) * scale) for n in nodeids)

    return unit_of, unit_cost


class DurationsWriter:
    """Registered on the controller (or the only process): durations.json from the run's records at the end."""

    def __init__(self, state: BenchState) -> None:
        self.state = state

    def pytest_sessionfinish(self, session: Any) -> None:
        if session.config.option.collectonly or self.state.options["cache"] == "ro":
            return  # nothing ran, or the cache dir is not to be written
        try:
            finished = rec.latest_by_id(rec.read_records(self.state.records_path)).values()
            write_durations(self.state, [rec.Record.from_json(r) for r in finished])
        except OSError:  # a read-only cache dir costs the next run its ordering, nothing else
            pass
