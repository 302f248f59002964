"""One task, one package: ``python -m pytest_agentbench run-task RUN_DIR TASK`` and ``... collect RUN_DIR``
(the command line, ``cli/tasks.py``, starts these sessions through ``pytest_plugin/__main__.py``).

``run-task`` runs one task of a run (a SciCode problem's steps in order, one CORE-Bench capsule, one attempt of
either) in a pytest session of its own, with the run's settings (its settings.json, as ``--bench-resume``
restores them), in the role of an xdist worker: ``WorkerWriter`` attaches each record and delivery to the
item's report and nothing of the run is written, except, at the end, the task's package in the run's spool
(``backends/slurm/spool.py``). A session that did not report every item of the task (interrupted, killed) writes none.

On the controller, ``take_in`` turns a package back into the items' reports (``pytest_runtest_logreport``), so
``ControllerWriter`` stores files and cache entries and appends records exactly as for an xdist delivery, and
the reporter, progress and gates see the items pass or fail as they arrive. ``collect`` is a session over the
run (``--bench-resume RUN_DIR``) that runs nothing: it takes in every package waiting in the spool and writes
the summaries.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from ...backends.slurm import commands as slurm
from ...backends.slurm import spool
from ...core import records as rec
from ...core.options import Option
from ...report.resume import stored_cwd, write_settings_once
from ..collect import BenchItem
from ..options import all_options
from ..run import STATE, BenchState, base_record
from ..selfdescribe import settings_file_content


def unit_of(item: BenchItem) -> str:
    sample = item.sample
    return spool.unit_name(sample.task_id, sample.attempt if sample.repeated else None)


def units_of(items: Iterable[pytest.Item]) -> dict[str, list[BenchItem]]:
    """The session's benchmark items by unit of work (a task, or one attempt of it), in collection order."""
    out: dict[str, list[BenchItem]] = {}
    for item in items:
        if isinstance(item, BenchItem):
            out.setdefault(unit_of(item), []).append(item)
    return out


def job_label() -> tuple[str, str]:
    """How records name the job that ran them and its node: the Slurm job (``slurm 123_4``) when there is one."""
    array, index = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    job = f"{array}_{index}" if array and index else os.environ.get("SLURM_JOB_ID")
    worker = f"slurm {job}" if job else f"task {os.getpid()}"
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    return worker, node


class TaskPackager:
    """Registered in a ``run-task`` session: keeps only the task's items and writes their package at the end."""

    def __init__(self, run_dir: Path, unit: str) -> None:
        self.run_dir = Path(run_dir)
        self.unit = unit
        self.worker, self.node = job_label()
        self.items: dict[str, dict[str, Any]] = {}
        self.selected: list[str] = []
        self.written: Path | None = None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        keep = [i for i in items if isinstance(i, BenchItem) and unit_of(i) == self.unit]
        drop = [i for i in items if not (isinstance(i, BenchItem) and unit_of(i) == self.unit)]
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep
        self.selected = [i.nodeid for i in keep]

    def pytest_agentbench_record(self, record: rec.RecordData, item: Any) -> None:
        record["worker"], record["host"] = self.worker, self.node

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.items.setdefault(
            report.nodeid,
            {
                "nodeid": report.nodeid,
                "phases": [],
                "record": None,
                "delivery": {"append": True, "files": [], "cache": []},
            },
        )
        phase = {
            "when": report.when,
            "outcome": report.outcome,
            "duration": report.duration,
            "longrepr": longrepr_data(report),
            "record": False,
        }
        for key, value in report.user_properties:
            if key == rec.RECORD_PROPERTY:
                entry["record"], phase["record"] = value, True
            elif key == rec.DELIVERY_PROPERTY:
                entry["delivery"] = value
        entry["phases"].append(phase)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """The package, only when every item of the task has its record (else the task is lost, and rerun)."""
        if not self.selected or any(self.items.get(n, {}).get("record") is None for n in self.selected):
            return
        meta = {"worker": self.worker, "node": self.node, "pid": os.getpid()}
        self.written = spool.write_package(self.run_dir, self.unit, [self.items[n] for n in self.selected], meta)


