"""Shared fixtures of the project's own tests.

Helpers live in modules the tests import by name (bench_runs.py, scicode_builders.py, fake_openai.py,
capsule_factory.py); the fixtures every module may use are here: ``shared_data``, ``shared_cache``, ``cache_dir``,
``bench`` (run pytest as a user does) and ``tiny`` (the tiny hand-made SciCode dataset, see
scicode_builders.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import h5py  # noqa: F401  imported once here: in-process pytester runs must not import h5py a second time
import matplotlib  # noqa: F401
import matplotlib.figure  # noqa: F401  (the run's picture; drawn in-process by pytester runs)
import numpy  # noqa: F401
import openai  # noqa: F401  (same reason: exception classes must stay the same objects across runs)
import pytest
import scipy.stats  # noqa: F401
from matplotlib.backends import backend_agg  # noqa: F401

from bench_runs import SHARED_DATA

# The one toy benchmark, tests/toybench, is importable as `toybench` (test_gates.py and test_compare.py declare
# their gates on it; test_architecture.py installs it as a distribution and runs it through its entry point).
sys.path.insert(0, str(Path(__file__).resolve().parent / "toybench"))

# The SDK's HTTP transport imports its connection library on the first client. Were that inside an in-process
# pytester run, pytester would unload it afterwards, and later connection errors would escape their handlers.
openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1").close()
from scicode_builders import tiny  # noqa: E402, F401  (a fixture for every module; after the set-up above)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules run in the order of their share of slow tests, highest first, each module kept whole (its module
    fixtures set up once) and the order otherwise unchanged. Under -n 2 the long end-to-end runs then start early
    and the short tests fill in around them, instead of the suite ending on one worker busy with a long run while
    the other waits."""
    counts: dict[Path, list[int]] = {}
    for item in items:
        slow, total = counts.setdefault(item.path, [0, 0])
        counts[item.path] = [slow + bool(item.get_closest_marker("slow")), total + 1]
    items.sort(key=lambda item: -counts[item.path][0] / counts[item.path][1])


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
