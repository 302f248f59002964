"""A run killed with SIGKILL mid-way, then resumed, ends with the summary of an uninterrupted run;
and the resume functions on their own: the run folder, the settings check, the records each process reuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.report.resume import (
    SETTINGS_FILE,
    check_settings,
    load_for_controller,
    resume_controller,
    write_settings_once,
)

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.scicode_builders import MODEL_CONFTEST, custom_data_args, tiny_problems, write_dataset

BLOCKING_SIX = (
    "def six():\n    import os, time\n    while os.path.exists({flag!r}):\n        time.sleep(0.05)\n    return 6"
)


def summary_of(run) -> tuple[dict, dict]:
    summary = json.loads((run / "summary.json").read_text())
    return summary["metrics"], {i["id"]: i["status"] for i in summary["items"]}


@pytest.mark.e2e
@pytest.mark.slow
def test_killed_run_resumed_matches_an_uninterrupted_run(pytester, bench, shared_data, shared_cache, monkeypatch):
    # Outside /tmp: an isolated scoring child has a private /tmp but sees the rest of the file system.
    flag = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="agentbench-test-")) / "block-step-3.1"
    flag.write_text("")
    data, h5 = write_dataset(
        pytester.path, shared_data, problems=tiny_problems(**{"3.1": BLOCKING_SIX.format(flag=str(flag))})
    )
    pytester.makeconftest(MODEL_CONFTEST)
    args = custom_data_args(data, h5, "--bench-timeout=60")
    monkeypatch.setenv("BREAK_STEPS", "2.2")
    # The blocking step waits on a file of this machine: its scoring child must see the real file system.
    monkeypatch.setenv("AGENTBENCH_ISOLATION", "off")
    env = {**os.environ, "BREAK_STEPS": "2.2", "AGENTBENCH_ISOLATION": "off"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            f"--bench-cache-dir={shared_cache}",
            *args,
            "--bench-run-id=killed",
        ],
        cwd=pytester.path,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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
    flag.parent.rmdir()

    resumed = bench(*args, f"--bench-resume={records.parent}", "-n", "2", "-rA")
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


@pytest.mark.e2e
def test_resume_refuses_other_settings(tiny, pytester):
    first = tiny("--bench-run-id=one", broken="2.2")
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    [run] = run_dirs(pytester.path)
    other = tiny(f"--bench-resume={run}", "--no-bench-background")
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    assert "settings differ from the interrupted run's: background: true vs false" in other.stderr.str()


# ---- the resume functions, without pytest ----------------------------------------------------------
def record(item_id: str, status: str = "pass") -> dict:
    return {"id": item_id, "task": item_id.split(".")[0], "status": status}


def test_settings_are_checked_against_the_first_records_settings(tmp_path):
    settings = {"benchmark": "toy", "model": "m", "mode": "a", "run_id": "r1", "temperature": 0}
    check_settings(tmp_path, {**settings, "mode": "b"})  # no settings.json yet: killed before the first record
    write_settings_once(tmp_path, settings)
    write_settings_once(tmp_path, {**settings, "mode": "changed"})  # written once
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())["mode"] == "a"
    check_settings(tmp_path, {**settings, "run_id": "r2"})  # a free setting
    check_settings(tmp_path, {**settings, "temperature": 1}, free={"temperature"})  # the benchmark's free setting
    with pytest.raises(ConfigError) as error:
        check_settings(tmp_path, {**settings, "model": "other", "mode": "b"})
    assert str(error.value) == (
        f"--bench-resume {tmp_path}: this run's settings differ from the interrupted run's: "
        f"model: m vs other; mode: a vs b; resume with the run's own options, or start a new run "
        "(leave out --bench-resume) to use these: the run's finished records were made with its own"
    )


def test_controller_drops_a_torn_line(tmp_path):
    records = tmp_path / "records.jsonl"
    records.write_text(
        json.dumps(record("1.1"))
        + "\n"
        + json.dumps(record("1.2", "fail"))
        + "\n"
        + json.dumps(record("1.1", "fail"))
        + "\n"
        + '{"id": "2.1", "sta'
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the note is the plugin's own line: no warning besides it
        resumed = load_for_controller(records)
    assert any(note.startswith("dropped torn last line 4 of") for note in resumed.notes), resumed.notes
    assert {k: r["status"] for k, r in resumed.records.items()} == {"1.1": "fail", "1.2": "fail"}  # the last wins
    assert resumed.notes[0] == f"resuming {tmp_path}: 2 finished record(s) reused, the rest runs now"
    assert records.read_text().endswith("}\n")  # the torn line is cut off the file, so appends stay whole
    assert [json.loads(line)["id"] for line in records.read_text().splitlines()] == ["1.1", "1.2", "1.1"]


def test_resume_controller_checks_settings_before_reading(tmp_path):
    write_settings_once(tmp_path, {"model": "m", "mode": "a"})
    with pytest.raises(ConfigError, match="mode: a vs b"):
        resume_controller(tmp_path, tmp_path / "records.jsonl", {"model": "m", "mode": "b"})
    resumed = resume_controller(tmp_path, tmp_path / "records.jsonl", {"model": "m", "mode": "a"})
    assert resumed.records == {}
