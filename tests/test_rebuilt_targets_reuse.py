"""A user's second run trusts the targets the first one rebuilt: no problem's ground truth runs again.

The runs are pytest processes started as a user starts them: no ``AGENTBENCH_*`` variable (so no
``$AGENTBENCH_SECRET_FILE``, which every other test sets), default cache folder under the test's
``XDG_CACHE_HOME``, the README's oracle command on one cheap validation problem. Whether a step's targets
were rebuilt or came from the cache is its record's ``targets_source``. The key that signs the cache's
entries lives in the cache folder, so a run in a fresh home that finds the same cache (a CI job restoring
it) trusts them too.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.bench_runs import SHARED_DATA, checkout_python_path, read_jsonl, run_dirs

pytestmark = pytest.mark.e2e


def user_run(project: Path, home: Path, xdg_cache: Path, *args: str) -> subprocess.CompletedProcess:
    """The README's oracle run on problem 1, started in ``project`` with nothing of the test run's settings."""
    project.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTBENCH_", "PYTEST_", "XDG_", "OPENAI_"))}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(xdg_cache), PYTHONPATH=checkout_python_path())
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--bench=scicode",
            "--bench-split=validation",
            "--model=oracle",
            "--bench-ids=1",
            f"--bench-data-dir={SHARED_DATA}",
            *args,
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def targets_sources(project: Path) -> list[list[str]]:
    """Each run's (oldest first) steps' ``targets_source``."""
    runs = sorted(run_dirs(project), key=lambda run: run.name)
    return [[r["targets_source"] for r in read_jsonl(run / "steps.jsonl")] for run in runs]


@pytest.mark.slow  # two whole user runs, over 10 s
def test_the_second_run_of_a_user_rebuilds_nothing(tmp_path):
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    for _ in range(2):
        done = user_run(tmp_path / "project", home, xdg)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert targets_sources(tmp_path / "project") == [["rebuilt"], ["cached"]]
    key = xdg / "pytest-agentbench" / "secret"
    assert key.is_file() and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert not (home / ".local" / "state" / "pytest-agentbench").exists()


@pytest.mark.slow
def test_a_run_in_a_fresh_home_trusts_the_cache_it_is_given(tmp_path):
    """A CI job restores the cache folder of an earlier job in a home of its own: its targets are still
    trusted (with the key kept in the home, they were rebuilt every time)."""
    xdg = tmp_path / "xdg"
    first = user_run(tmp_path / "project", tmp_path / "job-1", xdg)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = user_run(tmp_path / "project", tmp_path / "job-2", xdg)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert targets_sources(tmp_path / "project") == [["rebuilt"], ["cached"]]
