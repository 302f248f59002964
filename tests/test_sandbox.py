"""The sandbox executors: limits, isolation, identical behaviour, how a run ended, no leftovers."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from pytest_agentbench.core.io import trim
from pytest_agentbench.sandbox.executors import (
    ForkServerPool,
    Limits,
    MiB,
    SubprocessExecutor,
    get_executor,
    run_python,
)
from pytest_agentbench.sandbox.forkserver import ForkServer
from pytest_agentbench.sandbox.integrity import run_failure
from pytest_agentbench.sandbox.jail import descendants
from pytest_agentbench.sandbox.result import ExecResult
from pytest_agentbench.sandbox.workdir import EXECUTOR_DIED

from helpers.executor_pairs import KINDS, executor_pair, wait_gone, wait_until


@pytest.fixture(scope="module")
def executors():
    yield from executor_pair()


@pytest.fixture(autouse=True)
def no_process_left_behind(executors):
    # processes that were there before (another module's shared fork server in this worker) are not the test's
    before = descendants(os.getpid())
    yield

    def left() -> set[int]:  # (the fork server's own processes, bwrap's too under isolation, are not the test's)
        return descendants(os.getpid()) - executors["fork"].own_pids - before

    assert wait_until(lambda: not left(), 30), f"processes left behind: {sorted(left())}"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------- limits


@pytest.mark.parametrize("kind", KINDS)
def test_wall_limit_kills_the_group_and_a_descendant_that_left_it_with_setsid(executors, kind):
    """One run over its limit leaves two sleepers: a grandchild in the script's group and a descendant that
    left the group with setsid. Both die with the run."""
    grouped = f"6{KINDS.index(kind)}.25"  # (under isolation the child's pids are those of its own namespace)
    left = f"6{KINDS.index(kind)}.75"
    script = (
        "import os, subprocess, time\n"
        f"p = subprocess.Popen(['sleep', '{grouped}'])\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        f"    os.setsid(); os.execvp('sleep', ['sleep', '{left}'])\n"
        "print(p.pid, pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    result = executors[kind].run(script, limits=Limits(timeout=1.0))
    assert time.monotonic() - started < 10  # ten times the limit: the script's own 60 s were cut
    assert result.timed_out and result.limit == "wall" and result.exit_code is None
    assert wait_gone(f"sleep\x00{grouped}", 30.0)
    assert wait_gone(f"sleep\x00{left}", 30.0)


@pytest.mark.parametrize("kind", KINDS)
def test_memory_limit(executors, kind):
    result = executors[kind].run("x = bytearray(3 << 30)\nprint('allocated')\n", limits=Limits(memory=1 << 30))
    assert result.limit == "memory" and result.exit_code == 1
    assert "MemoryError" in result.stderr and "allocated" not in result.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_cpu_limit(executors, kind):
    result = executors[kind].run("while True:\n    pass\n", limits=Limits(timeout=20, cpu=0.5))
    assert result.limit == "cpu" and not result.timed_out
    assert result.exit_code == -signal.SIGXCPU
    assert result.duration < 10


@pytest.mark.parametrize("kind", KINDS)
def test_process_limit_stops_a_fork_bomb(executors, kind):
    script = (
        "import os, time\n"
        "for i in range(100):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60); os._exit(0)\n"
        "print('forked all')\n"
    )
    result = executors[kind].run(script, limits=Limits(timeout=10, processes=8))
    assert result.limit == "processes", result
    assert "forked all" not in result.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_output_flood_is_trimmed_with_its_size_noted(executors, kind):
    # 10 MiB: ten thousand times what is kept (the trimming does not depend on how far over the limit it is)
    script = "import sys\nsys.stdout.write('head\\n' + 'x' * (10 << 20) + '\\ntail\\n')\n"
    result = executors[kind].run(script, limits=Limits(output=1000, timeout=60))
    assert result.exit_code == 0 and result.limit is None and not result.timed_out
    assert result.stdout_bytes == (10 << 20) + 11 and result.trimmed
    assert result.stdout.startswith("head\n") and result.stdout.endswith("\ntail\n")
    assert f"trimmed of {result.stdout_bytes}" in result.stdout and len(result.stdout) < 1200


@pytest.mark.parametrize("kind", KINDS)
def test_output_cap_stops_the_script(executors, kind):
    script = "while True:\n    print('y' * 1000)\n"
    result = executors[kind].run(script, limits=Limits(timeout=20, output_cap=1 * MiB))
    assert result.limit == "output" and result.exit_code != 0
    assert result.stdout_bytes <= 1 * MiB


def test_trim_keeps_head_and_tail():
    text = trim(b"a" * 10 + b"b" * 100 + b"c" * 10, 20)
    assert text.startswith("a" * 10) and text.endswith("c" * 10) and "100 bytes trimmed of 120" in text


def test_bad_input_is_rejected_with_a_clear_error():
    with pytest.raises(ValueError, match="timeout"):
        Limits(timeout=0)
    with pytest.raises(ValueError, match="unknown executor"):
        get_executor("docker")
    with pytest.raises(ValueError, match="inside its directory"):
        run_python("pass", files={"../escape.txt": b"x"}, executor="subprocess")


# ---------------------------------------------------------------- isolation and parity


def test_a_child_cannot_change_what_the_next_child_sees(executors):
    fork = executors["fork"]
    first = fork.run(
        "import numpy as np, json\n"
        "np.allclose = lambda *a, **k: True\n"
        "json.MARK = 1\n"
        "import builtins; builtins.LEAK = 1\n"
        "open('left.txt', 'w').write('x')\n"
        "print(np.allclose(1, 2))\n"
    )
    assert first.stdout.strip() == "True"
    second = fork.run(
        "import numpy as np, json, os, builtins\n"
        "print(np.allclose(1, 2), hasattr(json, 'MARK'), hasattr(builtins, 'LEAK'),"
        " sorted(os.listdir('.')))\n"
    )
    assert second.exit_code == 0
    assert second.stdout.strip() == "False False False ['.stderr', '.stdout', 'main.py']"


def test_files_and_env_reach_the_script(executors):
    script = "import os\nprint(open('data/in.txt').read(), os.environ['MY_VAR'], os.environ.get('OPENAI_API_KEY'))\n"
    for kind in KINDS:
        result = executors[kind].run(script, env={"MY_VAR": "v"}, files={"data/in.txt": b"payload"})
        assert result.stdout == "payload v None\n", kind


def test_credentials_of_any_provider_stay_out_of_the_child(monkeypatch):
    """A key passed as --model-api-key=$TOGETHER_API_KEY is still in the environment under its own name; such
    variables (and the cloud SDKs' usual ones) never reach a child, nor does any name off the allowlist."""
    secrets = {
        "TOGETHER_API_KEY": "t-1",
        "HF_TOKEN": "hf-2",
        "AWS_SECRET_ACCESS_KEY": "a-3",
        "DB_PASSWORD": "p-4",
        "GOOGLE_APPLICATION_CREDENTIALS": "/x.json",
        "SSH_AUTH_SOCK": "/s",
        "MY_SECRET": "m-5",
    }
    for name, value in {**secrets, "PLAIN_SETTING": "kept"}.items():
        monkeypatch.setenv(name, value)
    script = "import json, os\nprint(json.dumps(dict(os.environ)))\n"
    result = SubprocessExecutor().run(script, limits=Limits(timeout=60))
    assert result.exit_code == 0, result
    seen = json.loads(result.stdout)
    assert [name for name in secrets if name in seen] == [] and "PLAIN_SETTING" not in seen, seen


PARITY_SCRIPTS = {
    "ok": "import sys\nprint(__name__, sys.argv, __file__)\nprint('err', file=sys.stderr)\n",
    "exception": "def f():\n    raise KeyError('missing')\nprint('before')\nf()\n",
    "chained": "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    raise RuntimeError('wrapped') from e\n",
    "syntax": "x = (\n",
    "exit_code": "import sys\nsys.exit(7)\n",
    "exit_message": "raise SystemExit('bye')\n",
    "atexit": "import atexit\natexit.register(lambda: print('at exit'))\nprint('body')\n",
    "thread": "import threading, time\nt = threading.Thread(target=lambda: (time.sleep(0.2), print('thread')))\n"
    "t.start()\nprint('main done')\n",
}


@pytest.mark.parametrize("name", sorted(PARITY_SCRIPTS))
def test_both_executors_give_identical_results(executors, name):
    source = PARITY_SCRIPTS[name]
    fork = executors["fork"].run(source)
    sub = executors["subprocess"].run(source)
    assert (fork.exit_code, fork.stdout, fork.stderr) == (sub.exit_code, sub.stdout, sub.stderr)


# ---------------------------------------------------------------- how a run ended
# (Fake passes are decided in the parent now: SciCode's comparisons never run in the child; see
# tests/test_scicode_split.py and tests/test_redteam.py. What the executor observed is all a verdict reads here.)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "source, reason",
    [
        ("print('ok')\n", None),
        ("import sys\nsys.exit(0)\n", None),
        ("raise SystemExit(3)\n", "script failed with exit code 3"),
        (
            "import sys\nprint('AGENTBENCH-EXECUTOR-DIED', file=sys.stderr)\n",
            None,
        ),  # a child cannot choose that reason: the marker counts only from the executor
    ],
)
def test_run_failure_reads_how_the_run_ended(executors, kind, source, reason):
    assert run_failure(executors[kind].run(source)) == reason


