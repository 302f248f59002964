"""Checks made once on the controller before any item runs, so a run fails before it spends
anything on items.

``before_items`` runs them all at configure time; the two that wait on other processes (the sandbox self-test and
the model preflight, ``WaitingChecks``) run on threads meanwhile, and on an xdist controller while xdist starts the
workers: the session settles them before its header and before any item.

``preflight_call``: the model endpoint's preflight (``models/preflight.py``): a listing and one request shaped
like the run's first (``first_call``: the benchmark's harness builds it for the first task), unless the run
needs no endpoint or a conftest supplies its own ``bench_model``. ``other_benchmark_options``: a
benchmark's own option given on the command line of a run of another benchmark is a mistake.
``check_report_dir``: the report folder can be created (found now, not after the work is done);
``probe_report_dir``: a file can really be written there (a pseudo file system, a read-only mount, a folder of
another user: permission bits say nothing for root, so a probe file is created, fsynced and removed).
``sandbox_self_test``: this interpreter runs in the sandbox with the run's binds (``sandbox/selftest.py``).
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..core.errors import ConfigError
from ..core.host import hostname
from ..core.options import Option, Settings
from ..core.run_options import legacy_cache_note
from ..envs import build_env
from ..models.options import ORACLE, check_api_key, model_settings
from ..sandbox.options import isolation_from, private_folders
from .distribution.handshake import Role, role_of
from .run import BenchState
from .selfdescribe import rewrite_definition
from .state import nothing_left

if TYPE_CHECKING:
    from ..models.preflight import FirstCall
    from ..sandbox.selftest import SelfTest

Preflight = Callable[[], "str | None"]  # the preflight's requests; their note for the header


def bench_model_overridden(config: pytest.Config) -> bool:
    """Whether a conftest or plugin loaded so far defines its own ``bench_model`` fixture (not checked)."""
    return fixture_overridden(config, "bench_model")


def fixture_overridden(config: pytest.Config, name: str) -> bool:
    """Whether a conftest or plugin loaded so far defines its own fixture ``name`` instead of the plugin's."""
    ours = __name__.rsplit(".", 1)[0]
    for plugin in config.pluginmanager.get_plugins():
        module = plugin if isinstance(plugin, types.ModuleType) else None
        if module is not None and not module.__name__.startswith(ours) and name in vars(module):
            return True
    return False


def preflight_call(config: pytest.Config, opts: Settings, state: BenchState | None = None) -> Preflight | None:
    """The model preflight of a run that calls an endpoint, ready to send (from any thread: it reads no config);
    None when the run calls none or the preflight is off. ConfigError for a key that cannot be right."""
    if config.option.collectonly or not opts.model or opts.model == ORACLE or bench_model_overridden(config):
        return None
    check_api_key(model_settings(opts), opts.model_api_key)  # no network: checked even with the preflight off
    from ..models.preflight import preflight, skip_reason  # why: only the controller of a run checks its model

    if skip_reason(opts) is not None:
        return None
    shape = first_call(opts, state) if state is not None else None
    return lambda: preflight(opts, shape)


def first_call(opts: Settings, state: BenchState) -> FirstCall | None:
    """The shape of the run's first model request (its first task's, built by the benchmark's own harness with
    the run's settings), or None when the benchmark cannot say (the preflight then sends a plain "ping")."""
    task = next((t for t in state.tasks if t.samples), None)
    if task is None:
        return None
    from ..models.probe import FirstRequestKeeper  # why: it imports the openai SDK, loaded only for a real model

    keeper = FirstRequestKeeper(str(opts.model))
    try:
        state.benchmark.first_call_misses(opts, state.settings, [task], list(task.samples), keeper)
    except Exception:  # the harness could not build it here (a data file missing, ...): the items will say why
        return None
    return keeper.seen


def other_benchmark_options(options: Iterable[Option], opts: Settings, bench: str) -> None:
    """ConfigError naming the options of another benchmark given on the command line (shared ones never)."""
    wrong = [o for o in options if o.owner and o.owner != bench and opts.origin(o.name) == "command line"]
    if wrong:
        named = ", ".join(f"{o.spelling} (a {o.owner} option)" for o in wrong)
        raise ConfigError(f"{named} do(es) not apply to --bench={bench}; remove it, or run --bench={wrong[0].owner}")


def check_report_dir(path: Path, shown: Path) -> None:
    """ConfigError when the run folder ``path`` cannot be created under the report folder ``shown``:
    a file in the way, or no write permission."""
    existing = Path(path).absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"--bench-report-dir {shown} cannot be created: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"--bench-report-dir {shown} cannot be created: {existing} is not writable")


PROBE_NAME = ".agentbench-write-probe"


