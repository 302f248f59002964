"""Every ``perf/`` script runs at a tiny size, so a script the docs quote figures from cannot rot unnoticed.

A smoke run of each script's code paths: it must exit 0 and print its figures' lines. No figure is asserted
(the sizes are far too small to mean anything, and the machine is shared); docs/performance.md's figures come
from the default sizes on an idle machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.bench_runs import REPO, SHARED_DATA, checkout_python_path
from helpers.capabilities import needs

PERF = REPO / "perf"


def run_script(name: str, *args: str, cwd: Path, timeout: float = 900) -> str:
    """The script's output; the test fails with it when the script exits non-zero."""
    env = {
        **os.environ,
        "AGENTBENCH_DATA_DIR": str(SHARED_DATA),
        "AGENTBENCH_OFFLINE": "1",
        "PYTHONPATH": checkout_python_path(),
    }
    done = subprocess.run(
        [sys.executable, str(PERF / name), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"perf/{name} {' '.join(args)} exited {done.returncode}:\n{output[-4000:]}"
    return output


def test_every_perf_script_has_a_smoke_run():
    smoked = {"collection_time.py", "docker_tool_calls.py", "model_concurrency.py", "scoring_speed.py"}
    smoked |= {"slurm_timing.py", "plugin_overhead.py", "first_request.py", "agent_startup.py"}
    assert {p.name for p in PERF.glob("*.py")} == smoked, "a new perf/ script needs a smoke run in this module"


@pytest.mark.slow
def test_scoring_speed_synthetic(tmp_path):
    output = run_script("scoring_speed.py", "--synthetic", "--count", "2", f"--work={tmp_path}", cwd=tmp_path)
    assert "fork server start-up" in output
    assert "2/2 passed" in output.split("fork:", 1)[1].splitlines()[0]
    assert "2/2 passed" in output.split("subprocess:", 1)[1].splitlines()[0]


@pytest.mark.slow
@pytest.mark.e2e
def test_scoring_speed_on_one_validation_problem(tmp_path):
    args = ("--ids=1", "--repeat=1", "--overlap-steps=1", "--overlap-seconds=0", f"--work={tmp_path}")
    output = run_script("scoring_speed.py", *args, cwd=tmp_path)
    assert "1/1 passed" in output.split("fork:", 1)[1].splitlines()[0]
    assert "collect-only:" in output
    assert "overlap: 1 steps" in output


@pytest.mark.slow
@pytest.mark.e2e
def test_scoring_speed_distributed(tmp_path):
    output = run_script(
        "scoring_speed.py", "--distributed=1", "--ids=1", "--repeat=1", f"--work={tmp_path}", cwd=tmp_path
    )
    assert "median ratio end-to-end / bound" in output


@pytest.mark.slow
@pytest.mark.e2e
def test_model_concurrency(tmp_path):
    args = ("--latency=0", "--ids=1", "--workers=0", "--connections=1", "--sample=1", f"--cache={tmp_path / 'cache'}")
    output = run_script("model_concurrency.py", *args, cwd=tmp_path)
    assert "| 0 | 1 |" in output


@pytest.mark.slow
@pytest.mark.e2e
def test_collection_time(tmp_path):
    output = run_script("collection_time.py", "--runs=1", "--imports=3", "--tests=tests/test_text.py", cwd=REPO)
    assert "collection over 1 runs" in output
    assert "slowest top-level imports" in output


@pytest.mark.slow
@pytest.mark.docker
def test_docker_tool_calls(tmp_path):
    image = needs("docker")
    output = run_script(
        "docker_tool_calls.py", f"--image={image}", "--calls=1", "--pause=0", "--rounds=1", cwd=tmp_path
    )
    assert "first call (cold)" in output
    assert output.count("overhead") == 2


@pytest.mark.slow
@pytest.mark.remote
def test_slurm_timing(tmp_path):
    needs("slurm")
    output = run_script("slurm_timing.py", "--ids=1", f"--work={tmp_path / 'work'}", cwd=tmp_path)
    assert "whole detached pytest command" in output
    assert "collect:" in output


@pytest.mark.slow
def test_plugin_overhead(tmp_path):
    output = run_script("plugin_overhead.py", "--pairs", "1", cwd=tmp_path)
    assert "agentbench: wall" in output and "heavy libraries:" in output


@pytest.mark.slow
@pytest.mark.e2e
def test_first_request(tmp_path):
    output = run_script("first_request.py", "--runs", "1", "--ids", "1", f"--cache={tmp_path / 'cache'}", cwd=tmp_path)
    assert "start to first model request, median of 1:" in output


@pytest.mark.slow
@pytest.mark.e2e
def test_agent_startup(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTBENCH_AGENTS_DIR", str(needs("codex")))
    output = run_script("agent_startup.py", "--runs=1", "--agents=builtin,codex", cwd=tmp_path)
    assert "builtin: agent start to first model request, median of 1:" in output
    assert "codex: agent start to first model request, median of 1:" in output
