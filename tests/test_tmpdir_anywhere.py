"""Isolation wherever the temporary folder is: ``$TMPDIR`` outside ``/tmp`` (a Slurm node's scratch disk, a
shared machine's ``/var/tmp``, a home folder, another file system such as ``/dev/shm``) works for every sandbox
kind and for the self-test.

The executors make each run's work folder under ``$TMPDIR``; a child's fresh mounts must then still give it its
own copy of that folder (and nothing else of the folder holding it), as they do for a work folder under the
private ``/tmp``. Each place is a fresh folder made for the test, with a stranger's file next to where the runs'
folders go: no child may see it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pytest_agentbench.sandbox.limits import package_parent

from helpers.bench_runs import SHARED_DATA, assert_sandboxed_step_passed, oracle_step_argv
from helpers.capabilities import needs

pytestmark = [pytest.mark.isolation]

# where: the folder $TMPDIR names is made below it (each on this machine whatever it runs on)
PLACES = {
    "var-tmp": "/var/tmp",  # a shared machine's usual choice; not a folder any sandbox shows
    "dev-shm": "/dev/shm",  # another file system (a tmpfs), as a node's scratch disk is
    "home": os.path.expanduser("~"),  # a folder every sandbox replaces by an empty one
}
STRANGER = "another-run.txt"


# (the fast loop takes one place; the others, about 10 s each, are slow)
@pytest.fixture(params=[pytest.param(p, marks=[pytest.mark.slow] if p != "var-tmp" else []) for p in sorted(PLACES)])
def tmpdir_elsewhere(request) -> Path:
    needs("bwrap")
    base = PLACES[request.param]
    if not os.access(base, os.W_OK):
        pytest.skip(f"{base} is not writable here")
    folder = Path(tempfile.mkdtemp(prefix="agentbench-tmpdir-", dir=base))
    folder.chmod(0o755)
    (folder / STRANGER).write_text("not yours")
    (folder / STRANGER).chmod(0o644)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def environment(tmpdir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TMPDIR": str(tmpdir),
        "PYTHONPATH": package_parent(),
        "AGENTBENCH_DATA_DIR": str(SHARED_DATA),
        "AGENTBENCH_OFFLINE": "1",
    }


# Every sandbox kind, each asked what it sees: its folder, the folder holding it, a file written and read back.
EVERY_KIND = r"""
import json, os, sys, tempfile
from pathlib import Path
from pytest_agentbench.envs.host import HostFactory
from pytest_agentbench.sandbox.executors import SubprocessExecutor
from pytest_agentbench.sandbox.forkserver import ForkServer
from pytest_agentbench.sandbox.isolation import probe
from pytest_agentbench.sandbox.limits import Limits
from pytest_agentbench.sandbox.selftest import run_self_test

CHECK = (
    "import json, os; open('mine.txt', 'w').write('kept'); "
    "print(json.dumps([os.getuid(), open('mine.txt').read(), sorted(os.listdir('..'))]))"
)
out = {"isolation": probe().mode, "tempdir": tempfile.gettempdir()}
fork = ForkServer(preload=())
try:
    done = fork.run(CHECK, limits=Limits(timeout=120))
finally:
    fork.close()
out["fork"] = [done.exit_code, done.stdout.strip(), done.stderr[-1500:]]
done = SubprocessExecutor().run(CHECK, limits=Limits(timeout=120))
out["subprocess"] = [done.exit_code, done.stdout.strip(), done.stderr[-1500:]]
env = HostFactory(network="none").start(Path(tempfile.mkdtemp()))
try:
    done = env.run("echo kept > mine.txt && cat mine.txt && ls " + json.dumps(tempfile.gettempdir()), 120)
    out["host"] = [done.exit_code, done.stdout.strip(), done.stderr[-1500:]]
    out["host_tool"] = env.run_python(CHECK, 120)
finally:
    env.stop()
test = run_self_test()
out["self_test"] = [test.ok, test.describe()]
print(json.dumps(out, default=str))
"""


def test_every_sandbox_kind_and_the_self_test_work_with_tmpdir_outside_tmp(tmpdir_elsewhere):
    """The fork server, the fresh-interpreter executor, host-environment commands and tool scripts, and the
    self-test: each runs as uid 65534 in a folder of its own, and none sees the stranger's file in $TMPDIR."""
    done = subprocess.run(
        [sys.executable, "-c", EVERY_KIND],
        cwd="/",
        env=environment(tmpdir_elsewhere),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["isolation"] != "none" and out["tempdir"] == str(tmpdir_elsewhere), out
    for kind in ("fork", "subprocess"):
        code, stdout, stderr = out[kind]
        assert code == 0 and stderr == "", (kind, out[kind])
        uid, kept, beside = json.loads(stdout)
        assert uid == 65534 and kept == "kept", (kind, out[kind])
        assert STRANGER not in beside and len(beside) == 1, (kind, beside)  # only its own folder
    tool = out["host_tool"]
    assert tool["status"] == "ok", tool
    uid, kept, beside = json.loads(tool["stdout"])
    assert uid == 65534 and kept == "kept" and STRANGER not in beside, tool
    code, stdout, stderr = out["host"]
    assert code == 0 and stdout.splitlines()[0] == "kept" and STRANGER not in stdout, out["host"]
    assert out["self_test"][0] is True, out["self_test"]


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("executor", ["fork", "subprocess"])
def test_a_scicode_run_with_tmpdir_outside_tmp_passes(tmpdir_elsewhere, executor, tmp_path):
    """`TMPDIR=... pytest --bench=scicode --model=oracle` as a user runs it: the self-test passes (no exit 4) and
    the step is scored in the sandbox and passes."""
    done = subprocess.run(
        [
            sys.executable,
            *oracle_step_argv(
                f"--bench-set=executor={executor}",
                f"--bench-cache-dir={tmp_path / 'cache'}",
                f"--bench-report-dir={tmp_path / 'reports'}",
            ),
        ],
        cwd=tmp_path,
        env=environment(tmpdir_elsewhere),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert_sandboxed_step_passed(done, tmp_path)
