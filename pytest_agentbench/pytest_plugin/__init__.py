"""The pytest plugin (the ``pytest11`` entry point): the only package of pytest-agentbench that imports pytest.

It registers every layer's options once (``options.py``), reads them once at configure time into a
frozen ``Settings`` (kept in ``config.stash``), builds the run's state (``state.py``), collects the
benchmark's samples as items (``collect.py``), runs them (``run.py``, the ``bench_run`` fixture),
writes their records (``writer.py``) and reports on the controller (``reporter.py``, ``progress.py``).
The plugin is inert unless ``--bench`` (or the ``agentbench_bench`` ini key) names a benchmark.
The xdist role is decided once, at the first configure hook (``take_role``, distribution.py): the xdist
controller (or the only process) is the one writer of the run (``ControllerWriter``) and reports
(``Reporter``); an xdist worker (``WorkerWriter``) sends each record, the item's files and its new model-cache
entries to it in the item's report. One plugin object on the controller and one on each worker own the xdist
hooks (distribution.py); they are unregistered at unconfigure.
Other plugins extend it through the hooks in ``hookspecs.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ..benchmarks.base import BenchRun, RunSpec
from ..benchmarks.registry import available_benchmarks
from ..core.data import DataError
from ..core.errors import ConfigError
from ..core.options import Option, Settings
from ..core.records import DELIVERY_PROPERTY, RECORD_PROPERTY
from ..envs import build_env
from ..models.cache import ResponseCache
from ..models.options import build_model, model_settings
from . import hookspecs
from .checks import before_items, bench_model_overridden, node_checks, other_benchmark_options
from .collect import BenchCollector, BenchItem, marker_name
from .distribution import CONTROLLER_PLUGIN, DistributionController, take_role
from .durations import DurationsWriter
from .handshake import HandshakeError, Role, role_of
from .options import all_options, read, register, run_file_arguments, several_models
from .pathargs import space_form_error
from .progress import Progress, header_lines
from .run import MODEL_STATES, SETTINGS, STATE, BenchState, ModelRuns, states_of
from .selfdescribe import DEFINITION, definition, restore
from .slurm import SlurmBackend, collect_ended
from .state import make_state, new_run_id
from .taskpackage import CollectSession, PackageCollector, TaskPackager, plugin_of
from .writer import ControllerWriter, WorkerWriter

GENERIC_MARKERS = {"docker": "needs a Docker engine (pytest-agentbench's own tests)"}


def usage_error(exc: Exception) -> pytest.UsageError:
    return pytest.UsageError(f"agentbench: {exc}")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    register(parser, all_options(available_benchmarks()))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Refuse an option value that pytest took for a test path before it knew the plugin's options; add the
    pytest flags a run file gives (pytest reads ``args`` again after this hook, as pytest-xdist's ``-n auto``
    documentation does it)."""
    options = all_options(available_benchmarks())
    error = space_form_error(early_config, parser, args, options)
    if error:
        raise pytest.UsageError(error)
    args += run_file_arguments(early_config, options)


def settings_of(config: pytest.Config) -> Settings:
    """Every option's resolved value for this session (read once, at configure time)."""
    return config.stash[SETTINGS]


