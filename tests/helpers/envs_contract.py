"""Checks every environment must pass; test_envs_host.py and test_envs_docker.py run them on theirs."""

from __future__ import annotations

import time
from pathlib import Path

from pytest_agentbench.sandbox.result import ExecResult

from helpers.executor_pairs import process_with


def make_workspace(root: Path) -> Path:
    workspace = root / "workspace"
    (workspace / "capsule" / "data").mkdir(parents=True)
    (workspace / "capsule" / "data" / "values.csv").write_text("1\n2\n3\n")
    return workspace


def check_command_basics(env) -> None:
    result = env.run("ls capsule/data; echo oops >&2; exit 3", 30)
    assert isinstance(result, ExecResult)
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (3, "values.csv\n", "oops\n", False)
    assert env.run("pwd", 10).stdout.strip() == env.workdir
    # bytes that are not UTF-8 arrive as U+FFFD, counted for the record's text_repaired
    broken = env.run("printf 'a\\377b\\376'; printf '\\377' >&2", 10)
    assert (broken.stdout, broken.stderr, broken.text_repaired) == ("a\ufffdb\ufffd", "\ufffd", 3)


def check_timeout_kills_the_group(env, marker: str) -> None:
    started = time.monotonic()
    result = env.run(f"sleep {marker} & sleep 30", 1)
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 10  # ten times the limit: the 30 s sleep was cut
    # the environment's own view of its processes (a container has its own /proc)
    listing = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"
    assert env.run(f"{listing} | grep -c '^sleep {marker}'", 10).stdout.strip() == "0"
    # the background sleep is seen once it has started (a loaded machine may list before its exec)
    seen = f"sleep {marker} & for i in $(seq 200); do n=$({listing} | grep -c '^sleep {marker}'); "
    seen += '[ "$n" -ge 1 ] && break; sleep 0.05; done; echo "$n"'
    assert env.run(seen, 60).stdout.strip() == "1"


def check_flood_is_trimmed(env) -> None:
    # 10 MB: hundreds of times what is kept (the trimming does not depend on how far over the limit it is)
    result = env.run("head -c 10000000 /dev/zero | tr '\\0' z; echo done >&2", 120)
    assert result.exit_code == 0 and result.stdout_bytes == 10_000_000 and result.trimmed
    assert len(result.stdout) < 20_000 and "bytes trimmed of 10000000" in result.stdout
    assert result.stderr == "done\n" and not result.timed_out


def check_files(env, workspace: Path) -> None:
    env.write_file("out/report.json", '{"a": 1}')
    assert env.read_file("out/report.json") == b'{"a": 1}'
    assert env.read_file("capsule/data/values.csv") == b"1\n2\n3\n"
    assert env.run("cat out/report.json", 10).stdout == '{"a": 1}'
    env.run("rm capsule/data/values.csv && echo new > capsule/made.txt", 10)
    env.copy_out(workspace)
    assert (workspace / "out" / "report.json").read_text() == '{"a": 1}'
    assert (workspace / "capsule" / "made.txt").read_text() == "new\n"
    assert not (workspace / "capsule" / "data" / "values.csv").exists()
    try:
        env.read_file("no/such/file")
    except FileNotFoundError as exc:
        assert "no/such/file" in str(exc)
    else:
        raise AssertionError("reading a missing file must raise FileNotFoundError")


def check_workspace_root(env, workspace: Path, root: str) -> None:
    """An environment started with ``workdir=root``: commands start there, absolute paths under it are the
    workspace's, and what the agent leaves there comes back with ``copy_out``."""
    assert env.workdir == root
    assert env.run("pwd; ls capsule/data", 10).stdout.split() == [root, "values.csv"]
    assert env.read_file(f"{root}/capsule/data/values.csv") == b"1\n2\n3\n"
    env.write_file(f"{root}/answers/report.json", "{}")
    assert env.run(f"cat {root}/answers/report.json && echo made > {root}/made-at-root.txt", 10).stdout == "{}"
    env.copy_out(workspace)
    assert (workspace / "answers" / "report.json").read_text() == "{}"
    assert (workspace / "made-at-root.txt").read_text() == "made\n"


PYTHON_CASES = {
    "ok": "import numpy as np\nprint(float(np.arange(4).sum()))\n",
    "error": "print('before')\nraise ValueError('bad input')\n",
    "exit": "import sys\nprint('x', file=sys.stderr)\nsys.exit(4)\n",
    "timeout": "import time\nprint('start', flush=True)\ntime.sleep(30)\n",
}


def python_results(env) -> dict:
    """Each case's result; the timeout case under a 1 s limit, the others with time to spare (numpy's import)."""
    return {name: env.run_python(source, 1 if name == "timeout" else 60) for name, source in PYTHON_CASES.items()}


def check_python(results: dict) -> None:
    assert results["ok"] == {"status": "ok", "exit_code": 0, "stdout": "6.0\n", "stderr": ""}
    assert results["error"]["status"] == "error" and results["error"]["exit_code"] == 1
    assert 'File "./main.py", line 2' in results["error"]["stderr"]
    assert results["exit"] == {"status": "error", "exit_code": 4, "stdout": "", "stderr": "x\n"}
    assert results["timeout"]["status"] == "timeout" and results["timeout"]["exit_code"] is None


def no_process_with(marker: str) -> bool:
    return not process_with(marker)
