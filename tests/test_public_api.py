"""The package's pytest-free API: what ``import pytest_agentbench`` offers, that importing it costs nothing
until a name is used, and that docs/python-api.md's examples run and print what the page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_agentbench

from helpers.bench_runs import REPO, SHARED_DATA

PAGE = REPO / "docs" / "python-api.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTBENCH_DATA_DIR": str(SHARED_DATA), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_public_names_are_the_documented_ones():
    documented = set(re.findall(r"^\| `(\w+)", PAGE.read_text(encoding="utf-8"), re.MULTILINE))
    assert documented == set(pytest_agentbench.__all__)
    for name in pytest_agentbench.__all__:
        assert getattr(pytest_agentbench, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'score_step'"):
        pytest_agentbench.score_step  # noqa: B018 - the attribute read is what is tested


def test_importing_the_package_loads_no_benchmark_and_no_scientific_stack(tmp_path):
    probe = "import sys, pytest_agentbench; print(sorted(m for m in sys.modules if m.split('.')[0] in "
    probe += "('numpy', 'scipy', 'h5py', 'pytest', 'openai') or m.startswith('pytest_agentbench.')))"
    proc = run_python(probe, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# the SciCode example rebuilds a problem's targets in sandboxed children (about 25 s on 2 cores)
@pytest.mark.parametrize("number", [pytest.param(0, marks=pytest.mark.slow), 1])
def test_the_pages_examples_print_what_it_says(tmp_path, number):
    code, printed = blocks("python")[number], blocks("text")[number]
    proc = run_python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [line.rstrip() for line in proc.stdout.rstrip().splitlines()] == printed.rstrip().splitlines()
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran: the cache was the one asked for