def markers(registered) -> dict[str, str]:
    """Markers of every registered benchmark: its name, its splits and its own markers."""
    out = dict(GENERIC_MARKERS)
    for name in sorted(registered.found):
        bench = registered.found[name]
        out[marker_name(bench)] = f"a {bench.name} sample (pytest-agentbench)"
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
    registered = available_benchmarks()
    for name, description in markers(registered).items():
        config.addinivalue_line("markers", f"{name}: {description}")
    options: tuple[Option, ...] = all_options(registered)
    opts = read(config, options)
    opts = restore(config, options, opts)  # --bench-resume/--bench-replay DIR: the run's own settings
    config.stash[SETTINGS] = opts
    config.stash[DEFINITION] = definition(config, options, opts)
    try:
        model_settings(opts)  # checked in every run, so a typo is found before anything runs
        if not opts.bench:
            return
        other_benchmark_options(options, opts, opts.bench)
        several = several_models(config, options, opts)  # a run file listing several models, none picked
        if several:
            if opts.backend == "slurm":
                raise ConfigError(
                    f"--bench-backend=slurm runs one model per session, and the run file lists "
                    f"{len(several)} models ({', '.join(several)}): pick one with --model=NAME"
                )
            states = model_states(config, options, several)
            state = next(iter(states.values()))
            config.stash[MODEL_STATES] = states
        else:
            state = make_state(config, opts)
            if not state.is_worker:
                before_items(config, opts, state)  # report dir, model preflight, resume merge, significance
            elif plugin_of(config, TaskPackager) is not None and not config.option.collectonly:
                node_checks(opts, state)  # a Slurm job: isolation and the sandbox self-test on its node
    except (ConfigError, DataError) as exc:
        raise usage_error(exc) from None
    config.stash[STATE] = state
    runs = states_of(config)
    writer = WorkerWriter if state.is_worker else ControllerWriter
    for each in runs:
        config.pluginmanager.register(writer(config, each), plugin_name("agentbench-writer", each))
    if state.is_worker:
        return
    from .reporter import ModelsReport, Reporter  # why: the report layer imports numpy; only a benchmark run reports

    reporters = [Reporter(config, each) for each in runs]
    for reporter in reversed(reporters):  # the terminal calls the last registered first: models in the file's order
        config.pluginmanager.register(reporter, plugin_name("agentbench-reporter", reporter.state))
        durations = DurationsWriter(reporter.state)  # the scheduler's costs
        config.pluginmanager.register(durations, plugin_name("agentbench-durations", reporter.state))
    if state.model is not None:  # a run of several models: one verdict and one table across them
        config.pluginmanager.register(ModelsReport(config, reporters), "agentbench-models")
    config.pluginmanager.register(Progress(config, opts.progress_interval), "agentbench-progress")
    if role_of(config) is Role.CONTROLLER:
        config.pluginmanager.register(DistributionController(config, state, runs), CONTROLLER_PLUGIN)
    if plugin_of(config, PackageCollector) is not None:  # python -m pytest_agentbench collect
        ended = collect_ended(state.run_dir)  # a Slurm run's jobs that ended without a package are lost
        config.pluginmanager.register(CollectSession(config, state, ended), "agentbench-collect-session")
    elif opts.backend == "slurm":
        if role_of(config) is Role.CONTROLLER:
            raise usage_error(
                ConfigError(
                    "--bench-backend=slurm runs every task as a Slurm job: leave out "
                    "-n/--dist/--tx (pytest-xdist) for this run"
                )
            )
        config.pluginmanager.register(SlurmBackend(config, state), "agentbench-slurm")


PLUGIN_PREFIX = "agentbench-"  # every plugin object a run registers is named so (writer, reporter, distribution...)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Every plugin object the run registered leaves the plugin manager: a session run in-process (pytester's
    inline runs, a notebook) leaves nothing behind. pluggy has already listed this call's implementations, so
    their own unconfigure hooks still run."""
    for name, plugin in list(config.pluginmanager.list_name_plugin()):
        if name and name.startswith(PLUGIN_PREFIX) and plugin is not None:
            config.pluginmanager.unregister(plugin, name)


def plugin_name(base: str, state: BenchState) -> str:
    """A plugin's name: one per run, so each model of a run of several models has its own."""
    return base if state.model is None else f"{base}-{state.model}"


