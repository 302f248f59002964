"""The plugin of a benchmark run: registered by the entry-point module (``__init__.py``) only in a session that
asks for a benchmark.

It reads every option once at configure time into a frozen ``Settings`` (kept in ``config.stash``), builds the
run's state (``state.py``), collects the benchmark's samples as items (``collect.py``), runs them (``run.py``, the
``bench_run`` fixture), writes their records (``writer.py``) and reports on the controller (``reporter.py``,
``progress.py``). How this process takes part in the run (alone, xdist controller or worker, Slurm, a ``run-task``
or ``collect`` session) is one row of the table in ``modes.py``, which ``pytest_configure`` follows. The xdist
role is decided once, at the first configure hook (``take_role``, ``distribution/``): the xdist controller (or the
only process) is the one writer of the run (``ControllerWriter``) and reports (``Reporter``); an xdist worker
(``WorkerWriter``) sends each record, the item's files and its new model-cache entries to it in the item's report.
One plugin object on the controller and one on each worker own the xdist hooks (``distribution/plugins.py``); they
are unregistered at unconfigure. The Slurm back-end's pytest side is ``slurm/``. Other plugins extend it through
the hooks in ``hookspecs.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ..benchmarks.base import Benchmark, BenchRun, RunSpec
from ..benchmarks.registry import get_benchmark
from ..core.data import DataError
from ..core.errors import ConfigError
from ..core.options import Option, Settings
from ..core.records import DELIVERY_PROPERTY, RECORD_PROPERTY
from ..envs import build_env
from ..models.cache import ResponseCache
from ..models.options import build_model, model_settings
from .checks import bench_model_overridden, other_benchmark_options, settle_waiting
from .collect import BenchCollector, BenchItem, marker_name
from .concurrency import InFlight, chains_per_worker, connections_of, held_samples, keep_unscored, workers_of
from .distribution.handshake import HandshakeError, run_alone
from .distribution.plugins import CONTROLLER_PLUGIN, DistributionController, count_in_session_budget, take_role
from .modes import RunMode, Situation, listed_runs, run_mode
from .options import all_options, read, several_runs
from .run import RUNS, SETTINGS, STATE, BenchState, SessionRuns, states_of
from .selfdescribe import DEFINITION, definition, restore
from .signals import StopSignals
from .state import make_state, new_run_id, nothing_left
from .writer import ControllerWriter, WorkerWriter


def usage_error(exc: Exception) -> pytest.UsageError:
    return pytest.UsageError(f"agentbench: {exc}")


def settings_of(config: pytest.Config) -> Settings:
    """Every option's resolved value for this session (read once: at configure time in a benchmark run, else when a
    test first asks for the model or the environment)."""
    if SETTINGS not in config.stash:
        config.stash[SETTINGS] = read(config, all_options())
    return config.stash[SETTINGS]


def markers(bench: Benchmark) -> dict[str, str]:
    """The markers of the run's benchmark: its name, its splits and its own markers."""
    out = {marker_name(bench): f"a {bench.name} sample (pytest-agentbench)"}
    for split in bench.splits:
        out.setdefault(split, f"a benchmark sample of the {split} split (pytest-agentbench)")
    out.update(bench.markers)
    return out


@pytest.hookimpl(tryfirst=True, specname="pytest_configure")  # a second pytest_configure of this module, run first
def pytest_configure_role(config: pytest.Config) -> None:
    """Before any plugin reads an option: this process's xdist role, and on a worker what its controller sent
    (a remote worker takes the controller's run settings here)."""
    try:
        take_role(config)
    except HandshakeError as exc:
        raise usage_error(exc) from None


def pytest_configure(config: pytest.Config) -> None:
    options: tuple[Option, ...] = all_options()
    opts = read(config, options)
    opts = restore(config, options, opts)  # --bench-resume/--bench-replay DIR: the run's own settings
    config.stash[SETTINGS] = opts
    config.stash[DEFINITION] = definition(config, options, opts)
    try:
        model_settings(opts)  # checked in every run, so a typo is found before anything runs
        if not opts.bench:
            return
        for name, description in markers(get_benchmark(opts.bench)).items():
            config.addinivalue_line("markers", f"{name}: {description}")
        other_benchmark_options(options, opts, opts.bench)
        several = several_runs(config, options, opts)  # a run file listing several models or agents, none picked
        situation = Situation.of(config, opts, several)
        mode = run_mode(situation)
        if mode.refusal is not None:
            raise ConfigError(mode.refusal(situation))
        if several:
            runs = run_states(config, options, several, mode)
            state = runs[0]
        else:
            state = one_state(config, opts, mode)
            if mode.distributes and nothing_left(state):  # a finished run resumed: reports again, in-process
                run_alone(config)
                mode = run_mode(Situation.of(config, opts, several))
            runs = [state]
    except (ConfigError, DataError) as exc:
        raise usage_error(exc) from None
    config.stash[STATE] = state
    config.stash[RUNS] = runs
    register_run(config, mode, state)


