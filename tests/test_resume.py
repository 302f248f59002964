"""A run killed with SIGKILL mid-way, then resumed, ends with the summary of an uninterrupted run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import scipy.stats  # noqa: F401  loaded before pytester's in-process runs, which cannot re-import numpy's C parts
from matplotlib.backends import backend_agg  # noqa: F401  (same reason)

from conftest import read_jsonl, run_dirs
from test_gates import MODEL_CONFTEST, PROBLEMS, tiny, write_dataset  # noqa: F401  (tiny is a fixture)

BLOCKING_SIX = "def six():\n    import os, time\n    while os.path.exists({flag!r}):\n        time.sleep(0.05)\n    return 6"


def summary_of(run) -> tuple[dict, dict]:
    summary = json.loads((run / "summary.json").read_text())
    return summary["metrics"], {i["id"]: i["status"] for i in summary["items"]}


def test_killed_run_resumed_matches_an_uninterrupted_run(pytester, bench, shared_cache, monkeypatch):
    flag = pytester.path / "block-step-3.1"
    flag.write_text("")
    PROBLEMS[2]["sub_steps"][0]["ground_truth_code"] = BLOCKING_SIX.format(flag=str(flag))
    try:
        data, h5 = write_dataset(pytester.path)
    finally:
        PROBLEMS[2]["sub_steps"][0]["ground_truth_code"] = "def six():\n    return 6"
    pytester.makeconftest(MODEL_CONFTEST)
    args = ["--bench=scicode", "--bench-split=validation", "--model=mutant", f"--bench-data-dir={data}",
            f"--bench-h5={h5}", "--bench-allow-custom-data", "--bench-timeout=60"]
    monkeypatch.setenv("BREAK_STEPS", "2.2")
    env = {**os.environ, "BREAK_STEPS": "2.2"}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--bench-cache-dir={shared_cache}",
                             *args, "--bench-run-id=killed"], cwd=pytester.path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = pytester.path / "reports" / "scicode" / "mutant" / "killed" / "steps.jsonl"
    deadline = time.monotonic() + 300  # generous: CI machines are loaded by the other tests
    while not (records.exists() and len(read_jsonl(records)) >= 4):  # 1.1 to 2.2 done; 3.1 blocks
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert sorted(r["id"] for r in read_jsonl(records)) == ["1.1", "1.2", "2.1", "2.2"]
    with open(records, "a") as fh:  # as if the kill had landed in the middle of a write
        fh.write('{"id": "3.1", "status": "pa')
    flag.unlink()

    resumed = bench(*args, "--bench-resume", str(records.parent), "-n", "2", "-rA")
    assert resumed.ret == pytest.ExitCode.TESTS_FAILED
    resumed.assert_outcomes(passed=4, failed=1)
    out = resumed.stdout.str()
    assert "resuming" in out and "4 finished record(s) reused" in out
    assert "dropped torn last line 5 of" in out
    lines = read_jsonl(records)  # every line whole, each item once
    assert sorted(r["id"] for r in lines) == ["1.1", "1.2", "2.1", "2.2", "3.1"]

    whole = bench(*args, "--bench-run-id=whole")
    assert whole.ret == pytest.ExitCode.TESTS_FAILED
    [killed_run] = [p for p in run_dirs(pytester.path) if p.name == "killed"]
    [whole_run] = [p for p in run_dirs(pytester.path) if p.name == "whole"]
    assert summary_of(killed_run) == summary_of(whole_run)
    assert summary_of(whole_run)[0]["main"] == pytest.approx(2 / 3)
    assert (killed_run / "summary.md").is_file() and (killed_run / "summary.png").is_file()


def test_resume_refuses_other_settings(tiny, pytester):
    first = tiny("--bench-run-id=one", broken="2.2")
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    [run] = run_dirs(pytester.path)
    other = tiny("--bench-resume", str(run), "--no-bench-background")
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    assert "settings differ from the interrupted run's: background: true vs false" in other.stderr.str()
