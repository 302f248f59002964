"""The fixtures of pytest runs (loaded by tests/conftest.py through ``pytest_plugins``): ``shared_data``,
``shared_cache``, ``cache_dir``, ``machine_secret`` and ``bench`` (run pytest as a user does), ``pytester``
made safe for in-process runs (``in_process_imports``), no real retry waits (``no_retry_waits``; a test of
the waits asks for ``real_retry_waits``), and the runs every test of the session shares, read-only
(``tiny_run``: the tiny dataset; ``validation_oracle_run``: SciCode's validation split with the oracle)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.bench_runs import SHARED_DATA, checkout_python_path, read_jsonl
from helpers.scicode_builders import MODEL_CONFTEST, custom_data_args, write_dataset


@pytest.fixture(scope="session")
def in_process_imports() -> None:
    """Import, once and before the first in-process pytester run, what such runs load and must not load anew.

    A pytester run, and the test around it, unload every module imported while they lasted. NumPy's and h5py's
    C parts cannot be imported a second time into one process, and the SDK's exception classes must stay the
    same objects across runs. Done on first use rather than at collection, so listing the tests stays fast."""
    import h5py  # noqa: F401
    import matplotlib  # noqa: F401
    import matplotlib.figure  # noqa: F401  (the run's picture; drawn in-process by pytester runs)
    import numpy  # noqa: F401
    import openai
    import scipy.stats  # noqa: F401
    from matplotlib.backends import backend_agg  # noqa: F401

    # The SDK's HTTP transport imports its connection library on the first client. Were that inside an in-process
    # pytester run, pytester would unload it afterwards, and later connection errors would escape their handlers.
    openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1").close()

    # The benchmark run's plugin and the benchmarks' runtimes load only in a session that asks for a benchmark;
    # the registry keeps each benchmark object (with its caches) for the process, so their classes must outlive
    # one pytester run as the benchmark objects do.
    import pytest_agentbench.benchmarks.corebench.run  # noqa: F401
    import pytest_agentbench.benchmarks.scicode.run  # noqa: F401
    import pytest_agentbench.pytest_plugin.session  # noqa: F401
    from pytest_agentbench.benchmarks.registry import available_benchmarks

    available_benchmarks()


@pytest.fixture
def pytester(in_process_imports: None, pytester: pytest.Pytester) -> pytest.Pytester:
    """pytest's own ``pytester``, with ``in_process_imports`` done before it first snapshots the modules."""
    return pytester


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "scicode" / "problems_dev.jsonl").is_file():
        pytest.fail(f"the upstream data files are not at {SHARED_DATA}; set AGENTBENCH_DATA_DIR")
    return SHARED_DATA


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every process of this test session shares: under xdist each worker has its own basetemp below
    the session's, whose parent it is; without xdist the basetemp itself (its parent holds other sessions')."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One cache folder for every pytester run, so rebuilt targets are built once per test session.

    Under xdist every worker has its own basetemp below a common root; the cache goes in that root
    (the plugin builds each problem's targets under a file lock, so workers can share it)."""
    path = session_root(tmp_path_factory) / "agentbench-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def cache_dir(tmp_path, shared_cache) -> Path:
    """A response cache of the test's own, sharing the session's rebuilt targets (minutes to build)."""
    path = tmp_path / "cache"
    path.mkdir()
    (shared_cache / "scicode").mkdir(exist_ok=True)
    (path / "scicode").symlink_to(shared_cache / "scicode")
    return path


@pytest.fixture(scope="session", autouse=True)
def machine_secret(tmp_path_factory) -> Path:
    """One machine secret (core.data) for the whole test session: pytester gives every run its own HOME,
    and stamps/rebuilt targets in the shared cache are signed with the secret, so it must not move."""
    path = session_root(tmp_path_factory) / "agentbench-secret"
    os.environ.setdefault("AGENTBENCH_SECRET_FILE", str(path))
    return Path(os.environ["AGENTBENCH_SECRET_FILE"])


@pytest.fixture(scope="session", autouse=True)
def no_retry_waits() -> None:
    """Every retry of the session, in this process and in every pytest run it starts (in-process or not), goes
    out at once: the model client's backoff and a server's Retry-After, the pause between an item's tries and a
    download's backoff are computed and budgeted as usual but not slept (core/retrywait.py). A test of the waits
    themselves sets ``AGENTBENCH_RETRY_WAIT_SCALE=1`` for itself (``real_retry_waits``)."""
    os.environ["AGENTBENCH_RETRY_WAIT_SCALE"] = "0"


@pytest.fixture
def real_retry_waits(monkeypatch) -> None:
    """This test's retries wait as a user's do (a test of the wait itself)."""
    monkeypatch.setenv("AGENTBENCH_RETRY_WAIT_SCALE", "1")


@pytest.fixture
def bench(pytester: pytest.Pytester, shared_data: Path, shared_cache: Path, monkeypatch):
    """Run pytest the way a user does, offline, with the staged data and a shared cache."""
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(shared_data))
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    pytester.makeini("[pytest]\n")  # the rootdir is the test's folder, so its conftest.py applies

    def run(*args: str, subprocess: bool = False) -> pytest.RunResult:
        full = ["-p", "no:cacheprovider", f"--bench-cache-dir={shared_cache}", *args]
        if subprocess:
            return pytester.runpytest_subprocess(*full, timeout=1800)
        return pytester.runpytest(*full)

    return run


