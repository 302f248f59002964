"""The Benchmark protocol and the entry-point registry.

A benchmark is a plain object registered under the ``pytest_agentbench.benchmarks`` entry-point
group, so a third benchmark ships as its own package and needs no change here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Iterable, Protocol, runtime_checkable

import pytest

ENTRY_POINT_GROUP = "pytest_agentbench.benchmarks"


@dataclass
class Sample:
    """One pytest item: a SciCode step or a CORE-Bench capsule."""

    id: str  # "77.3", "capsule-7038571"; unique within the benchmark
    task_id: str  # "77", "capsule-7038571"
    split: str
    scored: bool = True
    skip_reason: str | None = None  # items that are collected but never run (prefilled steps)
    markers: tuple[str, ...] = ()
    data: Any = None  # benchmark-owned payload (the step dict, the task dict, ...)


@dataclass
class Task:
    """A group of samples that must run on one worker, in order (a SciCode problem)."""

    id: str
    split: str
    samples: list[Sample] = field(default_factory=list)
    data: Any = None


@runtime_checkable
class Benchmark(Protocol):
    """What the core needs from a benchmark.

    ``name`` is the value of ``--bench``. ``splits`` are the accepted ``--bench-split`` values,
    ``default_split`` the one used when none is given. When ``group_items`` is true the samples
    of a task are collected under a per-task collector (node id ``<bench>/<task>::<sample>``),
    otherwise directly under the benchmark (``<bench>::<sample>``).
    """

    name: str
    splits: tuple[str, ...]
    default_split: str
    group_items: bool

    def add_options(self, parser: pytest.Parser) -> None:
        """Register the benchmark's own command-line options and ini keys."""

    def settings(self, config: pytest.Config) -> dict[str, Any]:
        """Validate options (raise pytest.UsageError naming the fix) and return the effective
        settings shown in the report header and stored in summary.json."""

    def load_tasks(self, config: pytest.Config, split: str) -> list[Task]:
        """Every task of ``split`` in the benchmark's canonical order."""

    def run_sample(self, sample: Sample, ctx: "RunContext") -> dict[str, Any]:
        """Run and score one sample; return its record (see records.py for the common keys)."""

    def summarize(self, records: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
        """Metrics from the records of one run (controller side). Must return a dict with
        ``metrics`` (name -> float), ``terminal`` (list of lines) and ``markdown`` (str)."""


@dataclass
class RunContext:
    """What a sample gets when it runs inside its pytest item."""

    config: pytest.Config
    model: Any  # the ``bench_model`` fixture value
    env: Any  # the ``bench_env`` fixture value
    run_dir: Any  # pathlib.Path of this run's report folder
    item: Any = None  # the pytest item, for benchmarks that need node details


def available_benchmarks() -> tuple[dict[str, Benchmark], dict[str, str]]:
    """Benchmarks from entry points keyed by ``--bench`` name, and the ones that failed to load.

    The plugin is active in every pytest run of an environment it is installed in, so a broken
    benchmark package must not break unrelated runs: it is only an error when it is asked for.
    """
    found: dict[str, Benchmark] = {}
    broken: dict[str, str] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:
            broken[ep.name] = f"benchmark entry point {ep.name!r} ({ep.value}) failed to load: {exc!r}"
            continue
        bench = obj() if isinstance(obj, type) else obj
        found[bench.name] = bench
    return found, broken


def choose(names: Iterable[str], value: str, what: str) -> str:
    """Return ``value`` when it is one of ``names``, else a usage error that lists them."""
    names = list(names)
    if value not in names:
        raise pytest.UsageError(f"agentbench: unknown {what} {value!r}; valid values: {', '.join(names)}")
    return value
