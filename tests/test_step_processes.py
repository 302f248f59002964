"""Every process a SciCode step starts ends when the step ends, wherever it moved itself.

Step 1.1's answer starts a daemon when its function is called by the step's test: it double-forks, calls
``setsid``, leaves the run's cgroup where it can (unisolated it runs as the controller's user), renames
itself (``prctl(PR_SET_NAME)`` and ``/proc/self/comm``) and sleeps. Step 1.2's answer scans ``/proc`` for
that name at import (before any function of step 1.1 is called again: a step's script holds the code of the
steps before it) and returns the wrong value when it finds it, so the step's verdict says whether the
daemon outlived step 1.1; then it renames itself too and waits for the watcher's signal (it has looked).
Under isolation the step sees only its own PID namespace, so this test also watches the machine's /proc
during the run: the daemon must never be alive while step 1.2's script is. A daemon is step 1.1's when it
started before step 1.2's script (by the processes' start times), so a daemon that step 1.2 started itself
(step 1.1's code run again) cannot pass for one that survived, nor hide one. Each step runs in its own PID
namespace under isolation (the fork server's ``RunNamespace`` per run, bubblewrap's ``--unshare-pid`` per
fresh interpreter: killing its init ends every process in it); without isolation the launcher is a child
subreaper and ends every descendant before the step's result is read. Zombies are not alive (they run nothing;
their parent has not reaped them yet). Under both executors, with isolation on and off
(``AGENTBENCH_ISOLATION=off``).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.capabilities import needs
from helpers.scicode_builders import CLOSE, TARGETS, custom_data_args, problem, step, write_dataset

pytestmark = pytest.mark.isolation

GHOST = "agb" + uuid.uuid4().hex[:10]  # the daemon's name (15 bytes at most: the kernel's comm length)
WATCHED = GHOST[:-1] + "-"  # the name step 1.2's script takes while it runs

STARTS_DAEMON = """
import ctypes, os, time
def add(a, b):
    ready, settled = os.pipe()  # the daemon writes a byte once it is renamed and settled
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            for procs in ("/sys/fs/cgroup/pids/cgroup.procs", "/sys/fs/cgroup/unified/cgroup.procs",
                          "/sys/fs/cgroup/cgroup.procs"):
                try:  # out of the run's cgroup (only an existing cgroup file: never create one)
                    fd = os.open(procs, os.O_WRONLY)
                    os.write(fd, str(os.getpid()).encode())
                    os.close(fd)
                except OSError:
                    pass
            ctypes.CDLL(None).prctl(15, b"@GHOST@", 0, 0, 0)  # PR_SET_NAME
            try:
                with open("/proc/self/comm", "w") as fh:
                    fh.write("@GHOST@")
            except OSError:
                pass
            os.closerange(0, 3)
            os.write(settled, b"1")
            while True:
                time.sleep(0.05)
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(settled)
    os.read(ready, 1)  # the daemon is renamed and settled before the step ends (b"" if it died first)
    return a + b
"""

FINDS_DAEMON = """
import ctypes, os, signal, time
def _started(stat):
    return int(stat[stat.rfind(")") + 2:].split()[19])  # field 22: start time, clock ticks after boot
def _ghosts():
    with open("/proc/self/stat") as fh:
        me = _started(fh.read())
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    stat = fh.read()
                if stat[stat.rfind(")") + 2] != "Z" and stat[stat.find("(") + 1:stat.rfind(")")] == "@GHOST@" \
                        and _started(stat) <= me:  # started before this script: by an earlier step
                    found.append(int(entry))
            except OSError:
                pass
    return found
_FOUND = _ghosts()
print("ghosts:", _FOUND, flush=True)
_SEEN = []
signal.signal(signal.SIGUSR1, lambda *_: _SEEN.append(1))  # the watcher's word: it has looked while this ran
ctypes.CDLL(None).prctl(15, b"@WATCHED@", 0, 0, 0)  # the machine-wide watcher knows step 1.2 runs now
_DEADLINE = time.monotonic() + 20  # (the step's limit is 30 s: the deadline only ends a hang)
while not _SEEN and time.monotonic() < _DEADLINE:
    time.sleep(0.01)
signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # the watcher's later signals (Python's exit restores no SIG_IGN)
def twice(a):
    return 2 * a + (1000 if _FOUND else 0)
"""

MODEL = """
import json, os
import pytest

class Daemons:
    name = "daemons"
    is_oracle = False

    def answer_step(self, problem, index, previous_code):
        step = problem["sub_steps"][index]
        answers = json.loads(os.environ["DAEMON_ANSWERS"])
        return answers.get(step["step_number"], step["ground_truth_code"])

@pytest.fixture(scope="session")
def bench_model():
    return Daemons()
"""


def live_by_name(*names: str) -> dict[str, list[int]]:
    """Live (not zombie) processes of this machine with one of ``names``, by name."""
    return {name: [pid for pid, _ in found] for name, found in live_with_start(*names).items()}


def live_with_start(*names: str) -> dict[str, list[tuple[int, int]]]:
    """Live (not zombie) processes of this machine with one of ``names``: (pid, start time in clock ticks)."""
    found: dict[str, list[tuple[int, int]]] = {name: [] for name in names}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            name = stat[stat.find("(") + 1 : stat.rfind(")")]
            if name in found and stat[stat.rfind(")") + 2] != "Z":
                found[name].append((int(entry), int(stat[stat.rfind(")") + 2 :].split()[19])))
    return found


class Watcher:
    """Polls the machine's /proc while a run goes on: was the daemon ever alive while step 1.2's script was?
    A daemon started before step 1.2's script is step 1.1's (it outlived its step); one started after would
    be step 1.2's own (step 1.1's code run again there), which would say nothing about step 1.1: they are
    told apart by their start times."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.overlaps: list[list[int]] = []  # daemons of step 1.1 alive while step 1.2 ran
        self.reruns: list[list[int]] = []  # daemons step 1.2 started itself
        self.saw_step = False
        self.thread = threading.Thread(target=self.watch, daemon=True)

    def watch(self) -> None:
        while not self.stop.is_set():
            found = live_with_start(GHOST, WATCHED)
            if found[WATCHED]:
                self.saw_step = True
                step_started = min(start for _, start in found[WATCHED])
                earlier = [pid for pid, start in found[GHOST] if start <= step_started]
                later = [pid for pid, start in found[GHOST] if start > step_started]
                if earlier:
                    self.overlaps.append(earlier)
                if later:
                    self.reruns.append(later)
                for pid, _ in found[WATCHED]:  # looked while the script ran: it may go on
                    try:
                        os.kill(pid, signal.SIGUSR1)
                    except OSError:
                        pass
            time.sleep(0.02)


