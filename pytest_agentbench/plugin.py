"""The pytest plugin: options, ini keys, markers, fixtures and the wiring of the pieces.

The plugin is inert unless ``--bench`` (or the ``agentbench_bench`` ini key) names a benchmark.
Roles are told apart once, in ``pytest_configure``: every process that runs items gets a
``RecordWriter``; the process that reports (the xdist controller, or the only process) gets a
``Reporter``.
"""
from __future__ import annotations

import os
import re
import secrets
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from . import records as rec
from .collect import BenchCollector, BenchItem, select_ids
from .data import DataError
from .registry import Benchmark, RunContext, Task, available_benchmarks, choose

GROUP = "agentbench"


@dataclass
class BenchState:
    benchmark: Benchmark
    split: str
    settings: dict[str, Any]
    tasks: list[Task]
    run_dir: Path
    only_bench: bool
    records_path: Path
    gates: Any = None  # report.options.GateConfig, controller only
    baseline: Any = None  # the baseline summary dict, when one is given and exists
    resumed: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> finished record (--bench-resume)
    notes: list[str] = field(default_factory=list)  # shown in the header (resume, baseline)


STATE = pytest.StashKey[BenchState]()
RECORD = pytest.StashKey[dict]()

# name, ini key, default, help. Each setting is a CLI option and an ini key with the same help text.
COMMON_SETTINGS: list[tuple[str, str, Any, str]] = [
    ("--bench", "agentbench_bench", None,
     "benchmark to run (e.g. scicode, core-bench); without it the plugin does nothing."),
    ("--bench-split", "agentbench_split", None,
     "benchmark split: scicode validation|test|all (default all), core-bench train|test (default test)."),
    ("--bench-ids", "agentbench_ids", None,
     "exact selection, comma separated: a task id (77, capsule-7038571) or a sample id (77.3). "
     "Unlike -k, 7 does not match 17 or 70."),
    ("--bench-data-dir", "agentbench_data_dir", None,
     "folder holding the upstream data files (default $AGENTBENCH_DATA_DIR, else ./data); "
     "missing files are downloaded into it from pinned URLs and checked by sha256."),
    ("--bench-timeout", "agentbench_timeout", "1800",
     "seconds allowed for scoring one item in its child process (default 1800, as upstream)."),
    ("--bench-report-dir", "agentbench_report_dir", "reports",
     "folder for run reports: <dir>/<benchmark>/<model>/<run-id>/ (default reports/)."),
    ("--bench-run-id", "agentbench_run_id", None,
     "name of this run's report folder (default: UTC timestamp plus a random suffix)."),
]
ALLOW_CUSTOM_HELP = ("accept data files whose sha256 differs from the pinned upstream files (a hand-made dataset, "
                     "a custom test_data.h5); the report says so.")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(GROUP, "agent/code benchmarks (pytest-agentbench)")
    for flag, ini, default, help_text in COMMON_SETTINGS:
        dest = flag.lstrip("-").replace("-", "_")
        group.addoption(flag, dest=dest, default=None, help=help_text)
        parser.addini(ini, help=help_text, default=default)
    group.addoption("--bench-allow-custom-data", dest="bench_allow_custom_data", action="store_true",
                    default=False, help=ALLOW_CUSTOM_HELP)
    from .models.options import add_model_options
    from .report.options import add_options as add_report_options

    from .envs import add_env_options

    add_model_options(parser)
    add_env_options(parser)
    add_report_options(parser)
    benches, _ = available_benchmarks()
    for bench in benches.values():
        bench.add_options(parser)


def setting(config: pytest.Config, name: str) -> Any:
    """A common setting: the command-line value, else the ini value, else the default."""
    for flag, ini, default, _ in COMMON_SETTINGS:
        if flag == name:
            value = config.getoption(flag.lstrip("-").replace("-", "_"))
            if value is None:
                value = config.getini(ini) or default
            return value
    raise KeyError(name)


def bench_timeout(config: pytest.Config) -> float:
    raw = setting(config, "--bench-timeout")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"agentbench: --bench-timeout must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise pytest.UsageError(f"agentbench: --bench-timeout must be positive, got {raw!r}")
    return value


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scicode: a SciCode step (pytest-agentbench)")
    config.addinivalue_line("markers", "core_bench: a CORE-Bench capsule (pytest-agentbench)")
    for split in ("validation", "test", "train"):
        config.addinivalue_line("markers", f"{split}: a benchmark sample of the {split} split (pytest-agentbench)")
    config.addinivalue_line("markers", "prefilled: an official prefilled SciCode step, skipped (pytest-agentbench)")
    config.addinivalue_line("markers", "gpu: a CORE-Bench capsule that needs a GPU (pytest-agentbench)")
    config.addinivalue_line("markers", "docker: needs a Docker engine (pytest-agentbench's own tests)")
    name = setting(config, "--bench")
    if not name:
        return
    state = make_state(config, name)
    config.stash[STATE] = state
    config.pluginmanager.register(RecordWriter(config, state), "agentbench-writer")
    if not hasattr(config, "workerinput"):
        from .report.reporter import Reporter

        from .report.options import progress_interval
        from .report.progress import Progress

        config.pluginmanager.register(Reporter(config, state), "agentbench-reporter")
        config.pluginmanager.register(Progress(config, progress_interval(config)), "agentbench-progress")
        if state.resumed and config.pluginmanager.hasplugin("xdist"):
            from .report.resume import ResumeXdist

            size = state.records_path.stat().st_size if state.records_path.exists() else 0
            config.pluginmanager.register(ResumeXdist(size), "agentbench-resume-xdist")
    if config.pluginmanager.hasplugin("xdist"):
        from . import xdist

        config.pluginmanager.register(xdist.XdistHooks(state), "agentbench-xdist")


