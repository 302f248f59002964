"""The fixtures of pytest runs (loaded by tests/conftest.py through ``pytest_plugins``): ``shared_data``,
``shared_cache``, ``cache_dir``, ``machine_secret`` and ``bench`` (run pytest as a user does), ``pytester``
made safe for in-process runs (``in_process_imports``), and no real retry waits (``no_retry_waits``; a test of
the waits asks for ``real_retry_waits``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.bench_runs import SHARED_DATA


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


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One cache folder for every pytester run, so rebuilt targets are built once per test session.

    Under xdist every worker has its own basetemp below a common root; the cache goes in that root
    (the plugin builds each problem's targets under a file lock, so workers can share it)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = root / "agentbench-cache"
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
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = root / "agentbench-secret"
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