# ---- the runs the whole test session shares -------------------------------------------------------------------
OUTCOME = "outcome.json"  # written last, beside the run's project folder: the run is over and this is how it ended
SHARED_RUN_ID = "shared"


@dataclass(frozen=True)
class SharedRun:
    """A finished pytest run of a benchmark that every test of the session reads and none changes.

    ``project``: the folder pytest ran in; ``path``: the run folder (records, summary.json, summary.md,
    report.html); ``returncode``, ``stdout``, ``stderr``: how the run ended and what it printed. A test that must
    change the folder (resume it, add files) works on ``copy_to(dest)``."""

    project: Path
    path: Path
    returncode: int
    stdout: str
    stderr: str

    @property
    def records(self) -> list[dict]:
        name = "steps.jsonl" if (self.path / "steps.jsonl").is_file() else "records.jsonl"
        return read_jsonl(self.path / name)

    @property
    def summary(self) -> dict:
        return json.loads((self.path / "summary.json").read_text())

    def copy_to(self, dest: Path) -> Path:
        """A copy of the run folder at ``dest`` (created), for a test that changes it."""
        shutil.copytree(self.path, dest, symlinks=True)
        return dest

    def tail(self) -> str:
        return self.stdout[-3000:] + self.stderr[-2000:]


def folder_digest(folder: Path) -> str:
    """A digest of every path, mode and content under ``folder``: equal while nobody changed it."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(f"{path.relative_to(folder)}\0{path.lstat().st_mode}\0".encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def run_once_per_session(
    tmp_path_factory: pytest.TempPathFactory, name: str, start: Callable[[Path], subprocess.CompletedProcess]
) -> SharedRun:
    """``start(project)`` once for the whole test session, whichever process asks first; the others wait for it.

    pytest-xdist's documented pattern: the folder sits below every worker's basetemp (``session_root``) and an
    exclusive lock on a file there makes the first worker run it while the others block, then read its outcome.
    (fcntl, as filelock is not a dependency.)"""
    root = session_root(tmp_path_factory) / name
    root.mkdir(exist_ok=True)
    project, outcome = root / "project", root / OUTCOME
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not outcome.is_file():
            shutil.rmtree(project, ignore_errors=True)  # a process that died while running it left this
            project.mkdir()
            done = start(project)
            ended = {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
            outcome.write_text(json.dumps(ended))
    ended = json.loads(outcome.read_text())
    run_dir = next(iter(sorted(project.glob(f"reports/*/*/{SHARED_RUN_ID}"))), project / "reports")
    return SharedRun(project=project, path=run_dir, **ended)


def user_pytest_command(project: Path, shared_cache: Path, *args: str, **env: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of pytest run as a user runs it in ``project`` (offline, the staged data,
    the session's cache of rebuilt targets), in a fresh interpreter; the project gets its pytest.ini and HOME."""
    (project / "pytest.ini").write_text("[pytest]\n")  # the rootdir is the project, so its conftest.py applies
    home = project / "home"
    home.mkdir()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OPENAI_"))}
    environ.update(
        HOME=str(home),
        PYTHONPATH=checkout_python_path(),
        AGENTBENCH_DATA_DIR=str(SHARED_DATA),
        AGENTBENCH_OFFLINE="1",
        **env,
    )
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--bench-cache-dir={shared_cache}", *args]
    return argv, environ