def test_limit_hit_is_a_failure_reason():
    result = ExecResult(exit_code=None, stdout="", stderr="", duration=1.0, timed_out=True, limit="wall")
    assert run_failure(result) == "wall limit hit"


@pytest.fixture
def light_fork_server():
    # the run below kills its server; a server without preloads restarts fast
    server = ForkServer(preload=())
    yield server
    server.close()


@pytest.mark.parametrize("kind", KINDS)
def test_killing_the_parent_fails_the_step_and_the_executor_recovers(executors, light_fork_server, kind):
    executor = light_fork_server if kind == "fork" else executors[kind]
    script = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time\ntime.sleep(30)\n"
    result = executor.run(script, limits=Limits(timeout=20))
    reason = run_failure(result)
    assert reason is not None and not result.timed_out  # failed at once, not at the 20 s limit
    if kind == "fork" and not executor.isolation.active:
        assert EXECUTOR_DIED in result.stderr and "killed the process running it" in reason
    if kind == "fork" and executor.isolation.active:  # the server is out of the child's sight and reach
        assert EXECUTOR_DIED not in result.stderr and executor.restarts == 0
    after = executor.run("print('still works')")
    assert after.stdout == "still works\n"


def test_fork_server_survives_process_group_kill_and_is_not_the_scripts_group(executors):
    fork = executors["fork"]
    server = fork.server_pid
    result = fork.run("import os, signal\nprint(os.getpgid(0) == os.getpid())\nos.killpg(0, signal.SIGKILL)\n")
    assert result.stdout == "True\n" and result.exit_code == -signal.SIGKILL
    assert fork.server_pid == server