def make_state(config: pytest.Config, name: str) -> BenchState:
    benches, broken = available_benchmarks()
    if name not in benches:
        if name in broken:
            raise pytest.UsageError(f"agentbench: {broken[name]}")
        choose(sorted(benches), name, "benchmark (--bench)")
    benchmark = benches[name]
    split = choose(benchmark.splits, setting(config, "--bench-split") or benchmark.default_split,
                   f"{name} split (--bench-split)")
    from .models.options import model_settings

    model = model_settings(config)
    if not model.get("model") and not config.option.collectonly:
        raise pytest.UsageError(f"agentbench: --bench={name} needs a model: pass --model NAME "
                                f"(--model=oracle scores the ground truth without any server)")
    if model.get("model") == "oracle":  # no server, no cache: the endpoint settings would only mislead
        model = {"model": "oracle"}
    settings = {"benchmark": name, "split": split, **model, "item_timeout": bench_timeout(config)}
    settings.update(benchmark.settings(config))
    try:
        tasks = benchmark.load_tasks(config, split)
    except DataError as exc:
        raise pytest.UsageError(f"agentbench: {exc}") from None
    ids = [i.strip() for i in (setting(config, "--bench-ids") or "").split(",") if i.strip()]
    tasks = select_ids(tasks, ids, name)
    settings["data_hashes"] = data_hashes(config, benchmark, split)
    worker = getattr(config, "workerinput", None)
    resume = config.getoption("bench_resume")
    if worker is not None and "agentbench_run_dir" in worker:
        run_dir = Path(worker["agentbench_run_dir"])
        only_bench = worker["agentbench_only_bench"]
    elif resume:
        from .report.resume import resume_dir

        run_dir = resume_dir(config, resume)  # a resumed run continues in the interrupted run's folder
        only_bench = config.args_source != pytest.Config.ArgsSource.ARGS
    else:
        run_dir = new_run_dir(config, name, model.get("model") or "none")
        only_bench = config.args_source != pytest.Config.ArgsSource.ARGS
    settings["run_id"] = run_dir.name
    records_file = getattr(benchmark, "records_file", "records.jsonl")
    state = BenchState(benchmark=benchmark, split=split, settings=settings, tasks=tasks, run_dir=run_dir,
                       only_bench=only_bench, records_path=run_dir / records_file)
    if worker is None:
        prepare_controller(config, state, resume)
    elif worker.get("agentbench_resume_bytes"):
        from .report.resume import load_for_worker

        state.resumed = load_for_worker(state.records_path, worker["agentbench_resume_bytes"]).records
    return state


def prepare_controller(config: pytest.Config, state: BenchState, resume: str | None) -> None:
    """Gates, baseline and resume are checked before anything runs, so a mistake costs no model calls."""
    from .report.baseline import BaselineError, load_summary, settings_differences, summary_path
    from .report.options import gate_config

    state.gates = gate_config(config, state.benchmark)
    if resume:
        from .report.resume import check_settings, load_for_controller

        check_settings(state.run_dir, state.settings)
        resumed = load_for_controller(state.records_path)
        state.resumed = resumed.records
        state.notes += resumed.notes
    if state.gates.baseline:
        if not summary_path(state.gates.baseline).is_file() and state.gates.update_baseline:
            state.notes.append(f"no baseline at {summary_path(state.gates.baseline)} yet: this run writes it")
            return
        try:
            baseline = load_summary(state.gates.baseline)
        except BaselineError as exc:
            raise pytest.UsageError(f"agentbench: --bench-baseline: {exc}") from None
        diffs = settings_differences(baseline["settings"], state.settings)
        if diffs and not state.gates.update_baseline:
            raise pytest.UsageError(
                f"agentbench: refusing to compare with the baseline {baseline['_path']}: its settings differ from "
                f"this run's: {'; '.join(diffs)}. Run with the baseline's settings, or replace the baseline on "
                f"purpose with --bench-update-baseline")
        if diffs:
            state.notes.append(f"baseline {baseline['_path']} has other settings ({'; '.join(diffs)}): "
                               f"not compared; --bench-update-baseline replaces it")
            return
        state.baseline = baseline
        state.notes.append(f"baseline: {baseline['_path']} (model {baseline['settings'].get('model')}, "
                           f"run {baseline['settings'].get('run_id')})")


