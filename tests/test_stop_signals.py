"""SIGTERM and SIGHUP (a CI job's time-out, `timeout`, Kubernetes, Slurm, a closed terminal) end a run the way
Ctrl-C does: the records kept, summary.json, summary.md and report.html written and labelled incomplete, the
resume command printed, exit 2; under -n 2 too, where the controller alone gets the signal and no worker is
left behind.

Each run is a real pytest process started as a user starts it, over four one-step SciCode problems, with a
scripted model on 127.0.0.1 that answers slowly, so the signal comes while items are still to run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_agentbench.pytest_plugin.signals import StopSignals

from helpers.bench_runs import read_jsonl
from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import asked_number, custom_data_args, numbered_problems, write_dataset

COUNT = 6
PROBLEMS, TARGETS = numbered_problems(range(1, COUNT + 1))


def right_answer(body: dict) -> dict:
    k = asked_number(body)
    return {"text": f"```python\ndef f{k}():\n    return {k}\n```", "delay": 1.5}


# The stop comes from within, at the worst moment: the first record is on disk, and the plugins that tally it
# have not seen it yet (this hook runs after the records' writer, before the reporter).
STOP_FROM_WITHIN = """
import os, signal
import pytest

WORKER = []

def pytest_configure(config):
    WORKER.append(hasattr(config, "workerinput"))  # under -n the controller alone is stopped

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    sent = WORKER[-1] or getattr(pytest_runtest_logreport, "sent", False)
    if not sent and any(name == "agentbench_record" for name, _ in report.user_properties):
        pytest_runtest_logreport.sent = True
        os.kill(os.getpid(), signal.SIGTERM)
"""


def stop_a_run(
    tmp_path: Path, shared_data: Path, sig: int, *extra: str, from_within: bool = False
) -> tuple[int, str, Path, bool]:
    """Start a run, send ``sig`` to its pytest process once the first record is written (or, ``from_within``,
    let the run's own conftest send SIGTERM while that record is being handled); (exit code, output, run folder,
    whether any process of the run outlived it)."""
    data, h5 = write_dataset(tmp_path, shared_data, targets=TARGETS, problems=PROBLEMS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    if from_within:
        (tmp_path / "conftest.py").write_text(STOP_FROM_WITHIN)
    with FakeOpenAI() as server:
        for _ in range(COUNT):
            server.reply_with(right_answer)
        args = [
            "-p",
            "no:cacheprovider",
            *custom_data_args(data, h5, "--bench-mode=naive", model="m", server=server),
            "--bench-cache=off",
            f"--bench-cache-dir={tmp_path / 'cache'}",
            "--bench-run-id=stopped",
            *extra,
        ]
        env = {
            **os.environ,
            "AGENTBENCH_ISOLATION": "off",
            "AGENTBENCH_OFFLINE": "1",
            "AGENTBENCH_DATA_DIR": str(shared_data),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", *args],
            cwd=tmp_path,
            env=env,
            start_new_session=True,  # its own process group: whatever of the run is left can be found
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        run = tmp_path / "reports" / "scicode" / "m" / "stopped"
        try:
            deadline = time.monotonic() + 300
            while not ((run / "steps.jsonl").exists() and read_jsonl(run / "steps.jsonl")):
                assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be stopped"
                time.sleep(0.1)
            if not from_within:
                os.kill(proc.pid, sig)  # the pytest process only (the controller under -n)
            out, _ = proc.communicate(timeout=120)
            left = group_outlives(proc.pid, 5)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever outlived the run (the assertion below says so)
        except ProcessLookupError:
            pass
    return proc.returncode, out, run, left


def group_outlives(group: int, grace: float) -> bool:
    """Whether a process of ``group`` is still there after ``grace`` seconds: what a run leaves behind would live
    on; what is still exiting when pytest returns is gone within the grace."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.05)
    return True


def assert_stopped_like_ctrl_c(code: int, out: str, run: Path, signame: str) -> None:
    assert code == pytest.ExitCode.INTERRUPTED, out[-4000:]
    assert f"agentbench: {signame} received" in out, out[-4000:]
    done = read_jsonl(run / "steps.jsonl")
    assert 1 <= len(done) < COUNT, out[-4000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] is False and summary["exit_code"] == 2
    assert summary["incomplete"]["not_run"] == COUNT - len(done)
    assert "incomplete:" in (run / "summary.md").read_text()
    assert "incomplete:" in (run / "report.html").read_text()
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "resume with:" in line)
    assert "--bench-resume" in lines[at + 1] and str(run) in lines[at + 1], out[-4000:]


@pytest.mark.e2e
@pytest.mark.slow
def test_sigterm_ends_a_run_as_ctrl_c_does(tmp_path, shared_data):
    code, out, run, left = stop_a_run(tmp_path, shared_data, signal.SIGTERM)
    assert_stopped_like_ctrl_c(code, out, run, "SIGTERM")
    assert not left


@pytest.mark.e2e
@pytest.mark.slow
def test_sighup_ends_a_run_as_ctrl_c_does(tmp_path, shared_data):
    code, out, run, left = stop_a_run(tmp_path, shared_data, signal.SIGHUP)
    assert_stopped_like_ctrl_c(code, out, run, "SIGHUP")
    assert not left


@pytest.mark.e2e
@pytest.mark.slow
def test_sigterm_to_the_xdist_controller_stops_its_workers_too(tmp_path, shared_data):
    code, out, run, left = stop_a_run(tmp_path, shared_data, signal.SIGTERM, "-n", "2")
    assert_stopped_like_ctrl_c(code, out, run, "SIGTERM")
    assert not left, "a worker of the run outlived it"


@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_started_under_nohup_keeps_ignoring_sighup():
    import signal as sig

    before = sig.signal(sig.SIGHUP, sig.SIG_IGN)
    try:
        handlers = StopSignals()
        handlers.install()
        assert sig.getsignal(sig.SIGHUP) is sig.SIG_IGN
        assert sig.getsignal(sig.SIGTERM) == handlers.handle
        handlers.restore()
        assert sig.getsignal(sig.SIGTERM) is not handlers.handle
    finally:
        sig.signal(sig.SIGHUP, before)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("how", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_a_stop_while_a_record_is_handled_keeps_that_record_in_the_summary(tmp_path, shared_data, how):
    code, out, run, left = stop_a_run(tmp_path, shared_data, signal.SIGTERM, *how, from_within=True)
    assert_stopped_like_ctrl_c(code, out, run, "SIGTERM")
    summary = json.loads((run / "summary.json").read_text())
    ran = {status: n for status, n in summary["counts"].items() if status != "not_run"}
    assert sum(ran.values()) == len(read_jsonl(run / "steps.jsonl")) >= 1, summary["counts"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_stop_swallowed_where_it_was_raised_ends_the_run_when_its_item_ends(signum):
    """Python runs a signal handler wherever the main thread is; raised inside a callback around os.fork (an
    executor forks) the KeyboardInterrupt is reported as "Exception ignored" and lost: a full run of this suite
    once went on to exit 0 after SIGTERM. The stop is raised again when the item ends."""
    stops = StopSignals()
    handler = stops.handle if signum == signal.SIGTERM else stops.interrupt
    try:
        handler(signum, None)
    except KeyboardInterrupt:
        pass  # what a callback that ignores exceptions does with it
    with pytest.raises(KeyboardInterrupt):
        stops.pytest_runtest_logfinish()
    stops.pytest_sessionfinish()  # the session ends as interrupted; its reports are written in peace
    stops.pytest_runtest_logfinish()