def model_states(
    config: pytest.Config, options: tuple[Option, ...], several: dict[str, Settings]
) -> dict[str, BenchState]:
    """One state per model of a run file that lists several (each with its own settings, run folder and checks),
    sharing one run id; a conftest's own ``bench_model`` cannot stand for several models (ConfigError)."""
    names = tuple(several)
    if bench_model_overridden(config):
        raise ConfigError(
            f"a conftest.py overrides the bench_model fixture, and the run file lists {len(names)} "
            f"models ({', '.join(names)}): a run of several models uses the built-in clients; pick "
            f"one model with --model=NAME, or remove the override"
        )
    run_id = new_run_id()
    states: dict[str, BenchState] = {}
    for name, opts in several.items():
        if not opts.run_id:  # every model's run folder has the session's run id
            opts = opts.with_values(run_id=run_id)
        state = make_state(config, opts, names)
        state.definition = definition(config, options, opts)  # settings.json: resumable as that model's run
        if not state.is_worker:
            before_items(config, opts, state)
        states[name] = state
    return states


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    state = collector.config.stash.get(STATE, None)
    if state is None or not isinstance(collector, pytest.Session) or not report.passed:
        return report
    root = BenchCollector.from_parent(
        collector,
        name=state.benchmark.name,
        nodeid=state.benchmark.name,
        benchmark=state.benchmark,
        tasks=state.tasks,
        attempts=state.options.attempts,
        models=state.models,
        model_name=state.settings.get("model"),
    )
    # With --bench and no explicit paths only the benchmark runs, never a user's tests/ by accident.
    report.result = [root] if state.only_bench else [*report.result, root]
    return report


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    runs = states_of(config)
    if not runs:
        return None
    lines: list[str] = []
    for state in runs:  # several models: one block each
        lines += header_lines(state.settings, state.run_dir, [*state.settings.get("notes", []), *state.notes])
    return lines


@pytest.fixture(scope="session")
def bench_model(pytestconfig: pytest.Config):
    """The model under evaluation. Override this fixture in a conftest.py to plug in another client."""
    try:
        several = pytestconfig.stash.get(MODEL_STATES, None)
        if several:  # a run of several models: each model's client, by name
            return {name: build_model(state.options) for name, state in several.items()}
        return build_model(settings_of(pytestconfig))
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.fixture(scope="session")
def bench_env(pytestconfig: pytest.Config):
    """Where agent commands and tool code run (``--bench-env``). Override it to supply another environment."""
    try:
        opts = settings_of(pytestconfig)
        state = pytestconfig.stash.get(STATE, None)
        factory = build_env(opts, default=state.benchmark.default_env(opts) if state is not None else "host")
    except ConfigError as exc:
        raise usage_error(exc) from None
    yield factory
    factory.close()  # removes long-lived containers (a code tool's, for instance)


@pytest.fixture(scope="session")
def bench_run(request: pytest.FixtureRequest, bench_model: Any, bench_env: Any) -> Iterator[BenchRun | ModelRuns]:
    """This process's run of the benchmark, opened once at its first item with the model and environment
    (the solver is chosen here) and closed at the end of the session, before the environment."""
    several = request.config.stash.get(MODEL_STATES, None)
    if several:  # each model's run opens at its first item
        runs = ModelRuns(lambda name: open_run(request, several[name], bench_model[name], bench_env))
        yield runs
        runs.close()
        return
    state: BenchState = request.config.stash[STATE]
    run = open_run(request, state, bench_model, bench_env)
    yield run
    run.close()
    state.run = None


def open_run(request: pytest.FixtureRequest, state: BenchState, model: Any, env: Any) -> BenchRun:
    """The benchmark's run of ``state`` with ``model``: over the session's items of that run."""
    selected = frozenset(
        item.sample.id for item in request.session.items if isinstance(item, BenchItem) and item.model == state.model
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
    )
    cache = getattr(model, "cache", None)
    if state.journal is not None and isinstance(cache, ResponseCache):
        cache.journal = state.journal  # on a worker: new entries also travel to the controller's cache
    try:
        state.run = state.benchmark.open_run(spec, model, env)
    except ConfigError as exc:
        raise usage_error(exc) from None
    return state.run


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport):
    """Keep whole records (and deliveries) out of junitxml, which writes str(value) of every teardown property."""
    if report.when == "teardown":
        report.user_properties = [
            (k, v) for k, v in report.user_properties if k not in (RECORD_PROPERTY, DELIVERY_PROPERTY)
        ]
    return (yield)