def longrepr_data(report: pytest.TestReport) -> Any:
    if report.passed:
        return None
    if report.skipped and isinstance(report.longrepr, tuple):
        return [str(report.longrepr[0]), report.longrepr[1], str(report.longrepr[2])]
    return report.longreprtext


# --------------------------------------------------------------------------- controller side


def replay_reports(
    config: pytest.Config,
    item: pytest.Item,
    phases: list[dict[str, Any]],
    record: rec.RecordData | None,
    delivery: dict[str, Any] | None,
) -> None:
    """The item's reports as its own run made them, through the public hooks (as xdist's controller does); the
    record is its JSON object, as a worker's report carries it."""
    config.hook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for phase in phases:
        props: list[tuple[str, Any]] = list(item.user_properties) if phase["when"] == "teardown" else []
        if phase.get("record") and record is not None:
            props = [(rec.RECORD_PROPERTY, record)] + ([(rec.DELIVERY_PROPERTY, delivery)] if delivery else [])
        longrepr = phase.get("longrepr")
        if phase["outcome"] == "skipped" and isinstance(longrepr, list) and len(longrepr) == 3:
            longrepr = tuple(longrepr)
        elif phase["outcome"] == "skipped":
            longrepr = (str(item.path), 0, str(longrepr or "skipped"))
        report = pytest.TestReport(
            item.nodeid,
            item.location,
            {k: 1 for k in item.keywords},
            phase["outcome"],
            longrepr,
            phase["when"],
            duration=float(phase.get("duration") or 0.0),
            user_properties=props,
        )
        config.hook.pytest_runtest_logreport(report=report)
    config.hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def record_phases(record: rec.Record) -> list[dict[str, Any]]:
    """Reports for an item known only by its record (a resumed one, a lost one)."""
    status = record.get("status")
    if status == rec.PASS:
        call = {"when": "call", "outcome": "passed", "longrepr": None}
    elif status == "skipped":
        return [
            {
                "when": "setup",
                "outcome": "skipped",
                "longrepr": str(record.get("message") or "skipped"),
                "record": True,
            },
            {"when": "teardown", "outcome": "passed", "longrepr": None},
        ]
    else:
        call = {"when": "call", "outcome": "failed", "longrepr": f"{status}: {record.get('message', '')}"}
    return [
        {"when": "setup", "outcome": "passed", "longrepr": None},
        {**call, "record": True},
        {"when": "teardown", "outcome": "passed", "longrepr": None},
    ]


def take_in(config: pytest.Config, path: Path, items: Mapping[str, BenchItem], taken: set[str]) -> str | None:
    """Take one package in (its items' reports, so the controller writes files, cache entries and records);
    returns its unit, or None for a package of no unit waiting here (another run's, damaged: it stays in
    the spool with a warning). A package is moved to ``spool/taken`` once its records are written."""
    try:
        package = spool.read_package(path)
    except spool.PackageError as exc:
        warn_once(config, f"agentbench: {exc}; left in the spool")
        return None
    unit = str(package.get("unit"))
    if unit in taken:  # taken in already (a requeued job that finished twice): ignored
        spool.mark_taken(path)
        return None
    entries = {entry["nodeid"]: entry for entry in package["items"]}
    if not entries or any(nodeid not in items for nodeid in entries):
        warn_once(config, f"agentbench: {path.name} names items this session does not have; left in the spool")
        return None
    state: BenchState = config.stash[STATE]
    for nodeid, entry in entries.items():
        record = entry.get("record")
        if isinstance(record, dict) and rec.record_key(record) in state.resumed:
            record = None  # already in the records file: reported from there, not written twice
        delivery = {**entry["delivery"], "append": True} if record is not None else None
        if record is None and items[nodeid].sample.key in state.resumed:
            record = state.resumed[items[nodeid].sample.key].to_json()
        replay_reports(config, items[nodeid], entry["phases"], record, delivery)
    spool.mark_taken(path)
    taken.add(unit)
    return unit


