"""Collection: BenchCollector -> TaskCollector -> one pytest.Function per sample.

Node ids are ``<bench>/<task>::<sample>`` (SciCode: ``scicode/77::77.3``), or ``<bench>::<sample>`` for a
benchmark that does not group its samples (``Benchmark.group_items``; CORE-Bench: ``core-bench::capsule-X``).
Only collectors are given an id (``from_parent(..., nodeid=...)``, honoured by pytest 8.0 to 9.2); an item's
id is the one pytest builds, ``<parent id>::<name>`` (pytest 9.2 ignores an id set on a Function by hand).
Runs written before this form (``core-bench/capsule-X``) still resume: ``current_nodeid`` translates.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest

from ..benchmarks.base import Benchmark, BenchRun
from ..core.errors import ConfigError
from ..core.io import natural_key
from ..core.types import Sample, Task
from .run import BenchState, SessionRuns, run_item, state_of


def run_bench_item(request: pytest.FixtureRequest, bench_run: BenchRun) -> None:
    """The body of every benchmark item: fixtures are resolved by pytest, the work by the run loop."""
    item = request.node
    run = bench_run.of(item.state) if isinstance(bench_run, SessionRuns) else bench_run
    prepare_item(item, run)
    run_item(item, run)


def prepare_item(item: BenchItem, run: BenchRun) -> None:
    """What the item needs before it is timed (``BenchRun.prepare_sample``: SciCode's targets of the item's
    problem), so it is part of no item's ``duration``; not for an item a resumed run already has."""
    if item.sample.key not in state_of(item).resumed:
        run.prepare_sample(item.sample)


