"""The per-command limit's supervisor (``sandbox/command_limit.py``) on its own, run by the bash command
``containment.limited_agent`` gives (as an external agent's environment runs it, here without a sandbox): what
counts as a command, how it is ended, what it leaves for the record. The agents' end-to-end runs under it are in
tests/test_agent_command_limit.py."""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks import agents
from pytest_agentbench.sandbox import command_limit
from pytest_agentbench.sandbox.containment import NO_PYTHON, limited_agent

from helpers.capabilities import needs

LIMIT = 1
# Python 3 on PATH as ``python3``, as the environments have it
PATH = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

# The agent: a command of its own (a process group of its own) that never ends by itself, waited on; then a
# process of its own group that outlives the limit (the agent's runtime: not a command)
AGENT = r"""
import json, subprocess, sys
command = subprocess.Popen(["bash", "-c", "echo started; exec sleep 1000"], stdout=subprocess.PIPE,
                           start_new_session=True, text=True)
printed, _ = command.communicate()
runtime = subprocess.run(["sleep", sys.argv[1]])
print(json.dumps({"code": command.returncode, "printed": printed, "runtime": runtime.returncode}))
"""


def run_limited(
    tmp_path: Path, script: str, path: str = PATH, within: tuple[str, ...] = (), timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run ``script`` as the agent, the supervisor in a session (and process group) of its own, under
    ``within`` (a sandbox's command line) if given."""
    log = tmp_path / "ended.jsonl"
    command = limited_agent(script, seconds=LIMIT, log_file=str(log))
    env = {**os.environ, "PATH": path}
    return subprocess.run(
        [*within, "bash", "-c", command],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        start_new_session=True,
    )


def ended(tmp_path: Path) -> list[dict]:
    log = tmp_path / "ended.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_command_past_the_limit_is_ended_and_the_agents_own_processes_are_not(tmp_path):
    agent = f"python3 - {3 * LIMIT} <<'AGENT'\n{AGENT}\nAGENT"
    done = run_limited(tmp_path, agent)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["code"] == -15  # TERM, to the command's group
    assert seen["printed"].startswith("started\n")
    assert f"ended by the plugin: it ran past the per-command time limit of {LIMIT} s" in seen["printed"]
    assert seen["runtime"] == 0  # in the agent's own group: the agent, held by its time limit only
    (entry,) = ended(tmp_path)
    assert entry["command"] == "sleep 1000" and entry["limit"] == LIMIT and entry["seconds"] >= LIMIT


def test_a_command_that_ignores_term_is_killed_whole(tmp_path):
    """TERM ignored by the command and by a child that left its group: KILL comes to both."""
    command = "trap '' TERM; (trap '' TERM; setsid sleep 1000 & wait) ; sleep 1000"
    agent = (
        "python3 - <<'AGENT'\nimport subprocess\n"
        f"print(subprocess.Popen(['bash', '-c', {command!r}], start_new_session=True).wait())\nAGENT"
    )
    done = run_limited(tmp_path, agent)
    assert done.returncode == 0, done.stderr
    # (a process left alive would hold the output open: the run would not have ended)
    assert done.stdout.splitlines()[-1] == "-9"
    (entry,) = ended(tmp_path)
    assert "trap" in entry["command"]


def test_the_agents_exit_is_the_runs(tmp_path):
    done = run_limited(tmp_path, "echo out; echo err >&2; exit 7")
    assert (done.returncode, done.stdout, done.stderr) == (7, "out\n", "err\n")  # nothing of the supervisor's
    assert ended(tmp_path) == []


def test_without_python3_the_agent_does_not_start_and_says_why(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(shutil.which("bash") or "/bin/bash", bare / "bash")
    marker = tmp_path / "started"
    done = run_limited(tmp_path, f"touch {shlex.quote(str(marker))}", path=str(bare))
    assert done.returncode == 127 and NO_PYTHON in done.stderr
    assert not marker.exists()


def test_the_record_takes_only_the_logs_fields_the_agent_cannot_bloat_it(tmp_path):
    """The log is in the agent's folder, in its reach: only the supervisor's fields, of the first lines, are
    taken into the record."""
    log = tmp_path / agents.ENDED_COMMANDS
    good = {"command": "sleep 1000", "seconds": 2.1, "limit": 2}
    lines = [json.dumps({**good, "extra": "x" * 1000}), "not json", "[1]", json.dumps({"command": "c" * 5000})]
    log.write_text("\n".join(lines + [json.dumps(good)] * (2 * agents.MAX_ENDED)) + "\n")
    setting = agents.AgentSetting("", "", "", "", "", str(tmp_path), "", 0.0, 2.0, 0)
    ended = agents.make_agent(agents.parse_agent("command", "true")).ended_commands(
        lambda path: Path(path).read_bytes(), setting
    )
    assert ended[0] == {"command": "sleep 1000", "seconds": 2.1, "limit": 2.0}
    assert len(ended) == agents.MAX_ENDED - 4 + 1 and all(entry == ended[0] for entry in ended)


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, ended and waiting to be reaped, does not)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


def test_an_agent_cannot_kill_its_supervisor_and_ends_with_it(tmp_path):
    """The supervisor runs as the agent's user: the agent's kill is refused (the seccomp filter), and should the
    supervisor end anyway (killed from outside, or by the kernel for memory), the kernel's parent-death signal
    ends the agent too, which cannot go on free of the limit."""
    pid_file = tmp_path / "agent.pid"
    agent = (
        f'kill -KILL $PPID 2>/dev/null; echo "$$ $?" > {shlex.quote(str(pid_file))}.part; '
        f"mv {shlex.quote(str(pid_file))}.part {shlex.quote(str(pid_file))}; exec sleep 1000 >/dev/null 2>&1"
    )
    command = limited_agent(agent, seconds=LIMIT, log_file=str(tmp_path / "ended.jsonl"))
    env = {**os.environ, "PATH": PATH}
    supervisor = subprocess.Popen(["bash", "-c", command], env=env, start_new_session=True)  # (bash execs it)
    try:
        deadline = time.monotonic() + 60  # (a handshake: this only bounds a failing test)
        while not pid_file.exists() and supervisor.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        pid, refused = map(int, pid_file.read_text().split())
        assert refused == 1  # EPERM
        assert supervisor.poll() is None
    finally:
        supervisor.kill()
    assert supervisor.wait() == -9
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    still = alive(pid)
    if still:
        os.kill(pid, 9)
    assert not still, "the agent outlived its supervisor"


# What an agent tries on its supervisor, then its command that never ends by itself (the run ends only if the
# supervisor still ends it). The supervisor is the agent's parent ($PPID); its process group is its own.
STOPPING = {
    "the supervisor": "kill -STOP $PPID",
    "its process group": 'kill -STOP -- -$(python3 -c "import os; print(os.getpgid($PPID))")',
}


def run_stopping(tmp_path: Path, attempt: str, within: tuple[str, ...] = ()) -> None:
    agent = f"{attempt} 2>/dev/null; echo \"refused:$?\"\npython3 - 0 <<'AGENT'\n{AGENT}\nAGENT"
    # (bounded far past the limit: a stopped supervisor would leave the command, and the run, waiting forever)
    done = run_limited(tmp_path, agent, within=within, timeout=30 * LIMIT)
    assert done.returncode == 0, done.stderr
    refused, seen = done.stdout.split("\n", 1)
    assert refused == "refused:1"  # EPERM
    assert json.loads(seen)["code"] == -15  # the command, ended by the limit as ever
    (entry,) = ended(tmp_path)
    assert entry["command"] == "sleep 1000"


@pytest.mark.parametrize("target", STOPPING)
def test_an_agent_cannot_stop_its_supervisor(tmp_path, target):
    """The supervisor runs as the agent's user: without the seccomp filter on the agent, a SIGSTOP would leave
    every later command free of the limit."""
    run_stopping(tmp_path, STOPPING[target])


def test_an_agent_cannot_stop_every_process_it_may_signal(tmp_path):
    """``kill -1``: every process of the agent's user, the supervisor included. (In a PID namespace of its own,
    as the environments run it: without the filter it would reach every process of this machine's user.)"""
    needs("bwrap")
    run_stopping(
        tmp_path,
        "kill -STOP -1",
        within=("bwrap", "--die-with-parent", "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc"),
    )


# A Python agent tries, on its supervisor (argv[1]) and on a command of its own, the other ways to stop it,
# signal it or take its signals; each errno is printed (0: it worked)
TRYING = r"""
import ctypes, json, os, signal, subprocess, sys
top = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.argtypes = [ctypes.c_long] * 3
child = subprocess.Popen(["sleep", "1000"])


def errno_of(call):
    ctypes.set_errno(0)
    try:
        result = call()
    except OSError as exc:
        return exc.errno
    return ctypes.get_errno() if result == -1 else 0


PTRACE_ATTACH, F_SETSIG, KILL = 16, 10, {"x86_64": 62, "aarch64": 129}[os.uname().machine]
tried = {
    "pidfd_open": errno_of(lambda: os.pidfd_open(top)),
    "ptrace the supervisor": errno_of(lambda: libc.ptrace(PTRACE_ATTACH, top, 0, 0)),
    "ptrace its own command": errno_of(lambda: libc.ptrace(PTRACE_ATTACH, child.pid, 0, 0)),
    "join its group": errno_of(lambda: os.setpgid(0, os.getpgid(top))),
    "signal on ready": errno_of(lambda: libc.fcntl(1, F_SETSIG, signal.SIGSTOP)),
    # the kernel reads a pid as 32 bits: high bits set must not slip past the filter
    "kill with high bits": errno_of(lambda: libc.syscall(KILL, (1 << 32) | top, 0)),
    "pidfd_open its own command": errno_of(lambda: os.close(os.pidfd_open(child.pid))),
}
child.kill()
print(json.dumps(tried))
"""


def test_an_agent_cannot_trace_its_supervisor_nor_take_its_signals(tmp_path):
    done = run_limited(tmp_path, f"python3 - $PPID <<'AGENT'\n{TRYING}\nAGENT", timeout=30 * LIMIT)
    assert done.returncode == 0, done.stderr
    tried = json.loads(done.stdout)
    assert tried.pop("pidfd_open its own command") == 0  # (what the agent's runtime may need of its own)
    assert tried == dict.fromkeys(tried, errno.EPERM)


def test_on_a_machine_without_a_filter_the_agent_does_not_start_and_says_why(monkeypatch, capsys):
    """The filter is written for x86_64 and aarch64 (their system call numbers): elsewhere the limit would not
    hold against the agent, so the supervisor refuses to start it."""
    monkeypatch.setattr(os, "uname", lambda: os.uname_result(("Linux", "box", "6.1", "#1", "riscv64")))
    with pytest.raises(SystemExit) as refused:
        command_limit.start(["true"])
    assert refused.value.code == 127
    assert "no seccomp filter for this machine (riscv64" in capsys.readouterr().err
