"""The plugin inside someone else's pytest: without --bench (or a run file, or an ini key naming a benchmark) it
registers its options and does nothing else.

Each check runs pytest in a fresh interpreter over a project with one trivial test, as a user's CI does: what the
session imported (no benchmark, numpy, scipy, h5py, openai, yaml or docker), that a bad value of an option is not
even read, and that no marker of the plugin is added. The same sessions with --bench show that the checks can
fail: there the benchmark is loaded, the bad value refused and the benchmark's markers added.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

HEAVY = ("numpy", "scipy", "h5py", "openai", "yaml", "docker")
RUN_MODULES = (  # a benchmark's runtime and the benchmark run's plugin
    "pytest_agentbench.benchmarks.scicode.bench",
    "pytest_agentbench.benchmarks.corebench.bench",
    "pytest_agentbench.benchmarks.base",
    "pytest_agentbench.pytest_plugin.session",
)
OPTIONS_GROUP = "pytest_agentbench.options"

# pytest in this interpreter; prints the modules the session left in sys.modules as the last line
SESSION = textwrap.dedent(
    """
    import json, sys
    import pytest
    code = pytest.main(sys.argv[1:])
    print(json.dumps({"code": int(code), "modules": sorted(sys.modules)}))
    """
)


@pytest.fixture(scope="module", autouse=True)
def options_are_declared_by_entry_point():
    """The installed metadata must declare the benchmarks' options (pyproject.toml's pytest_agentbench.options
    group): an install from before it loads every benchmark to read its options."""
    declared = {ep.name for ep in entry_points(group=OPTIONS_GROUP)}
    assert {"scicode", "core-bench"} <= declared, (
        f"the installed pytest-agentbench declares no {OPTIONS_GROUP} entry points ({sorted(declared)}): "
        "reinstall it (pip install -e .) so its metadata has them"
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "test_x.py").write_text("def test_x():\n    assert True\n", encoding="utf-8")
    return tmp_path


def session(project: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, set[str], str]:
    """Run pytest over ``project``: its exit code, the modules it imported and its output."""
    environment = {**os.environ, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-c", SESSION, "-p", "no:cacheprovider", "-p", "no:randomly", *args],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    *printed, last = done.stdout.strip().splitlines() or [""]
    if not last.startswith("{"):  # pytest.main did not return (an error before the session)
        raise AssertionError(done.stdout + done.stderr)
    found = json.loads(last)
    return found["code"], set(found["modules"]), "\n".join(printed) + done.stderr


def test_a_session_without_bench_imports_no_benchmark_and_no_heavy_library(project):
    code, modules, out = session(project, "-q", "test_x.py")
    assert code == 0, out
    assert "pytest_agentbench.pytest_plugin" in modules  # the plugin was active: it registered its options
    assert not [m for m in modules if m.split(".")[0] in HEAVY], out
    assert not [m for m in modules if m in RUN_MODULES]


@pytest.mark.slow
def test_a_session_with_bench_loads_its_benchmark(project):
    """The other side of the check above: the same probe sees the benchmark and its runtime when one is asked."""
    code, modules, out = session(project, "-q", "--bench=scicode", "--collect-only", "--bench-split=validation")
    assert code == 0, out
    assert "pytest_agentbench.benchmarks.scicode.bench" in modules
    assert "pytest_agentbench.pytest_plugin.session" in modules


@pytest.mark.slow
def test_a_bad_option_value_is_not_read_without_bench(project):
    code, _, out = session(project, "-q", "test_x.py", env={"AGENTBENCH_BACKEND": "bogus"})
    assert code == 0, out
    assert "1 passed" in out


@pytest.mark.slow
def test_a_bad_option_value_is_refused_when_a_benchmark_is_asked_for(project):
    code, _, out = session(project, "-q", "--bench=scicode", "--collect-only", env={"AGENTBENCH_BACKEND": "bogus"})
    assert code == pytest.ExitCode.USAGE_ERROR, out
    assert "$AGENTBENCH_BACKEND 'bogus' is not a valid value" in out


@pytest.mark.slow
def test_an_ini_key_naming_a_benchmark_asks_for_it(project):
    (project / "pytest.ini").write_text("[pytest]\nagentbench_bench = scicode\n", encoding="utf-8")
    code, _, out = session(project, "-q", "--collect-only", env={"AGENTBENCH_BACKEND": "bogus"})
    assert code == pytest.ExitCode.USAGE_ERROR, out


@pytest.mark.slow
def test_the_plugin_adds_no_marker_without_bench(project):
    code, _, out = session(project, "--markers")
    assert code == 0, out
    assert "pytest-agentbench" not in out and "@pytest.mark.docker" not in out
    code, _, out = session(project, "--markers", "--bench=scicode", "--model=oracle", "--bench-split=validation")
    assert code == 0, out
    assert "@pytest.mark.scicode: a SciCode step (pytest-agentbench)" in out
