"""Configure time: from resolved settings to one process's ``BenchState``.

Everything that can be wrong with a run (an unknown benchmark, split or id, a missing data file, a
bad gate, a baseline with other settings, a resume folder of another run) is found here, before any
item runs, as a ``ConfigError`` / ``DataError`` the plugin shows as a usage error.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from ..benchmarks.base import Benchmark
from ..benchmarks.registry import get_benchmark
from ..core import records as rec
from ..core.errors import ConfigError, choose
from ..core.io import CollectedFiles, DirectoryFiles, natural_key
from ..core.options import RunFacts, Settings, view
from ..core.run_options import RunOptions
from ..core.version import package_version
from ..models.cache import CacheJournal
from ..models.options import ORACLE, ModelOptions, model_settings
from ..report.baseline import BaselineError, baseline_for_run, load_summary
from ..report.comparability import UNKNOWN
from ..report.resume import resume_controller
from ..sandbox.limits import passed_env_names
from ..sandbox.options import SandboxOptions, isolation_from
from .collect import select_ids, with_attempts
from .distribution.handshake import WORKER_INPUT, Role, role_of
from .run import BenchState
from .slurm import task_plugin


def run_settings(benchmark: Benchmark, opts: Settings, split: str, collect_only: bool) -> dict[str, Any]:
    """The settings every run records first: benchmark, split, the model's settings and the item timeout."""
    model = model_settings(opts)
    if not model["model"] and not collect_only:
        raise ConfigError(
            f"--bench={benchmark.name} needs a model: pass --model NAME "
            f"(--model=oracle scores the ground truth without any server)"
        )
    if model["model"] == ORACLE:  # no server, no cache: the endpoint settings would only mislead
        model = {"model": ORACLE}
    run = view(RunOptions, opts)
    out = {"benchmark": benchmark.name, "split": split, **model, "item_timeout": run.timeout}
    if run.attempts > 1:  # only when given: a run of one attempt records exactly what it did before
        out["attempts"] = run.attempts
    if run.max_retries:
        out["item_retries"] = run.max_retries
    out.update(budget_settings(opts, out))
    return out


def budget_settings(opts: Settings, settings: dict[str, Any]) -> dict[str, Any]:
    """The run's budgets (only those given); a budget needs a price to count against (not the oracle's: it
    calls no model)."""
    model = view(ModelOptions, opts)
    given = {"max_cost_per_item": model.max_cost_per_item, "max_cost": model.max_cost}
    budgets = {name: value for name, value in given.items() if value is not None}
    if budgets and "price" not in settings and settings.get("model") != ORACLE:
        flag = "--bench-set max_cost_per_item" if "max_cost_per_item" in budgets else "--bench-max-cost"
        raise ConfigError(
            f"{flag} needs the model's price to count against: pass --model-price=PROMPT,COMPLETION "
            f"(USD per million tokens) or give the model a price: in the run file"
        )
    return budgets


