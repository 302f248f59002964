"""A benchmark's metrics from records, in a notebook or a script: the numbers a run's summary.json holds.

The records are what a run writes (its records file, or the folder holding it) or what the plain-Python API returns
(``score_scicode_step``); the benchmark is the one they name. The metrics are computed as the run computes them
(``build_summary``): over the records given, each item's last record winning.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..benchmarks.registry import get_benchmark
from ..core import records as rec
from ..core.errors import ConfigError
from .summary import build_summary

RunLike = str | os.PathLike[str]


def benchmark_metrics(
    records: Iterable[Mapping[str, Any]] | RunLike,
    benchmark: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The benchmark's metrics over ``records`` (``{"main": ..., "subproblem": ..., ...}`` for SciCode), as the
    run's summary.json has them under ``metrics``. ``records``: records (dicts or ``Record``s), or a run folder
    (its records file is read, and its settings). ``benchmark``: the name, when the records do not say it."""
    run_settings: dict[str, Any] = {}
    if isinstance(records, (str, os.PathLike)):
        records, run_settings = run_folder(Path(records), benchmark)
    given = [rec.as_record(r) for r in records]
    name = benchmark or benchmark_named(given)
    bench = get_benchmark(name)
    chosen = list(rec.latest_by_id(given).values())
    merged = {**run_settings, **dict(settings or {}), "benchmark": name}
    return dict(build_summary(chosen, bench, merged)["metrics"])


def benchmark_named(records: list[rec.Record]) -> str:
    """The one benchmark the records name; a ConfigError saying what to pass otherwise."""
    names = {r.get("benchmark") for r in records}
    if len(names) == 1 and isinstance(next(iter(names)), str):
        return str(next(iter(names)))
    if not records:
        raise ConfigError(
            "benchmark_metrics: no records given, so no benchmark: pass benchmark= an installed one's name"
        )
    shown = ", ".join(sorted(str(n) for n in names))
    raise ConfigError(f"benchmark_metrics: the records name the benchmarks {shown}: pass benchmark= to choose one")


def run_folder(folder: Path, benchmark: str | None) -> tuple[list[rec.RecordData], dict[str, Any]]:
    """A run folder's records and settings (from its summary.json, when it has one)."""
    settings: dict[str, Any] = {}
    summary = folder / "summary.json"
    if summary.is_file():
        found = json.loads(summary.read_text(encoding="utf-8")).get("settings")
        settings = found if isinstance(found, dict) else {}
    name = benchmark or settings.get("benchmark")
    files = [folder / get_benchmark(name).records_file] if isinstance(name, str) else []
    files = [f for f in files if f.is_file()] or sorted(folder.glob("*.jsonl"))
    if not files:
        raise ConfigError(f"benchmark_metrics: {folder} holds no records file (steps.jsonl, records.jsonl)")
    return rec.read_records(files[0]), settings