def one_state(config: pytest.Config, opts: Settings, mode: RunMode) -> BenchState:
    """The state of a run of one model, checked as its mode says (ConfigError, DataError)."""
    state = make_state(config, opts)
    if mode.checks is not None:
        mode.checks(config, opts, state)  # report dir, model preflight, resume merge, significance; a node's sandbox
    return state


def register_run(config: pytest.Config, mode: RunMode, state: BenchState) -> None:
    """The plugin objects of the run in ``mode``, registered in the order their hooks rely on (the terminal calls
    the last registered first)."""
    stop_signals = StopSignals()  # SIGTERM/SIGHUP (a CI time-out, Kubernetes, Slurm) stop the run as Ctrl-C does
    stop_signals.install()
    config.pluginmanager.register(stop_signals, "agentbench-signals")
    runs = states_of(config)
    writer = WorkerWriter if mode.sends else ControllerWriter
    for each in runs:
        config.pluginmanager.register(writer(config, each), plugin_name("agentbench-writer", each))
        config.pluginmanager.register(InFlight(each), plugin_name("agentbench-in-flight", each))
    if mode.sends:
        return
    from .distribution.durations import DurationsWriter  # why: only the process that writes the run reports
    from .progress import Progress  # why: as above
    from .reporter import Reporter, RunsReport  # why: as above

    reporters = [Reporter(config, each) for each in runs]
    for reporter in reversed(reporters):  # the terminal calls the last registered first: runs in the file's order
        config.pluginmanager.register(reporter, plugin_name("agentbench-reporter", reporter.state))
        durations = DurationsWriter(reporter.state)  # the scheduler's costs
        config.pluginmanager.register(durations, plugin_name("agentbench-durations", reporter.state))
    if len(runs) > 1:  # a session of several runs: one verdict and one table across them
        config.pluginmanager.register(RunsReport(config, reporters), "agentbench-runs")
    config.pluginmanager.register(Progress(config, settings_of(config).progress_interval), "agentbench-progress")
    if mode.distributes:
        config.pluginmanager.register(DistributionController(config, state, runs), CONTROLLER_PLUGIN)
    if mode.engine is not None:
        engine, name = mode.engine(config, state)
        config.pluginmanager.register(engine, name)


PLUGIN_PREFIX = "agentbench-"  # every plugin object a run registers is named so (writer, reporter, distribution...)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Every plugin object the run registered leaves the plugin manager: a session run in-process (pytester's
    inline runs, a notebook) leaves nothing behind. pluggy has already listed this call's implementations, so
    their own unconfigure hooks still run."""
    for name, plugin in list(config.pluginmanager.list_name_plugin()):
        if name and name.startswith(PLUGIN_PREFIX) and plugin is not None:
            config.pluginmanager.unregister(plugin, name)


def plugin_name(base: str, state: BenchState) -> str:
    """A plugin's name: one per run, so each run of a session of several has its own."""
    return base if state.name is None else f"{base}-{state.name}"


def run_states(
    config: pytest.Config, options: tuple[Option, ...], several: dict[str, Settings], mode: RunMode
) -> list[BenchState]:
    """One state per run of a run file that lists several models or agents (each with its own settings, run folder
    and the checks of the session's ``mode``), sharing one run id; a conftest's own ``bench_model`` cannot stand
    for several models (ConfigError)."""
    if bench_model_overridden(config):
        listed, pick = listed_runs(tuple(several))
        raise ConfigError(
            f"a conftest.py overrides the bench_model fixture, and the run file lists {listed}: a session of "
            f"several runs uses the built-in clients; pick one with {pick}, or remove the override"
        )
    run_id = new_run_id()
    states: list[BenchState] = []
    for name, opts in several.items():
        if not opts.run_id:  # every run's folder has the session's run id
            opts = opts.with_values(run_id=run_id)
        state = make_state(config, opts, name)
        state.definition = definition(config, options, opts)  # settings.json: resumable as that run alone
        if mode.checks is not None:
            mode.checks(config, opts, state)
        states.append(state)
    return states


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    state = collector.config.stash.get(STATE, None)
    if state is None or not isinstance(collector, pytest.Session) or not report.passed:
        return report
    runs = states_of(collector.config)
    root = BenchCollector.from_parent(collector, name=state.benchmark.name, nodeid=state.benchmark.name, runs=runs)
    # With --bench and no explicit paths only the benchmark runs, never a user's tests/ by accident.
    report.result = [root] if state.only_bench else [*report.result, root]
    return report


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session: pytest.Session):
    """On an xdist controller, once xdist started the workers: the checks that ran meanwhile (the sandbox
    self-test, the model preflight: ``checks.WaitingChecks``; settled already when the header showed them) are
    settled, and one that failed ends the session with its usage error, before any item."""
    started = yield
    error = settle_waiting(session.config)
    if error is not None:
        raise usage_error(error)
    return started


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    runs = states_of(config)
    if not runs:
        return None
    settle_waiting(config)  # the header shows what they found (an error ends the session after the header)
    from .progress import header_lines  # why: as the reporter's, only where the run reports

    lines: list[str] = []
    for state in runs:  # several runs: one block each
        lines += header_lines(state.settings, state.run_dir, [*state.settings.get("notes", []), *state.notes])
    return lines