class BenchItem(pytest.Function):
    """A step or capsule. It is a real ``pytest.Function`` so fixtures (and their overrides) apply."""

    def __init__(
        self,
        *,
        sample: Sample,
        state: BenchState,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sample = sample
        self.state = state  # the run this item belongs to
        self.benchmark = benchmark = state.benchmark
        model_name = state.settings.get("model")
        if state.name is None and model_name:
            # -k matches the model's name in a session of one run too: a session of several runs resumed one
            # run's folder at a time keeps its -k "gpt-4o and ..."
            self.extra_keyword_matches.add(str(model_name))
        for marker in (marker_name(benchmark), *sample.markers):
            self.add_marker(marker)
        if sample.split:
            self.add_marker(sample.split)
        if sample.skip_reason:  # skipped before fixtures are set up: a prefilled step needs no model
            self.add_marker(pytest.mark.skip(reason=sample.skip_reason))
        self.user_properties.append(("agentbench_sample", sample.id))

    def reportinfo(self):
        return self.path, 0, f"{self.benchmark.name} {self.name}"

    def _prunetraceback(self, excinfo) -> None:  # tracebacks through the plugin are not the user's concern
        excinfo.traceback = excinfo.traceback.cut(path=__file__) or excinfo.traceback


def marker_name(benchmark: Benchmark) -> str:
    """The marker every item of a benchmark carries: its name as a Python identifier (a-b -> a_b)."""
    return benchmark.name.replace("-", "_")


class TaskCollector(pytest.Collector):
    def __init__(self, *, samples: list[tuple[BenchState, Sample]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.samples = samples  # (its run, sample), in the order they run

    def collect(self):
        for state, sample in self.samples:
            yield bench_item(self, state, sample)


def bench_item(parent: pytest.Collector, state: BenchState, sample: Sample) -> BenchItem:
    return BenchItem.from_parent(
        parent, name=item_name(sample, state.name), callobj=run_bench_item, sample=sample, state=state
    )


class BenchCollector(pytest.Collector):
    """The root of a benchmark's items: every run's (one, unless a run file lists several models or agents),
    each run's tasks already filtered by ``--bench-ids``. A task's node holds its items of every run, a run's
    steps in order (grouped); an ungrouped benchmark's sample is one item per run, side by side."""

    def __init__(self, *, runs: list[BenchState], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runs = runs

    def collect(self):
        benchmark = self.runs[0].benchmark
        for task_id, samples in merged_tasks(self.runs):
            if benchmark.group_items:
                yield TaskCollector.from_parent(
                    self, name=task_id, nodeid=f"{benchmark.name}/{task_id}", samples=samples
                )
            else:
                for state, sample in samples:
                    yield bench_item(self, state, sample)


def run_samples(state: BenchState) -> list[tuple[str, list[Sample]]]:
    """(task id, its samples with their attempts) of one run, in its order."""
    return [(task.id, with_attempts(task.samples, state.options.attempts)) for task in state.tasks]


def merged_tasks(runs: list[BenchState]) -> list[tuple[str, list[tuple[BenchState, Sample]]]]:
    """Each task with the (run, sample) pairs of every run: a run's steps of the task in turn (grouped: a step
    needs its run's earlier steps), or each sample once per run (ungrouped)."""
    grouped = runs[0].benchmark.group_items
    tasks: dict[str, list[list[tuple[BenchState, Sample]]]] = {}
    for state in runs:
        for task_id, samples in run_samples(state):
            tasks.setdefault(task_id, []).append([(state, sample) for sample in samples])
    if grouped:
        return [(task_id, [pair for run in per_run for pair in run]) for task_id, per_run in tasks.items()]
    return [(task_id, [pair for column in zip(*per_run) for pair in column]) for task_id, per_run in tasks.items()]


def item_name(sample: Sample, run: str | None) -> str:
    """An item's name: the sample's key (``77.3``, ``77.3[attempt2]``) in a session of one run; with several,
    the run's name in the brackets: ``77.3[gpt-4o]``, ``77.3[gpt-4o-attempt2]`` (``-k gpt-4o`` selects a run)."""
    if run is None:
        return sample.key
    return f"{sample.id}[{run}-attempt{sample.attempt}]" if sample.repeated else f"{sample.id}[{run}]"


def item_entries(state: BenchState) -> dict[str, Sample]:
    """Node id -> sample of every item collection makes for the run ``state``."""
    return {
        item_nodeid(state.benchmark, task_id, item_name(sample, state.name)): sample
        for task_id, samples in run_samples(state)
        for sample in samples
    }


def session_entries(runs: Iterable[BenchState]) -> dict[str, tuple[BenchState, Sample]]:
    """Node id -> (its run, sample) of every benchmark item of the session."""
    return {nodeid: (state, sample) for state in runs for nodeid, sample in item_entries(state).items()}


def item_nodeid(benchmark: Benchmark, task_id: str, key: str) -> str:
    """The node id pytest gives the item of sample ``key`` (see the module docstring)."""
    return f"{benchmark.name}/{task_id}::{key}" if benchmark.group_items else f"{benchmark.name}::{key}"


def task_of_nodeid(nodeid: str, benchmarks: Iterable[Benchmark]) -> str | None:
    """The task a benchmark item's node id belongs to (``scicode/77::77.3`` -> ``77``), else None. For an
    ungrouped benchmark each sample is its own task: ``core-bench::capsule-X`` -> ``capsule-X``."""
    for bench in benchmarks:
        if bench.group_items and nodeid.startswith(f"{bench.name}/") and "::" in nodeid:
            return nodeid[len(bench.name) + 1 :].split("::", 1)[0]
        if not bench.group_items and nodeid.startswith(f"{bench.name}::"):
            return nodeid[len(bench.name) + 2 :].split("[", 1)[0]
    return None


def current_nodeid(nodeid: str, benchmarks: Iterable[Benchmark]) -> str:
    """A node id in today's form: ``core-bench/capsule-X`` (written by runs before pytest 9.2 made items
    take their parent's id) becomes ``core-bench::capsule-X``; anything else is returned as it is."""
    for bench in benchmarks:
        old = f"{bench.name}/"
        if not bench.group_items and nodeid.startswith(old) and "::" not in nodeid:
            return f"{bench.name}::{nodeid[len(old) :]}"
    return nodeid


def with_attempts(samples: list[Sample], attempts: int) -> list[Sample]:
    """A task's samples once (``attempts`` 1: today's items), else every attempt in turn, each named
    ``<id>[attemptN]`` (attempt 1 first: a task's steps run in order within an attempt)."""
    if attempts <= 1:
        return list(samples)
    return [replace(s, attempt=a, repeated=True) for a in range(1, attempts + 1) for s in samples]


def select_ids(tasks: list[Task], ids: tuple[str, ...] | list[str], bench_name: str) -> list[Task]:
    """Exact selection: ``77`` keeps a whole task, ``77.3`` one sample. Unknown ids are a ConfigError."""
    if not ids:
        return tasks
    task_ids = {t.id for t in tasks}
    sample_ids = {s.id for t in tasks for s in t.samples}
    unknown = [i for i in ids if i not in task_ids and i not in sample_ids]
    if unknown:
        shown = sorted(task_ids, key=natural_key)[:40]
        more = "" if len(task_ids) <= 40 else f", ... ({len(task_ids)} in all)"
        example = next(iter(sorted(sample_ids, key=natural_key)), "")
        raise ConfigError(
            f"unknown {bench_name} id(s) {', '.join(unknown)} in --bench-ids; valid task ids in this "
            f"split: {', '.join(shown)}{more} (a sample id is <task>.<step>, e.g. {example})"
        )
    wanted = set(ids)
    selected = []
    for task in tasks:
        if task.id in wanted:
            selected.append(task)
            continue
        samples = [s for s in task.samples if s.id in wanted]
        if samples:
            selected.append(Task(id=task.id, split=task.split, samples=samples, data=task.data))
    return selected