def comparability_of(benchmark: Benchmark, opts: Settings, split: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The keys that say whether two runs are comparable (the report adds the selection, known at the end); a
    replay also records the replayed run's, read from its summary.json ("unknown" when it has none)."""
    out: dict[str, Any] = {
        "benchmark": benchmark.name,
        "split": split,
        "time_limit": settings.get("item_timeout"),
        "package": package_version(),
        **benchmark.comparability(opts, split, settings),
    }
    if opts.replay:
        out["replayed"] = replayed_comparability(Path(opts.replay))
    return out


def replayed_comparability(folder: Path) -> Any:
    """The comparability keys of the run a replay re-grades (from its summary.json), or "unknown"."""
    try:
        found = load_summary(folder).get("comparability")
    except BaselineError:
        return UNKNOWN
    return found if isinstance(found, dict) else UNKNOWN


def check_dataset(benchmark: Benchmark, given: str | None) -> None:
    """--bench-dataset names one of the data sets the benchmark declares (none given: the benchmark's default)."""
    if given is None:
        return
    if not benchmark.datasets:
        raise ConfigError(f"--bench-dataset does not apply to --bench={benchmark.name}: it offers one data set")
    choose(benchmark.datasets, given, f"{benchmark.name} data set (--bench-dataset)")


def make_state(config: pytest.Config, opts: Settings, name: str | None = None) -> BenchState:
    """This process's state of one run (``name``: the run's among the session's several, None: the session's
    only run); raises ConfigError or DataError (the caller turns them into usage errors)."""
    benchmark = get_benchmark(opts.bench)
    check_dataset(benchmark, opts.dataset)
    split = choose(benchmark.splits, opts.split or benchmark.default_split, f"{benchmark.name} split (--bench-split)")
    settings = run_settings(benchmark, opts, split, bool(config.option.collectonly))
    if config.option.collectonly:  # listing the items needs none of the data only scoring reads
        opts = opts.with_facts(RunFacts(listing_only=True))
    settings.update(benchmark.configure(opts, split))
    split = settings["split"]  # a benchmark may narrow the default split (SciCode's oracle: validation)
    tasks = select_ids(benchmark.load_tasks(opts, split), opts.ids, benchmark.name)
    settings["data_hashes"] = benchmark.data_hashes(opts, split, settings)
    settings["comparability"] = comparability_of(benchmark, opts, split, settings)
    # How children that run model code are isolated here; a benchmark may say more (CORE-Bench: its agent's env).
    # The line is the controller's (header, settings.json): an xdist worker probes when it first runs model code,
    # off the way to its first item, unless isolation is required (then its host is checked now).
    if role_of(config) is not Role.WORKER or view(SandboxOptions, opts).require_isolation:
        settings.setdefault("isolation", isolation_from(opts).describe())
    settings["child_env"] = passed_env_names()  # the names of our environment a child may inherit (settings.json)
    # Who writes the run: the xdist role was decided once (distribution/handshake.py); a ``run-task`` session (its
    # TaskPackager) writes like a worker, its deliveries going into the task's package instead of reports.
    packager = task_plugin(config, "TaskPackager")
    is_worker = role_of(config) is Role.WORKER or packager is not None
    handshake = config.stash.get(WORKER_INPUT, None)  # what an xdist worker's controller sent
    if packager is not None:
        run_dir, only_bench = packager.run_dir, True
    elif handshake is not None:
        run_dir, only_bench = handshake.run_dir_of(name), handshake.only_bench
    else:
        # a resumed run continues in the interrupted run's folder
        run_dir = opts.resume or new_run_dir(opts, benchmark.name, name or settings.get("model") or "none")
        only_bench = config.args_source != pytest.Config.ArgsSource.ARGS
    settings["run_id"] = run_dir.name
    # The controller is the only writer of the run: a worker keeps an item's files and new cache entries in
    # memory until they travel with its record (writer.py); nothing of the run is written where a worker runs.
    state = BenchState(
        benchmark=benchmark,
        split=split,
        settings=settings,
        options=opts,
        tasks=tasks,
        run_dir=run_dir,
        only_bench=only_bench,
        records_path=run_dir / benchmark.records_file,
        is_worker=is_worker,
        files=CollectedFiles() if is_worker else DirectoryFiles(run_dir),
        journal=CacheJournal() if is_worker else None,
        name=name,
    )
    if not is_worker:
        prepare_controller(state)
    elif handshake is not None and handshake.resumed:
        state.resumed = handshake.resumed_records()
    return state


def prepare_controller(state: BenchState) -> None:
    """Gates, resume and baseline are checked before anything runs, so a mistake costs no model calls."""
    opts = state.options
    from ..report.options import gate_config  # why: only the controller reads the gates

    free = state.benchmark.free_settings
    state.gates = gate_config(opts, state.benchmark)
    if opts.resume:
        resumed = resume_controller(state.run_dir, state.records_path, state.settings, free)
        state.resumed = drop_rerun(state.records_path, resumed.records, resumed.notes)
        state.resumed = revise_resumed(state.benchmark, state.records_path, state.resumed)
        if nothing_left(state):
            resumed.notes[0] = (
                f"resuming {state.run_dir}: all {len(state.resumed)} item(s) have a finished record, nothing is "
                "left to run; the reports are written again from the records"
            )
        state.notes += resumed.notes
    state.baseline, notes = baseline_for_run(
        state.gates.baseline,
        state.gates.update_baseline,
        state.settings,
        free,
        allow_incomparable=state.gates.allow_incomparable,
    )
    state.notes += notes


def nothing_left(state: BenchState) -> bool:
    """A resumed run that has a finished record for every item of its selection (--bench-ids, --bench-attempts):
    nothing is left to run, whatever -k/-m/--deselect narrow, so no worker, preflight or self-test is needed."""
    if not state.options.resume or state.is_worker:
        return False
    keys = [
        sample.key
        for task in state.tasks
        for sample in with_attempts(task.samples, state.options.attempts)
        if not sample.skip_reason  # a prefilled step is reported skipped, never recorded as run
    ]
    return all(key in state.resumed for key in keys)


def revise_resumed(benchmark: Benchmark, records_path: Path, finished: dict[str, rec.Record]) -> dict[str, rec.Record]:
    """The reused records as this run's settings derive them (CORE-Bench: its --bench-review applied to the
    automatic verdicts, which stay); the records file is rewritten (atomically) when that changes one of them
    (read again only then: a benchmark that revises nothing costs no pass over the file)."""
    revised = {key: rec.as_record(benchmark.revise_record(record)) for key, record in finished.items()}
    if any(revised[key] is not record and revised[key] != record for key, record in finished.items()):
        lines = rec.read_records(records_path)
        rec.rewrite_records(
            records_path, [rec.as_record(benchmark.revise_record(rec.Record.from_json(r))) for r in lines]
        )
    return revised


def drop_rerun(records_path: Path, finished: dict[str, rec.Record], notes: list[str]) -> dict[str, rec.Record]:
    """The records a resumed run reuses: not those of items whose worker died (``records.is_lost``), whose
    host lacked what they need (``records.is_unplaced``) or that ended in an error (``records.ended_in_error``:
    no verdict on the model), which run again; pass and fail verdicts are kept. Their lines leave the records file
    (rewritten atomically), so each item ends with one record."""
    lines = rec.read_records(records_path)
    if any(runs_again(r) for r in lines):  # (also lost ones xdist ran again: a later record follows)
        rec.rewrite_records(records_path, [r for r in lines if not runs_again(r)])
    lost = sorted((key for key, record in finished.items() if rec.is_lost(record)), key=natural_key)
    unplaced = sorted((key for key, record in finished.items() if rec.is_unplaced(record)), key=natural_key)
    errors = sorted(
        (key for key, record in finished.items() if runs_again(record) and key not in (*lost, *unplaced)),
        key=natural_key,
    )
    if not lost and not unplaced and not errors:
        return finished
    kept = {key: record for key, record in finished.items() if not runs_again(record)}
    if notes and notes[0].startswith("resuming "):  # the count report/resume.py wrote includes these
        notes[0] = f"resuming {records_path.parent}: {len(kept)} finished record(s) reused, the rest runs now"
    statuses = sorted({str(finished[key].status) for key in errors}, key=rec.STATUSES.index)
    for keys, why in (
        (errors, f"that ended in an error ({', '.join(statuses)})"),
        (unplaced, "whose host lacked what they need"),
        (lost, "whose worker died"),
    ):
        if keys:
            notes.insert(
                1, f"{len(keys)} item(s) {why} run again: {', '.join(keys[:10])}" + (" ..." if len(keys) > 10 else "")
            )
    return kept


def runs_again(record: rec.RecordLike) -> bool:
    """A record a resumed run does not keep: its item runs again (not run yet, or no verdict on the model)."""
    return rec.runs_again_on_resume(record) or rec.ended_in_error(record)


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "model"


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)


def new_run_dir(opts: Settings, bench: str, model: str) -> Path:
    """``<report dir>/<bench>/<model>/<run id>`` (``model``: a run's name in a session of several runs)."""
    run_id = opts.run_id or new_run_id()
    # Created by the first record written, so --collect-only leaves no empty folders behind.
    return Path(opts.report_dir) / bench / safe_name(model) / safe_name(run_id)