def model_fixture(pytestconfig: pytest.Config) -> Any:
    """The value of the ``bench_model`` fixture (declared in ``__init__.py``)."""
    try:
        runs = states_of(pytestconfig)
        if len(runs) > 1:  # a session of several runs: each run's own client, by the run's name
            return {
                state.name: build_model(
                    state.options, connections=connections_of(pytestconfig, state.options.max_connections)
                )
                for state in runs
            }
        opts = settings_of(pytestconfig)
        return build_model(opts, connections=connections_of(pytestconfig, opts.max_connections))
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def env_fixture(pytestconfig: pytest.Config) -> Iterator[Any]:
    """The value of the ``bench_env`` fixture (declared in ``__init__.py``), closed after the session."""
    try:
        opts = settings_of(pytestconfig)
        state = pytestconfig.stash.get(STATE, None)
        factory = build_env(opts, default=state.benchmark.default_env(opts) if state is not None else "host")
    except ConfigError as exc:
        raise usage_error(exc) from None
    yield factory
    factory.close()  # removes long-lived containers (a code tool's, for instance)


def run_fixture(request: pytest.FixtureRequest, bench_model: Any, bench_env: Any) -> Iterator[BenchRun | SessionRuns]:
    """The value of the ``bench_run`` fixture (declared in ``__init__.py``)."""
    if len(states_of(request.config)) > 1:  # each run opens at its first item
        runs = SessionRuns(lambda state: open_run(request, state, bench_model[state.name], bench_env))
        yield runs
        runs.close()
        return
    state: BenchState = request.config.stash[STATE]
    run = open_run(request, state, bench_model, bench_env)
    yield run
    run.close()
    keep_unscored(request.config, state, run)
    state.run = None


def run_connections(config: pytest.Config, state: BenchState) -> int:
    """How many model requests the benchmark's run in this process may have in flight (``RunSpec.connections``):
    this process's share of --bench-max-connections when the plugin's own client serves the model (the share its
    gate admits), else 1 (the oracle calls nothing; a conftest's ``bench_model`` has no gate of the plugin's)."""
    if bench_model_overridden(config):
        return 1
    return chains_per_worker(config, state)


def open_run(request: pytest.FixtureRequest, state: BenchState, model: Any, env: Any) -> BenchRun:
    """The benchmark's run of ``state`` with ``model``: over the session's items of that run."""
    selected = frozenset(
        item.sample.id for item in request.session.items if isinstance(item, BenchItem) and item.state is state
    )
    opts = state.options
    spec = RunSpec(
        settings=state.settings,
        options=opts,
        tasks=tuple(state.tasks),
        selected=selected,
        run_dir=state.run_dir,
        data_dir=opts.data_dir,
        cache_dir=opts.cache_dir,
        files=state.files,
        held=held_samples(request.session, state),
        workers=workers_of(request.config),
        connections=run_connections(request.config, state),
        reused=state.resumed,
    )
    state.gate = getattr(model, "gate", None)  # models.concurrency.CallGate: stopped with the run's budget
    count_in_session_budget(request.config, state, model)  # on a worker: its calls count in the session's
    cache = getattr(model, "cache", None)
    if state.journal is not None and isinstance(cache, ResponseCache):
        cache.journal = state.journal  # on a worker: new entries also travel to the controller's cache
    try:
        run = state.benchmark.open_run(spec, model, env)
    except ConfigError as exc:
        raise usage_error(exc) from None
    if not isinstance(run, BenchRun):  # the plugin calls every hook of BenchRun: their defaults come from it
        raise pytest.UsageError(
            f"agentbench: {state.benchmark.name}'s open_run returned a {type(run).__name__}, not a BenchRun: "
            "make its run class subclass pytest_agentbench.benchmarks.base.BenchRun"
        )
    state.run = run
    return run


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport):
    """Keep whole records (and deliveries) out of junitxml, which writes str(value) of every teardown property."""
    if report.when == "teardown":
        report.user_properties = [
            (k, v) for k, v in report.user_properties if k not in (RECORD_PROPERTY, DELIVERY_PROPERTY)
        ]
    return (yield)