def data_hashes(config: pytest.Config, benchmark: Benchmark, split: str) -> dict[str, str]:
    """sha256 of the data files this run reads (the benchmark's ``data_hashes``, when it has one),
    so a baseline made from other data is not compared."""
    own = getattr(benchmark, "data_hashes", None)
    return dict(own(config, split)) if callable(own) else {}


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "model"


def new_run_dir(config: pytest.Config, bench: str, model: str) -> Path:
    root = Path(setting(config, "--bench-report-dir")).expanduser()
    if not root.is_absolute():
        root = Path(config.invocation_params.dir) / root
    run_id = setting(config, "--bench-run-id") or (
        datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2))
    # Created by the first record written, so --collect-only leaves no empty folders behind.
    return root / bench / safe_name(model) / safe_name(run_id)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    state = collector.config.stash.get(STATE, None)
    if state is None or not isinstance(collector, pytest.Session) or not report.passed:
        return report
    root = BenchCollector.from_parent(collector, name=state.benchmark.name, nodeid=state.benchmark.name,
                                      benchmark=state.benchmark, tasks=state.tasks)
    # With --bench and no explicit paths only the benchmark runs, never a user's tests/ by accident.
    report.result = [root] if state.only_bench else [*report.result, root]
    return report


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = config.stash.get(STATE, None)
    if state is None:
        return None
    shown = ", ".join(f"{k}={v}" for k, v in state.settings.items()
                      if v is not None and k not in ("notes", "data_hashes"))
    lines = [f"agentbench: {shown}", f"agentbench: reports in {state.run_dir}"]
    lines += [f"agentbench: {note}" for note in [*state.settings.get("notes", []), *state.notes]]
    return lines


@pytest.fixture(scope="session")
def bench_model(pytestconfig: pytest.Config):
    """The model under evaluation. Override this fixture in a conftest.py to plug in another client."""
    from .models.options import build_model

    return build_model(pytestconfig)


@pytest.fixture(scope="session")
def bench_env(pytestconfig: pytest.Config):
    """Where agent commands and tool code run (``--bench-env``). Override it to supply another environment."""
    from .envs import build_env

    factory = build_env(pytestconfig)
    yield factory
    close = getattr(factory, "close", None)
    if close is not None:  # removes the long-lived container of SciCode's code_interpreter
        close()


def base_record(item: BenchItem, state: BenchState) -> dict[str, Any]:
    sample = item.sample
    return {"benchmark": state.benchmark.name, "task": sample.task_id, "id": sample.id, "split": sample.split,
            "scored": sample.scored, "model": state.settings.get("model")}


def run_item(item: BenchItem, model: Any, env: Any) -> None:
    """Run one sample, keep its record on the item, and turn its status into the pytest outcome."""
    state = item.config.stash[STATE]
    sample = item.sample
    record = base_record(item, state)
    started = time.monotonic()
    if sample.id in state.resumed:  # finished in the interrupted run: reported from its record, not run again
        replay(item, dict(state.resumed[sample.id]))
        return
    ctx = RunContext(config=item.config, model=model, env=env, run_dir=state.run_dir, item=item)
    try:
        result = state.benchmark.run_sample(sample, ctx)
    except Exception as exc:  # a bug or an unexpected failure must still leave a record
        result = {"status": "error", "message": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc(limit=20)}
    record.update(result)
    record.setdefault("message", "")
    record["duration"] = round(time.monotonic() - started, 3)
    record["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "main")
    item.stash[RECORD] = record
    outcome(record)


def replay(item: BenchItem, record: dict[str, Any]) -> None:
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


class RecordWriter:
    """In every process that runs items: attach each record to its report and append it to disk."""

    def __init__(self, config: pytest.Config, state: BenchState) -> None:
        self.config = config
        self.state = state

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if not isinstance(item, BenchItem):
            return report
        record = item.stash.get(RECORD, None)
        if call.when == "call" and record is None:
            record = {**base_record(item, self.state), "status": "error", "message": "item ran without a record"}
        if call.when == "setup" and not report.passed:
            # A fixture failed (an unreachable model, an environment that did not start): still a record.
            status = "skipped" if report.skipped else "error"
            message = _short(report)
            record = {**base_record(item, self.state), "status": status, "message": message, "duration": 0.0}
        if call.when == "setup" and report.skipped and item.sample.id in self.state.resumed:
            record = dict(self.state.resumed[item.sample.id])  # a skip marker fired: report the old record
        if record is not None and (call.when == "call" or not report.passed):
            report.user_properties.append((rec.RECORD_PROPERTY, record))
            if record["id"] not in self.state.resumed:  # a resumed record is already in the file
                rec.append_record(self.state.records_path, record)
            # junitxml writes the teardown report's properties: the item's list is copied into it.
            item.user_properties.extend(rec.junit_properties(record))
            item.stash[RECORD] = None  # written once
        return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport):
    """Keep whole records out of junitxml, which writes str(value) of every teardown property."""
    if report.when == "teardown":
        report.user_properties = [(k, v) for k, v in report.user_properties if k != rec.RECORD_PROPERTY]
    return (yield)


def _short(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    text = report.longreprtext.strip().splitlines()
    return text[-1] if text else "setup failed"