def test_fork_server_is_torn_down_on_close():
    server = ForkServer(preload=())
    server.start()
    pid = server.server_pid
    assert server.run("print(1)").stdout == "1\n"
    server.close()
    assert wait_until(lambda: not alive(pid), 30.0)


def test_a_fork_server_started_by_a_thread_outlives_the_thread():
    """A chain's thread may be the first to run a tool call; the server it starts must not die when that
    thread ends (under bwrap, the parent-death signal follows the starting thread)."""
    import threading

    server = ForkServer(preload=())
    try:
        starter = threading.Thread(target=server.start)
        starter.start()
        starter.join(60)
        pid = server.server_pid
        # the parent-death signal goes out as the OS thread exits, which join() does not wait for
        thread_gone = f"/proc/self/task/{starter.native_id}"
        assert wait_until(lambda: not os.path.exists(thread_gone), 30.0)
        assert pid is not None and alive(pid), "the fork server died with the thread that started it"
        assert server.run("print(1)").stdout == "1\n" and server.server_pid == pid and server.restarts == 0
    finally:
        server.close()


@pytest.mark.slow  # two rounds of sleeping runs, over 10 s in the full suite
def test_runs_at_the_same_time_each_get_a_fork_server_and_overlap():
    """The tool calls of chains generated at once are not queued behind one fork server: a run that begins
    while another runs gets a server of its own (kept for later runs), and the two run side by side."""
    import threading

    pool = ForkServerPool()
    script = "import time\nbegan = time.time()\ntime.sleep(1.5)\nprint(began, time.time())\n"

    def two_at_once() -> list:
        results: list = [None, None]

        def one(i: int) -> None:
            results[i] = pool.run(script)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        return results

    try:
        two_at_once()  # (the second server starts during the first round: the next one finds both warm)
        assert pool.servers == 2
        results = two_at_once()
        (a0, a1), (b0, b1) = (map(float, r.stdout.split()) for r in results)
        assert max(a0, b0) < min(a1, b1), results  # the two ran at once
        assert pool.servers == 2  # kept and reused
        assert pool.run("print(7)").stdout == "7\n" and pool.servers == 2  # a lone run takes an idle one
    finally:
        pool.close()


def test_subprocess_executor_is_available_through_run_python():
    assert isinstance(get_executor("subprocess"), SubprocessExecutor)
    assert run_python("print(6 * 7)", executor="subprocess").stdout == "42\n"