def report_from_record(config: pytest.Config, item: BenchItem, record: rec.Record, write: bool) -> None:
    """An item reported from a record: a resumed one (not written again) or a new one such as a lost record
    (``write``: appended by the controller's writer like a delivered record)."""
    delivery = {"append": True, "files": [], "cache": [], "bytes": 0} if write else None
    replay_reports(config, item, record_phases(record), record.to_json(), delivery)


def lost_record(item: BenchItem, state: BenchState, message: str, worker: str, host: str) -> rec.Record:
    return rec.Record.from_json(
        {
            **base_record(item.sample, state),
            "status": "error",
            "message": message,
            rec.LOST_FIELD: True,
            "duration": 0.0,
            "worker": worker,
            "host": host,
        }
    )


def warn_once(config: pytest.Config, text: str) -> None:
    seen = config.stash.setdefault(WARNED, set())
    if text not in seen:
        seen.add(text)
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(text, yellow=True)


WARNED = pytest.StashKey[set]()


class PackageCollector:
    """Registered in a ``collect`` session: the backend loop takes in the spool and runs nothing."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)


class PackageLoop:
    """The controller's run loop for tasks run elsewhere: report resumed items from their records, start the
    engine (``start``), then take packages in as they arrive until every unit has one or the engine says a
    unit ended without one (``ended``: unit -> lost message, worker, host)."""

    def __init__(self, config: pytest.Config, state: BenchState, poll: float = 0.5) -> None:
        self.config, self.state, self.poll = config, state, poll
        self.taken: set[str] = spool.taken_units(state.run_dir)

    def pending_units(self, units: dict[str, list[BenchItem]]) -> dict[str, list[BenchItem]]:
        return {u: items for u, items in units.items() if any(i.sample.key not in self.state.resumed for i in items)}

    def report_resumed(self, units: dict[str, list[BenchItem]], pending: dict[str, list[BenchItem]]) -> None:
        for unit, items in units.items():
            if unit in pending:
                continue
            for item in items:
                report_from_record(self.config, item, self.state.resumed[item.sample.key], write=False)

    def take_waiting(self, items: Mapping[str, BenchItem], pending: dict[str, Any]) -> list[str]:
        done = []
        for path in spool.waiting_packages(self.state.run_dir):
            unit = take_in(self.config, path, items, self.taken)
            if unit is not None and unit in pending:
                pending.pop(unit)
                done.append(unit)
        return done

    def mark_lost(self, pending: dict[str, list[BenchItem]], unit: str, message: str, worker: str, host: str) -> None:
        for item in pending.pop(unit):
            if item.sample.key in self.state.resumed:
                report_from_record(self.config, item, self.state.resumed[item.sample.key], write=False)
            else:
                report_from_record(self.config, item, lost_record(item, self.state, message, worker, host), write=True)

    def wait(
        self,
        session: pytest.Session,
        pending: dict[str, list[BenchItem]],
        ended: Callable[[set[str]], dict[str, tuple[str, str, str]]],
        sleep: Callable[[float], None],
    ) -> None:
        items = {i.nodeid: i for its in pending.values() for i in its}
        while pending and not session.shouldstop:
            self.take_waiting(items, pending)
            if not pending:
                break
            gone = ended(set(pending))
            if gone:
                self.take_waiting(items, pending)  # a package written just before its job ended
                for unit, (message, worker, host) in sorted(gone.items()):
                    if unit in pending:
                        self.mark_lost(pending, unit, message, worker, host)
                continue
            sleep(self.poll)


def write_run_settings(config: pytest.Config, state: BenchState) -> None:
    """settings.json before anything runs elsewhere: ``run-task`` restores the run from it."""
    write_settings_once(state.run_dir, settings_file_content(state.settings, config))


# --------------------------------------------------------------------------- the commands


def session_args(run_dir: Path, extra: list[str]) -> list[str]:
    args = [f"--bench-resume={run_dir}", "-p", "no:cacheprovider", *extra]
    if importlib.util.find_spec("xdist") is not None:  # the task runs in this process, whatever -n the ini adds
        args += ["-n", "0"]
    return args


class SecretValues:
    """The run's secret option values, read from the run's 0600 file, set on this session's options before the
    plugin reads them: held in this process's memory only (never a job's script, environment or command line),
    as a remote worker holds them from its worker input."""

    def __init__(self, values: Mapping[str, str], options: Iterable[Option]) -> None:
        by_name = {o.name: o for o in options if o.secret}
        self.values = {by_name[name].dest: value for name, value in values.items() if name in by_name}

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        for dest, value in self.values.items():
            setattr(config.option, dest, value)


def read_secret(run_dir: Path) -> SecretValues:
    """The secret option values the run left for its jobs (``--bench-set=slurm_key=file``), as a plugin."""
    options = all_options()
    legacy = [o.name for o in options if o.secret and o.env]
    values = slurm.read_secret(spool.spool_dir(run_dir) / spool.SECRET_FILE, legacy)
    return SecretValues(values, options)


def interrupted(signum: int, _frame: Any) -> None:
    """SIGTERM (Slurm's scancel or time limit, before its SIGKILL) ends the task as Ctrl-C would: pytest tears
    down the session's fixtures, so the environment removes its containers and sandboxes; no package is
    written, the task is lost and a resume runs it again."""
    signal.signal(signum, signal.SIG_DFL)
    raise KeyboardInterrupt(f"signal {signum}")


def run_task_session(run_dir: Path, unit: str, rest: list[str]) -> int:
    """``run-task``'s session (``cli/tasks.py`` checked the arguments): run one task of the run in the folder
    the run was started from and write its package; 0 when the package is written."""
    secrets = read_secret(run_dir)
    cwd = stored_cwd(run_dir)
    if cwd:
        os.chdir(cwd)
    signal.signal(signal.SIGTERM, interrupted)  # scancel, a time limit: tear down what the task started
    packager = TaskPackager(run_dir, unit)
    code = pytest.main(session_args(run_dir, rest), plugins=[packager, secrets])
    if packager.written is None:
        print(f"run-task: task {unit} of {run_dir} wrote no package (pytest exit {int(code)})", file=sys.stderr)
        return int(code) or 1
    print(f"run-task: task {unit}: package {packager.written}")
    return 0


def collect_session(run_dir: Path, rest: list[str]) -> int:
    """``collect``'s session (``cli/tasks.py`` checked the arguments): take in every package waiting in the
    run's spool, write the summaries, and remove the run's API key file. Exit as a run's (its gates)."""
    cwd = stored_cwd(run_dir)
    if cwd:
        os.chdir(cwd)
    try:
        return int(pytest.main(session_args(run_dir, rest), plugins=[PackageCollector(run_dir)]))
    finally:
        (spool.spool_dir(run_dir) / spool.SECRET_FILE).unlink(missing_ok=True)


class CollectSession:
    """The run loop of a ``collect`` session: resumed items from their records, then every package waiting in
    the spool; units still without a package are left to the engine (``ended``: a Slurm job that ended
    without one is lost) or stay missing (the summary says the run is incomplete)."""

    def __init__(
        self,
        config: pytest.Config,
        state: BenchState,
        ended: Callable[[set[str]], dict[str, tuple[str, str, str]]] | None = None,
    ) -> None:
        self.config, self.state, self.ended = config, state, ended
        self.loop = PackageLoop(config, state)

    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
        if session.config.option.collectonly:
            return True
        units = units_of(session.items)
        pending = self.loop.pending_units(units)
        self.loop.report_resumed(units, pending)
        items = {i.nodeid: i for its in pending.values() for i in its}
        started = time.monotonic()
        taken = self.loop.take_waiting(items, pending)
        warn_once(
            self.config,
            f"agentbench: took in {len(taken)} package(s) "
            f"({sum(len(units[u]) for u in taken)} item(s)) in {time.monotonic() - started:.2f} s",
        )
        if pending and self.ended is not None:
            for unit, (message, worker, host) in sorted(self.ended(set(pending)).items()):
                if unit in pending:
                    self.loop.mark_lost(pending, unit, message, worker, host)
        return True


def plugin_of(config: pytest.Config, kind: type) -> Any:
    """The plugin object of ``kind`` that ``run-task`` or ``collect`` passed to ``pytest.main``, or None."""
    return next((p for p in config.pluginmanager.get_plugins() if isinstance(p, kind)), None)
