"""Partial runs say so: a run in which some selected items never ran (Ctrl-C, -x, a stop
after model errors) reports `incomplete: K of N items not run` in the terminal, summary.md, summary.json
and report.html, lists them, counts them as not passed in every metric, prints the command that resumes
it and fails its gates unless --bench-allow-incomplete.

The runs are real: a SIGINT to a pytest process after three records, pytest's -x, and
--bench-set max_consecutive_errors, on the tiny hand-made SciCode dataset (problems 1: 1.1 1.2, 2: 2.1 2.2,
3: 3.1) with a model that answers with the ground truth except the steps it is told to break.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.registry import get_benchmark
from pytest_agentbench.report.options import GateConfig
from pytest_agentbench.report.summary import build_summary, judge

from helpers.bench_runs import ctrl_c_as_a_terminal_gives_it, read_jsonl, run_dirs
from helpers.scicode_builders import MODEL_CONFTEST, custom_data_args, tiny_problems, write_dataset

BLOCKING_CUBE = (  # says it is being scored (the handshake), then waits until the flag is gone
    "def cube(a):\n    import os, time\n    if os.path.exists({flag!r}):\n"
    "        open({flag!r} + '.scoring', 'w').close()\n"
    "    while os.path.exists({flag!r}):\n        time.sleep(0.05)\n    return a * a * a"
)


def resume_line(out: str) -> str:
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "resume with:" in line)
    return lines[at + 1].strip()


def latest_run(pytester) -> Path:
    return max(run_dirs(pytester.path), key=lambda p: p.stat().st_mtime)


@pytest.mark.e2e
@pytest.mark.slow
def test_interrupted_run_says_incomplete_counts_the_rest_and_resumes(pytester, bench, shared_data, shared_cache):
    # Outside /tmp: the blocking step's scoring child (isolation off) waits on a file of this machine.
    flag = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="agentbench-test-")) / "block-step-2.2"
    flag.write_text("")
    data, h5 = write_dataset(
        pytester.path, shared_data, problems=tiny_problems(**{"2.2": BLOCKING_CUBE.format(flag=str(flag))})
    )
    pytester.makeconftest(MODEL_CONFTEST)
    args = [
        "-p",
        "no:cacheprovider",
        f"--bench-cache-dir={shared_cache}",
        *custom_data_args(data, h5),
        "--bench-timeout=120",
        "--bench-fail-under",
        "main=0%",
        "--bench-run-id=cut",
    ]
    env = {
        **os.environ,
        "AGENTBENCH_ISOLATION": "off",
        "AGENTBENCH_OFFLINE": "1",
        "AGENTBENCH_DATA_DIR": str(shared_data),
        "BREAK_STEPS": "",
        "ERROR_STEPS": "",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *args],
        cwd=pytester.path,
        env=env,
        start_new_session=True,
        preexec_fn=ctrl_c_as_a_terminal_gives_it,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run = pytester.path / "reports" / "scicode" / "mutant" / "cut"
    records = run / "steps.jsonl"
    try:
        deadline = time.monotonic() + 300  # generous: CI machines are loaded by the other tests
        scoring = flag.with_name(flag.name + ".scoring")
        while not (records.exists() and len(read_jsonl(records)) >= 3 and scoring.exists()):  # 2.2 is being scored
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be stopped"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGINT)  # Ctrl-C
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            flag.unlink()  # should the blocked child hold the session, release it
            out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        flag.unlink(missing_ok=True)
        flag.with_name(flag.name + ".scoring").unlink(missing_ok=True)
        flag.parent.rmdir()

    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out  # 2 is never rewritten
    assert sorted(r["id"] for r in read_jsonl(records)) == ["1.1", "1.2", "2.1"]  # `not run` is never written
    label = "incomplete: 2 of 5 items not run: 2.2, 3.1"
    assert label in out
    assert "FAIL incomplete: 2 of 5 items not run" in out  # the gate section
    # every metric over the whole selection: problem 2 (2.2 not run) and problem 3 (no record) are not resolved
    assert "main problems resolved 1/3 (33.3%), subproblems passed 3/5 (60.0%)" in out
    assert "3 pass, 2 not_run" in out

    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] is False
    assert summary["incomplete"]["not_run"] == 2 and summary["incomplete"]["selected"] == 5
    assert summary["incomplete"]["items"] == ["2.2", "3.1"]
    assert summary["metrics"]["main"] == pytest.approx(1 / 3)
    assert summary["metrics"]["subproblem"] == pytest.approx(3 / 5)
    assert summary["counts"] == {"pass": 3, "not_run": 2}
    assert summary["gates_passed"] is False and summary["exit_code"] == 2
    assert {"gate": "incomplete", "ok": False} == {k: v for k, v in summary["gates"][0].items() if k != "detail"}
    assert summary["run_counts"]["total"] == 3 and summary["run_counts"]["not_run"] == 2
    assert summary["run_counts"]["evaluated"] == 1

    markdown = (run / "summary.md").read_text()
    assert f"**{label}**" in markdown
    assert "| validation | 1/3 (33.3%) | 3/5 (60.0%) |" in markdown
    assert "| 2 | validation | no | 1/2 | 2.1:pass 2.2:not_run |" in markdown  # its two steps, not "yes 1/1"
    assert "| 3 | validation | no | 0/1 | 3.1:not_run |" in markdown
    page = (run / "report.html").read_text()
    assert "<b>incomplete: 2 of 5 items not run: 2.2, 3.1</b>" in page  # the terminal's words
    assert 'class="st st-not_run"' in page

    # the printed command, run as printed (the flag is gone: 2.2 finishes now), completes the run
    command = resume_line(out)
    assert command == summary["incomplete"]["resume"]
    assert command.endswith(f"--bench-resume={run}") and "--bench-run-id" not in command
    cd, words = command.split(" && ", 1)
    assert cd == f"cd {shlex.quote(str(pytester.path))}"
    assert shlex.split(words)[:3] == [sys.executable, "-m", "pytest"]
    resumed = subprocess.run(command, shell=True, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "items not run" not in resumed.stdout
    done = json.loads((run / "summary.json").read_text())
    assert done["complete"] is True and "incomplete" not in done
    assert done["metrics"]["main"] == 1.0 and done["counts"] == {"pass": 5}


@pytest.mark.e2e
@pytest.mark.slow
def test_the_printed_resume_command_works_pasted_in_another_folder(tiny, pytester, monkeypatch):
    """Reports outside the project, the command pasted in a third folder: it says where to run (the project's
    conftest.py defines the model) and gives the run folder with '=' (its space form is refused)."""
    reports = pytester.path.parent / f"{pytester.path.name} reports"  # outside the project, a space in its name
    elsewhere = pytester.path.parent / f"{pytester.path.name}-elsewhere"
    elsewhere.mkdir()
    stopped = tiny(
        "--bench-set=max_consecutive_errors=1", f"--bench-report-dir={reports}", errors="1.1", subprocess=True
    )
    assert stopped.ret == pytest.ExitCode.INTERRUPTED, stopped.stdout.str()[-2000:]
    command = resume_line(stopped.stdout.str())
    [run] = [p for p in (reports / "scicode").glob("*/*") if p.is_dir()]
    assert shlex.split(command)[-1] == f"--bench-resume={run}", command
    monkeypatch.setenv("ERROR_STEPS", "")
    resumed = subprocess.run(command, shell=True, cwd=elsewhere, capture_output=True, text=True, timeout=600)
    out = resumed.stdout + resumed.stderr
    # the four items not run and 1.1, whose model_error the resume runs again
    assert "items not run" not in resumed.stdout and "5 passed" in resumed.stdout, out[-3000:]
    assert "1 item(s) that ended in an error (model_error) run again: 1.1" in resumed.stdout
    assert resumed.returncode == pytest.ExitCode.OK, out[-3000:]
    done = json.loads((run / "summary.json").read_text())
    assert done["complete"] is True and done["counts"] == {"pass": 5}, done["counts"]


@pytest.mark.e2e
@pytest.mark.slow
def test_stopped_by_x_fails_its_gates_unless_allowed(tiny, pytester):
    stopped = tiny("-x", "--bench-fail-under=main=0%", broken="1.2")
    assert stopped.ret == pytest.ExitCode.TESTS_FAILED
    out = stopped.stdout.str()
    assert "incomplete: 3 of 5 items not run: 2.1, 2.2, 3.1" in out
    assert "FAIL incomplete: 3 of 5 items not run" in out
    assert "--bench-resume=" in resume_line(out)
    summary = json.loads((latest_run(pytester) / "summary.json").read_text())
    assert summary["gates_passed"] is False and summary["metrics"]["main"] == 0.0
    assert summary["metrics"]["subproblem"] == pytest.approx(1 / 5)

    allowed = tiny("-x", "--bench-fail-under=main=0%", "--bench-allow-incomplete", broken="1.2")
    assert allowed.ret == pytest.ExitCode.OK, allowed.stdout.str()
    assert (
        "PASS incomplete: 3 of 5 items not run (counted as not passed); accepted by --bench-allow-incomplete"
        in allowed.stdout.str()
    )
    summary = json.loads((latest_run(pytester) / "summary.json").read_text())
    assert summary["gates_passed"] is True and summary["incomplete"]["not_run"] == 3


@pytest.mark.e2e
def test_stop_after_model_errors_keeps_exit_2_and_fails_the_gates(tiny, pytester):
    result = tiny("--bench-set=max_consecutive_errors=1", "--bench-fail-under=main=0%", errors="1.1")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "incomplete: 4 of 5 items not run: 1.2, 2.1, 2.2, 3.1" in result.stdout.str()
    summary = json.loads((latest_run(pytester) / "summary.json").read_text())
    assert summary["exit_code"] == 2 and summary["gates_passed"] is False
    assert summary["counts"] == {"model_error": 1, "not_run": 4}


@pytest.mark.e2e
@pytest.mark.slow
def test_deselected_items_are_not_missing_under_xdist(tiny, pytester):
    """-k/--deselect narrow the selection (under xdist the controller learns it from the workers)."""
    result = tiny("-n", "2", "--deselect", "scicode/3::3.1", "-k", "not 1.2", "--bench-fail-under=main=0%")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "items not run" not in result.stdout.str()
    summary = json.loads((latest_run(pytester) / "summary.json").read_text())
    assert summary["complete"] is True and [i["id"] for i in summary["items"]] == ["1.1", "2.1", "2.2"]


# ---- the report layer on its own -------------------------------------------------------------------
SELECTION = [
    {"id": i, "task": i.split(".")[0], "split": "validation", "scored": True}
    for i in ("1.1", "1.2", "2.1", "2.2", "3.1")
]


def gates(tmp_path: Path, allow: bool = False) -> GateConfig:
    return GateConfig([], [], 5, None, False, None, allow)


def test_a_run_that_ended_normally_with_items_missing_ends_with_exit_1(tmp_path):
    records = [
        {**SELECTION[0], "status": "pass"},
        {**SELECTION[1], "status": "pass"},
        {**SELECTION[2], "status": "error", "lost": True},
    ]
    summary = build_summary(records, get_benchmark("scicode"), {"benchmark": "scicode"}, SELECTION)
    assert summary["incomplete"]["items"] == ["2.1", "2.2", "3.1"]  # the lost item is not run too
    assert judge(dict(summary), None, None, exit_status=0).exit_code == 1
    assert (
        judge(dict(summary), GateConfig([], [], None, None, False, None, allow_incomplete=True), None, 0).exit_code == 0
    )
    assert judge(dict(summary), gates(tmp_path), None, exit_status=0).exit_code == 1
    assert judge(dict(summary), gates(tmp_path, allow=True), None, exit_status=0).exit_code == 0
    for status in (2, 3, 4, 5):
        assert judge(dict(summary), gates(tmp_path), None, exit_status=status).exit_code == status


def test_prefilled_steps_the_session_never_reached_stay_skipped():
    selection = [
        *SELECTION,
        {
            "id": "3.2",
            "task": "3",
            "split": "validation",
            "scored": True,
            "status": "skipped",
            "message": "official prefilled step",
        },
    ]
    summary = build_summary(
        [{**SELECTION[0], "status": "pass"}], get_benchmark("scicode"), {"benchmark": "scicode"}, selection
    )
    assert summary["incomplete"]["not_run"] == 4 and "3.2" not in summary["incomplete"]["items"]
    assert summary["counts"] == {"pass": 1, "skipped": 1, "not_run": 4}