@pytest.fixture
def daemon_run(pytester, bench, shared_data, monkeypatch):
    pytester.makeconftest(MODEL)
    problems = [
        problem(
            "1",
            [
                step("1.1", "def add(a, b):\n    return a + b", [CLOSE.format(call="add(1, 2)")]),
                step("1.2", "def twice(a):\n    return 2 * a", [CLOSE.format(call="twice(3)")]),
            ],
        )
    ]
    data, h5 = write_dataset(
        pytester.path, shared_data, targets={n: TARGETS[n] for n in ("1.1", "1.2")}, problems=problems
    )
    answers = {
        "1.1": STARTS_DAEMON.replace("@GHOST@", GHOST),
        "1.2": FINDS_DAEMON.replace("@GHOST@", GHOST).replace("@WATCHED@", WATCHED),
    }
    monkeypatch.setenv("DAEMON_ANSWERS", json.dumps(answers))

    def run(executor: str, isolated: bool):
        if isolated:
            needs("bwrap")
            monkeypatch.delenv("AGENTBENCH_ISOLATION", raising=False)
        else:
            monkeypatch.setenv("AGENTBENCH_ISOLATION", "off")
        watcher = Watcher()
        watcher.thread.start()
        try:
            result = bench(
                *custom_data_args(data, h5, "--bench-timeout=30", model="daemons"),
                f"--bench-set=executor={executor}",
                subprocess=True,
            )
        finally:
            watcher.stop.set()
            watcher.thread.join()
        runs = run_dirs(pytester.path)
        assert runs, f"the run wrote no records:\n{result.stdout.str()[-3000:]}\n{result.stderr.str()[-3000:]}"
        return {r["id"]: r for r in read_jsonl(runs[-1] / "steps.jsonl")}, watcher

    yield run
    for pid in live_by_name(GHOST)[GHOST]:  # what a failed check left running
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("isolated", [True, False], ids=["isolated", "not-isolated"])
@pytest.mark.parametrize("executor", ["fork", "subprocess"])
@pytest.mark.e2e
@pytest.mark.slow
def test_a_daemon_of_one_step_is_gone_when_the_next_step_runs(daemon_run, executor, isolated):
    records, watcher = daemon_run(executor, isolated)
    first, second = records["1.1"], records["1.2"]
    assert first["status"] == "pass", first  # the daemon really started (its step ran to its end)
    assert "ghosts: []" in (second.get("stdout") or ""), second
    assert second["status"] == "pass", second
    assert watcher.saw_step, "the watcher never saw step 1.2's script run"
    assert not watcher.reruns, f"step 1.2 started a daemon itself (the test is broken): pids {watcher.reruns[0]}"
    assert not watcher.overlaps, f"the daemon of step 1.1 was alive while step 1.2 ran: pids {watcher.overlaps[0]}"
    assert not live_by_name(GHOST)[GHOST], "the daemon of step 1.1 is alive after the run"


# A process made with clone(CLONE_PARENT) is the child of the script's parent (the fork server, the launcher),
# though it lives in the run's PID namespace: the namespace's end waited for its parent to reap it, and the
# fork server, waiting for that end, hung until the client gave up on it (EXECUTOR_DIED, the step failed).
CLONE_PARENT_SCRIPT = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
ready, named = os.pipe()  # the clone writes a byte once it has its name
pid = libc.syscall(56, 0x00008000 | 17, 0, 0, 0, 0)  # clone(CLONE_PARENT | SIGCHLD) on x86_64
if pid == 0:
    libc.prctl(15, b"@GHOST@", 0, 0, 0)
    os.write(named, b"1")
    while True:
        time.sleep(0.05)
os.close(named)
os.read(ready, 1)
print("made", pid > 0)
"""


@pytest.fixture(scope="module", params=["isolated", "not-isolated"])
def executors(request):
    from pytest_agentbench.sandbox.isolation import NO_ISOLATION

    from helpers.executor_pairs import executor_pair

    if request.param == "isolated":
        needs("bwrap")
    yield from executor_pair(None if request.param == "isolated" else NO_ISOLATION, preload=("numpy",))


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the raw clone call of the script is x86_64's")
@pytest.mark.parametrize("kind", ["fork", "subprocess"])
def test_a_clone_parent_process_ends_with_its_step_and_the_step_with_it(executors, kind):
    from pytest_agentbench.sandbox.limits import Limits

    result = executors[kind].run(CLONE_PARENT_SCRIPT.replace("@GHOST@", GHOST), Limits(timeout=30))
    assert (result.exit_code, result.stdout.strip()) == (0, "made True"), result.stderr
    assert not result.timed_out and result.limit is None, "the run waited for its own end"
    assert not live_by_name(GHOST)[GHOST], "the clone(CLONE_PARENT) process outlived its step"