def start_pytest(project: Path, shared_cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """pytest run as a user runs it (``user_pytest_command``): what ``bench(..., subprocess=True)`` does, without a
    pytester folder."""
    argv, environ = user_pytest_command(project, shared_cache, *args, **env)
    return subprocess.run(argv, cwd=project, env=environ, capture_output=True, text=True, timeout=1800)


# Runs a command, then writes how it ended to the outcome file given (whole, by a rename); it holds the shared
# run's lock (its inherited descriptor) until then. It first leaves the starting worker's process tree (the
# worker waits only for the first fork), so that tests which count that worker's descendants do not see the run.
RECORD_OUTCOME = """
import json, os, subprocess, sys
if os.fork():
    os._exit(0)
outcome, argv = sys.argv[1], json.loads(sys.argv[2])
done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
with open(outcome + ".part", "w") as out:
    json.dump({"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}, out)
os.replace(outcome + ".part", outcome)
"""


def start_early(tmp_path_factory: pytest.TempPathFactory, name: str, command: Callable[[Path], tuple]) -> None:
    """Start the shared run ``name`` in the background, unless a process of this session has started it: the
    background process holds the run's lock until its outcome is written, so ``run_once_per_session`` waits for
    it (or, if it died without an outcome, runs it again) instead of starting it when its first test asks."""
    root = session_root(tmp_path_factory) / name
    root.mkdir(exist_ok=True)
    with open(root / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # under way
        if (root / OUTCOME).is_file() or (root / "started").exists():
            return
        (root / "started").touch()
        project = root / "project"
        shutil.rmtree(project, ignore_errors=True)
        project.mkdir()
        argv, environ = command(project)
        subprocess.run(
            [sys.executable, "-c", RECORD_OUTCOME, str(root / OUTCOME), json.dumps(argv)],
            cwd=project,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(lock.fileno(),),
            start_new_session=True,
            check=True,
            timeout=60,
        )


def unchanged(run: SharedRun) -> Iterator[SharedRun]:
    """Give ``run`` to a test, then fail it if the run's project folder is not as it was."""
    before = folder_digest(run.project)
    yield run
    assert folder_digest(run.project) == before, (
        f"a test changed the shared run in {run.project}: it is read-only; work on a copy (SharedRun.copy_to)"
    )


TINY_BROKEN = "2.2"  # the step the shared tiny run's model answers wrongly: problem 2 is not resolved


@pytest.fixture(scope="session")
def shared_tiny_run(tmp_path_factory, shared_cache, machine_secret, no_retry_waits) -> SharedRun:
    """The tiny dataset (3 problems, 5 steps) run once for the session as ``tiny(broken="2.2")`` runs it (its
    mutant model answers 2.2 wrongly): 4 passed, 1 failed, exit code 1."""

    def start(project: Path) -> subprocess.CompletedProcess:
        (project / "conftest.py").write_text(MODEL_CONFTEST)
        data, h5 = write_dataset(project, SHARED_DATA)
        args = custom_data_args(data, h5, "--bench-timeout=20", f"--bench-run-id={SHARED_RUN_ID}")
        return start_pytest(project, shared_cache, *args, BREAK_STEPS=TINY_BROKEN, ERROR_STEPS="")

    run = run_once_per_session(tmp_path_factory, "agentbench-tiny-run", start)
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, run.tail()
    return run


@pytest.fixture
def tiny_run(shared_tiny_run: SharedRun) -> Iterator[SharedRun]:
    """The session's one run of the tiny dataset (``shared_tiny_run``), read-only: the test fails if it changed it."""
    yield from unchanged(shared_tiny_run)


VALIDATION_RUN = "agentbench-validation-oracle-run"
VALIDATION_ARGS = ("--bench=scicode", "--bench-split=validation", "--model=oracle", f"--bench-run-id={SHARED_RUN_ID}")


@pytest.fixture(scope="session", autouse=True)
def validation_oracle_run_started_early(request, tmp_path_factory, shared_cache, machine_secret, no_retry_waits):
    """When a selected test needs the session's run of the validation split, it starts in the background as the
    first worker starts (minutes of scoring, with idle time in other tests to fill), not when that test asks:
    a worker that asks while another runs it no longer waits idle for all of it."""
    if any("shared_validation_oracle_run" in getattr(item, "fixturenames", ()) for item in request.session.items):
        start_early(
            tmp_path_factory,
            VALIDATION_RUN,
            lambda project: user_pytest_command(project, shared_cache, *VALIDATION_ARGS),
        )


@pytest.fixture(scope="session")
def shared_validation_oracle_run(tmp_path_factory, shared_cache, machine_secret, no_retry_waits) -> SharedRun:
    """SciCode's whole validation split (15 problems, 50 steps) with the oracle, one process, default options,
    once for the whole test session (minutes, started early in the background; a worker that asks for it before
    it ends waits): every step passes."""

    def start(project: Path) -> subprocess.CompletedProcess:
        return start_pytest(project, shared_cache, *VALIDATION_ARGS)

    run = run_once_per_session(tmp_path_factory, VALIDATION_RUN, start)
    assert run.returncode == 0, run.tail()
    return run


@pytest.fixture
def validation_oracle_run(shared_validation_oracle_run: SharedRun) -> Iterator[SharedRun]:
    """The session's one run of the validation split with the oracle, read-only (a test using it is ``slow``)."""
    yield from unchanged(shared_validation_oracle_run)


@pytest.fixture(scope="session")
def help_of_pytest(tmp_path_factory) -> str:
    """``pytest --help`` as a user runs it (the plugin loads through its entry point, 100 columns), once for the
    whole test session: every xdist worker reads the same output."""

    def start(project: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "--help"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "COLUMNS": "100"},
        )

    shown = run_once_per_session(tmp_path_factory, "agentbench-pytest-help", start)
    assert shown.returncode == 0, shown.tail()
    return shown.stdout