def probe_report_dir(path: Path, shown: Path) -> None:
    """ConfigError unless a file can be created, written, fsynced and removed in the run folder ``path``; the
    folders made for the probe are removed again (the run folder appears with the first record)."""
    target = Path(path).absolute()
    missing = []
    folder = target
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    made: list[Path] = []
    try:
        for folder in reversed(missing):
            folder.mkdir()
            made.append(folder)
        write_probe(target / f"{PROBE_NAME}-{os.getpid()}")
    except OSError as exc:
        raise ConfigError(
            f"--bench-report-dir {shown} cannot be written: {exc.strerror or exc} "
            f"({exc.filename or target}); choose a folder you can write to"
        ) from None
    finally:
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass  # something else appeared in it meanwhile: leave it


def write_probe(file: Path) -> None:
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"agentbench")
        os.fsync(fd)
    finally:
        os.close(fd)
    file.unlink()


def sandbox_self_test(opts: Settings, state: BenchState) -> None:
    """ConfigError when this interpreter cannot run in the sandbox with the run's hidden folders (what is hidden
    and how to fix it); when it can, the run's isolation line says so. Nothing to test without isolation."""
    take_self_test(self_test_outcome(opts), state)


def self_test_outcome(opts: Settings) -> SelfTest | None:
    """The sandbox self-test with the run's hidden folders (None: children are not isolated here)."""
    from ..sandbox.selftest import run_self_test  # why: only the controller (or a Slurm node) runs it

    return run_self_test(hidden=private_folders(opts))


def take_self_test(outcome: SelfTest | None, state: BenchState) -> None:
    """ConfigError for a failed self-test; a passed one goes into the run's isolation line (or its notes)."""
    if outcome is None:
        return
    if not outcome.ok:
        raise ConfigError(outcome.describe())
    line = str(state.settings.get("isolation") or "")
    if line.startswith("bwrap"):  # the line of the sandbox tested
        state.settings["isolation"] = f"{line}; sandbox {outcome.describe()}"
    else:  # the line says how the agent is kept apart (a container): the scoring sandbox's test is a note
        state.notes.append(f"sandbox {outcome.describe()}")


class WaitingChecks:
    """The checks of a run that wait on other processes: the sandbox self-test (a sandboxed interpreter) and the
    model preflight (requests to the endpoint), each on a thread of its own. The self-test starts at once; the
    preflight only once the benchmark's own checks passed (``start_preflight``: a missing capsule costs no model
    call). ``settle`` waits for both and takes what they found as if they had run one after the other: the
    self-test's error first, then the preflight's; the self-test's note, then the preflight's."""

    def __init__(self, opts: Settings, state: BenchState) -> None:
        self.state = state
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="agentbench-check")
        self.self_test = self.pool.submit(self_test_outcome, opts)
        self.preflight: Future[str | None] | None = None

    def start_preflight(self, config: pytest.Config, opts: Settings) -> None:
        call = preflight_call(config, opts, self.state)
        if call is not None:
            self.preflight = self.pool.submit(call)

    def settle(self) -> None:
        """Waits for both; ConfigError as the first of them that failed says."""
        try:
            take_self_test(self.self_test.result(), self.state)
            note = self.preflight.result() if self.preflight is not None else None
        finally:
            self.pool.shutdown(wait=True)
        if note:
            self.state.notes.append(note)


# An xdist controller's waiting checks, settled while its workers start: before the header and before any item.
WAITING = pytest.StashKey[list[WaitingChecks]]()
FAILED = pytest.StashKey[ConfigError]()  # what one of them found, kept for the hook that stops the session


def settle_waiting(config: pytest.Config) -> ConfigError | None:
    """Waits for the controller's waiting checks (``WAITING``) and gives the first error they found (again at
    each call)."""
    for checks in config.stash.get(WAITING, []):
        try:
            checks.settle()
        except ConfigError as exc:
            config.stash.setdefault(FAILED, exc)
    config.stash[WAITING] = []
    return config.stash.get(FAILED, None)


