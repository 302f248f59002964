"""Helpers for reading what a pytester run of a benchmark left behind, and for the runs over hosts (a free
loopback port, waiting for a condition): plain functions, no fixtures."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("AGENTBENCH_DATA_DIR") or REPO.parent / "shared" / "data").resolve()


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def run_dirs(root: Path, bench: str = "scicode") -> list[Path]:
    """The run folders under ``root/reports/<bench>/<model>/``, sorted."""
    return sorted(p for p in (Path(root) / "reports" / bench).glob("*/*") if p.is_dir())


# The two validation problems whose scoring is most of a full run's time (51.4 runs a molecular dynamics
# simulation, 47.4 a Monte Carlo one: about 40 s and 25 s of upstream test code on one core). A test that checks
# how a run is driven (models, workers, executors) rather than that the whole split resolves leaves them out.
HEAVY_VALIDATION_PROBLEMS = ("51", "47")


# Five validation problems of several steps each (19 steps, chains of 2 to 8) whose upstream tests take about
# three seconds together: a run that repeats, with one setting changed, what a test's run of the split checks
# (another mode, another number of workers) selects them; the split's own run stays whole.
QUICK_MULTISTEP_PROBLEMS = ("19", "29", "38", "44", "70")


def validation_problems(
    leave_out: Sequence[str] = HEAVY_VALIDATION_PROBLEMS, only: Sequence[str] | None = None
) -> tuple[list[str], int]:
    """The validation split's problem ids (``only`` those, if given) without ``leave_out`` (for ``--bench-ids``),
    and their scored steps."""
    ids, steps = [], 0
    for line in (SHARED_DATA / "scicode" / "problems_dev.jsonl").read_text().splitlines():
        problem = json.loads(line)
        if problem["problem_id"] not in leave_out and (only is None or problem["problem_id"] in only):
            ids.append(problem["problem_id"])
            steps += len(problem["sub_steps"])
    return ids, steps


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (a socket server or scripted endpoint binds it next)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def ctrl_c_as_a_terminal_gives_it() -> None:
    """``preexec_fn`` of a pytest run a test stops with SIGINT: SIGINT at its default, so Python turns it into
    KeyboardInterrupt. A suite started in the background by a non-interactive shell (``.ci/run &``) has SIGINT
    ignored, every child inherits that, and Python then leaves it ignored: the Ctrl-C would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def checkout_python_path(path: Sequence[str] = ()) -> str:
    """A PYTHONPATH of ``path``, then this checkout, then the test run's own PYTHONPATH."""
    return os.pathsep.join([*path, str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])


def worker_host_env(home: Path, cache: Path, path: Sequence[str] = (), **extra: str) -> dict[str, str]:
    """A worker host's environment: ``path`` then this checkout first on the path, the staged data, ``cache`` (and
    the machine secret, which signs rebuilt targets), ``extra``; nothing of the test run's own pytest/xdist, model
    or agentbench variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OPENAI_", "AGENTBENCH_"))}
    env.update(
        HOME=str(home),
        PYTHONPATH=checkout_python_path(path),
        AGENTBENCH_DATA_DIR=str(SHARED_DATA),
        AGENTBENCH_OFFLINE="1",
        AGENTBENCH_CACHE_DIR=str(cache),
        AGENTBENCH_SECRET_FILE=os.environ["AGENTBENCH_SECRET_FILE"],
        **extra,
    )
    return env


class SocketHost:
    """One ``execnet.script.socketserver`` on 127.0.0.1 with ``env`` (``worker_host_env``): the worker it serves
    runs inside its process."""

    def __init__(self, home: Path, env: Mapping[str, str]) -> None:
        home.mkdir(parents=True)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "execnet.script.socketserver", self.address],
            cwd=home,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output: list[str] = []
        stdout = self.proc.stdout
        assert stdout is not None
        threading.Thread(target=lambda: self.output.extend(iter(stdout.readline, "")), daemon=True).start()
        wait_for(
            lambda: any("Entering Accept loop" in line for line in self.output) or self.proc.poll() is not None,
            60,
            f"the socket server on {self.address} to listen",
        )
        assert self.proc.poll() is None, "".join(self.output)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # works on a stopped process too
        self.proc.wait(30)


def oracle_step_argv(*extra: str) -> list[str]:
    """``python`` arguments of a run as a user starts it: the oracle on validation problem 3 (one quick step)."""
    return [
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--bench=scicode",
        "--bench-split=validation",
        "--model=oracle",
        "--bench-ids=3",
        *extra,
    ]


def assert_sandboxed_step_passed(done: subprocess.CompletedProcess, root: Path) -> None:
    """The run of ``oracle_step_argv`` ended well: exit 0, the header says the sandbox self-test passed, and the
    one step's record under ``root``'s reports passes."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    header = " ".join(
        line.removeprefix("agentbench:").strip() for line in done.stdout.splitlines() if line.startswith("agentbench:")
    )
    assert "sandbox self-test passed" in header, header
    records = read_jsonl(run_dirs(root)[0] / "steps.jsonl")
    assert [r["status"] for r in records] == ["pass"], [(r["status"], r.get("message")) for r in records]