def before_items(config: pytest.Config, opts: Settings, state: BenchState) -> None:
    """The controller's checks and notes before any item runs (ConfigError: the plugin shows a usage error)."""
    if opts.resume and opts.resume_merge:
        rewrite_definition(state.run_dir, config)  # the run's settings.json names the merged selection
    legacy = legacy_cache_note(opts.cache_dir, opts.origin("cache_dir"), Path(config.rootpath))
    if legacy:
        state.notes.append(legacy)
    if opts.replay:
        state.notes.append(f"replaying {opts.replay}: its settings and selection, cached model responses only")
    if opts.significance:  # a test that can never reject is no gate
        from ..report.compare import too_small  # why: only this check needs the comparison module

        units = {"item": sum(len(t.samples) for t in state.tasks), "task": len(state.tasks)}
        state.notes += [
            f"--bench-set significance {opts.significance:g}: {w}" for w in too_small(units, opts.significance)
        ]
    if not config.option.collectonly:
        check_report_dir(state.run_dir, opts.report_dir)
        probe_report_dir(state.run_dir, opts.report_dir)
        if nothing_left(state):  # a finished run resumed: its records are reported again, nothing runs
            return
        # A hidden interpreter would fail every item, and so would a dead endpoint or a refused key: both are known
        # before any item. They wait on other processes, so they run while the rest goes on: on an xdist
        # controller while its workers start (settled before the header and before any item, session.py).
        waiting = WaitingChecks(opts, state)
        try:
            early_selection_checks(config, state)  # a missing capsule or image costs no model call either
            waiting.start_preflight(config, opts)
        except ConfigError:
            waiting.settle()  # the self-test's error first, as when it ran first
            raise
        if role_of(config) is Role.CONTROLLER:
            config.stash.setdefault(WAITING, []).append(waiting)
        else:
            waiting.settle()


def narrowed(config: pytest.Config) -> bool:
    """Whether pytest narrows the benchmark's selection after collection (-k, -m, --deselect, --lf, node ids):
    only then is the selection unknown at configure time."""
    args = [str(a) for a in (config.args or ())]
    return bool(
        config.getoption("keyword", "")
        or config.getoption("markexpr", "")
        or config.getoption("deselect", None)
        or config.getoption("lf", False)
        or any("::" in a for a in args)
    )


def checks_apply(config: pytest.Config, state: BenchState) -> bool:
    """The benchmark's checks of the selection run here: not when listing items, nor when items run on other hosts
    or Slurm nodes, which have their own data and engines."""
    from .distribution.remote import remote_specs  # why: it imports this module's neighbours; only this check needs it

    return not (config.option.collectonly or state.options["backend"] == "slurm" or remote_specs(config))


def benchmark_checks(config: pytest.Config, state: BenchState, samples: list[Any]) -> None:
    """The benchmark's own checks of ``samples`` (``Benchmark.check_selection``): ConfigError when something every
    item needs is missing (CORE-Bench: a capsule, the agent's image)."""
    opts = state.options
    env = None if fixture_overridden(config, "bench_env") else build_env(opts, state.benchmark.default_env(opts))
    state.notes += state.benchmark.check_selection(opts, state.settings, samples, env)
    state.selection_checked = True


def early_selection_checks(config: pytest.Config, state: BenchState) -> None:
    """The benchmark's checks at configure time, before the model preflight, when the selection is already known
    (--bench-ids; no -k, -m, --deselect or node ids narrow it later): a missing capsule is a usage error that
    called no model (ConfigError)."""
    if narrowed(config) or not checks_apply(config, state):
        return
    benchmark_checks(config, state, [s for task in state.tasks for s in task.samples])


def selection_checks(config: pytest.Config, state: BenchState, samples: list[Any], collected_here: bool) -> None:
    """The benchmark's own checks of the selection pytest kept, before any item runs, unless they ran at configure
    time already: exit 4 with its message when something every item needs is missing. ``collected_here``: this
    process collected (no xdist), so the usage error is pytest's own (``ERROR: agentbench: ...``); a controller
    that learnt the selection from a worker's collection stops the session instead."""
    if state.selection_checked or not checks_apply(config, state):
        return
    try:
        benchmark_checks(config, state, samples)
    except ConfigError as exc:
        if collected_here:
            raise pytest.UsageError(f"agentbench: {exc}") from None
        pytest.exit(f"agentbench: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


def node_checks(opts: Settings, state: BenchState) -> None:
    """A task run on a Slurm node (``run-task``): model code runs there only in bubblewrap sandboxes, so a node
    without unprivileged user namespaces (or bwrap) is a clear error before the task starts, and the sandbox
    self-test runs on the node itself (ConfigError; the job ends without a package and its task is lost)."""
    if opts["backend"] != "slurm":
        return
    node = os.environ.get("SLURMD_NODENAME") or hostname()
    try:
        isolation_from(opts.with_values(require_isolation=True))
        sandbox_self_test(opts, state)
    except ConfigError as exc:
        raise ConfigError(
            f"on Slurm node {node}: {exc}. With --bench-backend=slurm model code runs only in "
            f"bubblewrap sandboxes: install bubblewrap and allow unprivileged user namespaces on "
            f"the nodes, or leave this node out (--bench-set=slurm_args='--exclude={node}'); see "
            f"docs/distributed.md"
        ) from None
