"""The sandbox works wherever Python is installed.

A REAL venv made under /tmp for this module (``python -m venv --system-site-packages``: numpy, scipy, h5py and
the package come from the site folders and $PYTHONPATH the test gives it) is used through four spellings: its
own path, a linked folder next to it, a link in the home folder (every sandbox replaces the home folder by an
empty one) and a relative path. Each spelling runs every sandbox kind with that interpreter (fork server,
fresh-interpreter launcher, targets rebuild, host-environment commands and tool scripts, the self-test) and a
real SciCode run as a user starts it (fresh cache: the targets are rebuilt). A self-test that fails ends the
session with exit 4 naming what is hidden. Under CI=true a machine that cannot isolate fails these tests.

The README's main command with the venv under /tmp (15/15 problems, 50/50 steps) is
``test_readme_main_command_with_a_venv_under_tmp``: several minutes, so it runs only with
AGENTBENCH_LONG_TESTS=1.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy
import pytest

from pytest_agentbench.pytest_plugin.distribution.remote import refusal_of
from pytest_agentbench.sandbox.isolation import NO_ISOLATION, links_on_the_way
from pytest_agentbench.sandbox.limits import package_parent
from pytest_agentbench.sandbox.selftest import run_self_test

from helpers.bench_runs import SHARED_DATA, assert_sandboxed_step_passed, oracle_step_argv
from helpers.capabilities import needs
from helpers.scicode_builders import PROBLEMS, TARGETS

SPELLINGS = ["tmp", "linked-folder", "home-link", "relative"]


class Venv:
    """The venv under /tmp and its spellings."""

    def __init__(self, root: Path, home_link: Path) -> None:
        self.root, self.home_link = root, home_link
        self.path = root / "venv"

    def argv0(self, spelling: str) -> tuple[str, Path]:
        """The interpreter as spelt, and the folder to start it from."""
        return {
            "tmp": (str(self.path / "bin" / "python3"), self.root),
            "linked-folder": (str(self.root / "link" / "bin" / "python3"), self.root),
            "home-link": (str(self.home_link / "bin" / "python3"), self.root),
            "relative": ("venv/bin/python3", self.root),
        }[spelling]

    def env(self, **extra: str) -> dict[str, str]:
        """The test's environment, the package and this interpreter's site folders on $PYTHONPATH (a venv of a
        venv would not see the outer one's packages through --system-site-packages)."""
        path = [package_parent(), *site.getsitepackages()]
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(path),
            "AGENTBENCH_DATA_DIR": str(SHARED_DATA),
            "AGENTBENCH_OFFLINE": "1",
            **extra,
        }


@pytest.fixture(scope="module")
def venv() -> Venv:
    needs("bwrap")
    root = Path(tempfile.mkdtemp(prefix="agentbench-anywhere-", dir="/tmp"))
    root.chmod(0o755)
    home_link = Path(os.path.expanduser("~")) / f".{root.name}"
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root / "venv")],
            check=True,
            timeout=300,
            capture_output=True,
        )
        (root / "link").symlink_to("venv")
        home_link.symlink_to(root / "venv")
        yield Venv(root, home_link)
    finally:
        if home_link.is_symlink():
            home_link.unlink()
        shutil.rmtree(root, ignore_errors=True)


def run_with(venv: Venv, spelling: str, args: list[str], timeout: float, **env: str) -> subprocess.CompletedProcess:
    argv0, cwd = venv.argv0(spelling)
    return subprocess.run([argv0, *args], cwd=cwd, env=venv.env(**env), capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- every sandbox kind, at the API

EVERY_KIND = r"""
import json, sys, tempfile
from pathlib import Path
from pytest_agentbench.benchmarks.scicode.h5codec import read_step_targets
from pytest_agentbench.benchmarks.scicode.targets import rebuild_targets
from pytest_agentbench.envs.host import HostFactory
from pytest_agentbench.sandbox.executors import SubprocessExecutor
from pytest_agentbench.sandbox.forkserver import ForkServer
from pytest_agentbench.sandbox.isolation import probe
from pytest_agentbench.sandbox.limits import Limits
from pytest_agentbench.sandbox.selftest import run_self_test

CHECK = "import os, sys, numpy, scipy, h5py; print(sys.executable, os.path.exists(sys.executable))"
problem = json.loads(sys.stdin.read())
out = {"executable": sys.executable, "isolation": probe().mode}
fork = ForkServer(preload=("numpy",))
try:
    done = fork.run(CHECK, limits=Limits(timeout=120))
finally:
    fork.close()
out["fork"] = [done.exit_code, done.stdout.strip(), done.stderr[-1500:]]
done = SubprocessExecutor().run(CHECK, limits=Limits(timeout=120))
out["subprocess"] = [done.exit_code, done.stdout.strip(), done.stderr[-1500:]]
targets = Path(tempfile.mkdtemp()) / "targets.h5"
report = rebuild_targets([problem], targets, timeout=120)
number = problem["sub_steps"][0]["step_number"]
out["rebuild"] = [report, [float(v) for v in read_step_targets(str(targets), number)] if targets.exists() else None]
env = HostFactory().start(Path(tempfile.mkdtemp()))
try:
    done = env.run(sys.executable + " -c 'import sys, numpy, scipy, h5py, pytest_agentbench; print(sys.executable)'",
                   120)
    out["host"] = [done.exit_code, done.stdout.strip(), done.stderr[-1500:]]
    out["host_tool"] = env.run_python(CHECK, 120)
finally:
    env.stop()
test = run_self_test()
out["self_test"] = [test.ok, test.describe()]
print(json.dumps(out, default=str))
"""


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.isolation
@pytest.mark.slow
def test_every_sandbox_kind_runs_an_interpreter_under_tmp(venv, spelling):
    """Started through each spelling, the venv's interpreter runs scripts on the fork server and in a fresh
    interpreter, rebuilds targets from ground truth, runs host-environment commands and tool scripts, and passes
    the self-test: every sandbox sees the interpreter at the path it was started by."""
    problem = PROBLEMS[2]  # 3.1: def six(): return 6
    argv0, cwd = venv.argv0(spelling)
    done = subprocess.run(
        [argv0, "-c", EVERY_KIND],
        cwd=cwd,
        env=venv.env(),
        input=json.dumps(problem),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    spelt = os.path.join(cwd, argv0) if not os.path.isabs(argv0) else argv0
    assert out["executable"] == spelt and out["isolation"] != "none"
    for kind in ("fork", "subprocess"):
        assert out[kind] == [0, f"{spelt} True", ""], (kind, out[kind])
    assert out["rebuild"] == [{"3.1": "ok"}, [float(v) for v in TARGETS["3.1"]]], out["rebuild"]
    assert out["host"] == [0, spelt, ""], out["host"]
    assert out["host_tool"]["status"] == "ok" and out["host_tool"]["stdout"].strip() == f"{spelt} True", out
    assert out["self_test"][0] is True and spelt in out["self_test"][1], out["self_test"]


INSIDE_A_HIDDEN_FOLDER = r"""
import json, sys, tempfile
from pathlib import Path
from pytest_agentbench.envs.host import HostFactory
from pytest_agentbench.sandbox.executors import SubprocessExecutor
from pytest_agentbench.sandbox.forkserver import ForkServer
from pytest_agentbench.sandbox.limits import Limits

hidden = sys.argv[1]
CHECK = ("import os, sys, numpy; print(os.path.exists(sys.executable), sorted(os.listdir(%r)))" % hidden)
limits = Limits(timeout=120, hidden=(hidden,))
fork = ForkServer(preload=("numpy",))
try:
    runs = {"fork": fork.run(CHECK, limits=limits), "subprocess": SubprocessExecutor().run(CHECK, limits=limits)}
finally:
    fork.close()
out = {kind: [r.exit_code, r.stdout.strip(), r.stderr[-1500:]] for kind, r in runs.items()}
env = HostFactory(hidden=(hidden,)).start(Path(tempfile.mkdtemp()))
try:
    done = env.run(sys.executable + " -c " + json.dumps(CHECK), 120)
    out["host"] = [done.exit_code, done.stdout.strip(), done.stderr[-1500:]]
finally:
    env.stop()
print(json.dumps(out))
"""


@pytest.mark.isolation
@pytest.mark.slow
def test_python_inside_a_hidden_folder_is_bound_again_on_top_of_its_mask(venv):
    """The folder around the venv is hidden (as a cache or report folder would be), with a secret beside the venv:
    in every sandbox the interpreter runs and imports numpy, and of the hidden folder only the venv (and the
    folders on the way to it) can be seen, never the secret."""
    (venv.root / "secret.txt").write_text("the answers")
    argv0, cwd = venv.argv0("tmp")
    done = subprocess.run(
        [argv0, "-c", INSIDE_A_HIDDEN_FOLDER, str(venv.root)],
        cwd=cwd,
        env=venv.env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for kind in ("fork", "subprocess", "host"):
        assert out[kind] == [0, "True ['venv']", ""], (kind, out[kind])


# ---------------------------------------------------------------- as a user runs it


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.e2e
@pytest.mark.isolation
@pytest.mark.slow
def test_a_scicode_run_with_a_venv_under_tmp_rebuilds_and_passes(venv, spelling, tmp_path):
    """`<venv>/bin/python3 -m pytest --bench=scicode ... --model=oracle` with a fresh cache: the targets are
    rebuilt in the fresh-interpreter sandbox and scored on the fork server; the header reports the self-test."""
    done = run_with(
        venv,
        spelling,
        oracle_step_argv(f"--bench-cache-dir={tmp_path / 'cache'}", f"--bench-report-dir={tmp_path / 'reports'}"),
        timeout=1200,
    )
    assert_sandboxed_step_passed(done, tmp_path)


@pytest.mark.e2e
@pytest.mark.isolation
@pytest.mark.slow
def test_a_self_test_failure_is_exit_4_before_any_item(venv, tmp_path):
    """The cache folder (hidden from children) is the venv itself: the interpreter cannot be seen in the sandbox.
    The session ends with exit 4 before any item, naming the interpreter, the folder and its option; nothing
    is recorded. Without --bench-require-isolation too."""
    reports = tmp_path / "reports"
    done = run_with(
        venv,
        "tmp",
        oracle_step_argv(f"--bench-cache-dir={venv.path}", f"--bench-report-dir={reports}"),
        timeout=600,
    )
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]
    message = done.stderr
    assert "the sandbox self-test failed" in message, message
    assert f"{venv.path}/bin/python3" in message and "--bench-cache-dir" in message and "fix:" in message, message
    assert not list(reports.rglob("steps.jsonl"))
    # --collect-only never runs it
    listed = run_with(
        venv,
        "tmp",
        [
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--bench=scicode",
            "-q",
            "--bench-split=validation",
            "--collect-only",
            "--bench-ids=3",
            f"--bench-cache-dir={venv.path}",
        ],
        timeout=600,
    )
    assert listed.returncode == 0 and "1 test collected" in listed.stdout, listed.stdout[-2000:] + listed.stderr


@pytest.mark.isolation
@pytest.mark.slow
def test_a_remote_host_whose_python_cannot_run_in_its_sandbox_is_refused_by_name(venv, tmp_path):
    """The host probe (what a remote worker's host runs before its worker starts) runs the self-test there with
    that host's own hidden folders; a host whose interpreter is hidden is refused, by name, with the cause."""
    code = "from pytest_agentbench.pytest_plugin.distribution.hostprobe import main; main()"
    request = json.dumps({"bench": "scicode", "split": "validation", "settings": {}})
    argv0, cwd = venv.argv0("tmp")

    def probe(**env: str) -> dict:
        done = subprocess.run(
            [argv0, "-c", code],
            cwd=cwd,
            env=venv.env(**env),
            input=request,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    good = probe(AGENTBENCH_CACHE_DIR=str(tmp_path / "cache"))
    assert "probe_error" not in good and good["self_test"].startswith("self-test passed"), good
    bad = probe(AGENTBENCH_CACHE_DIR=str(venv.path))
    refusal = refusal_of(
        "gw0",
        "ssh=worker-a",
        bad,
        {"version": bad["version"], "build": bad["build"], "data_hashes": bad.get("data_hashes", {})},
    )
    assert refusal is not None and "gw0 on ssh=worker-a" in refusal, refusal
    assert "self-test failed" in refusal and f"{venv.path}/bin/python3" in refusal, refusal
    assert "--bench-cache-dir" in refusal, refusal


# ---------------------------------------------------------------- the self-test at the API


@pytest.mark.isolation
def test_the_self_test_names_a_package_it_cannot_import():
    """numpy's site folder hidden (as if it were the report folder): the self-test fails naming numpy, the
    folder that is not visible and the option that hides it."""
    needs("bwrap")
    folder = os.path.dirname(os.path.dirname(numpy.__file__))
    outcome = run_self_test(hidden={folder: "--bench-report-dir"})
    assert outcome is not None and not outcome.ok
    text = outcome.describe()
    assert "cannot import numpy" in text and folder in text and "--bench-report-dir" in text, text


@pytest.mark.isolation
def test_the_self_test_runs_once_per_interpreter_and_binds_and_not_without_isolation(tmp_path):
    """A second call with other hidden folders that do not meet Python's gives the same outcome without running
    again; without isolation there is nothing to test."""
    needs("bwrap")
    first = run_self_test(hidden={str(tmp_path / "a"): "--bench-cache-dir"})
    again = run_self_test(hidden={str(tmp_path / "b"): "--bench-report-dir"})
    assert first is not None and first.ok, first
    assert again is first
    assert first.seconds > 0 and f"; {first.seconds:.1f} s)" in first.describe()  # timed, and says so
    assert run_self_test(NO_ISOLATION) is None


def test_links_on_the_way_are_found_as_realpath_follows_them(tmp_path):
    """A relative link, an absolute link and a link inside a linked folder, with `..` after a link."""
    (tmp_path / "real" / "bin").mkdir(parents=True)
    (tmp_path / "real" / "bin" / "python3").write_text("")
    (tmp_path / "a").symlink_to("real")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "real" / "up").symlink_to("bin/..")
    found = links_on_the_way(str(tmp_path / "b" / "up" / "bin" / "python3"))
    assert found == [
        (str(tmp_path / "b"), str(tmp_path / "a")),
        (str(tmp_path / "a"), "real"),
        (str(tmp_path / "real" / "up"), "bin/.."),
    ]
    assert os.path.realpath(tmp_path / "b" / "up" / "bin" / "python3") == str(tmp_path / "real" / "bin" / "python3")


# ---------------------------------------------------------------- the README's main command (long)


@pytest.mark.skipif(
    os.environ.get("AGENTBENCH_LONG_TESTS") != "1",
    reason="several minutes: the whole validation split; run with AGENTBENCH_LONG_TESTS=1",
)
@pytest.mark.e2e
@pytest.mark.isolation
@pytest.mark.slow
def test_readme_main_command_with_a_venv_under_tmp(venv, tmp_path):
    """LONG (several minutes): the README's main command, `-n 2` included, from a venv under /tmp with a fresh
    cache: 15 of 15 problems resolved, 50 of 50 steps passed."""
    done = run_with(
        venv,
        "tmp",
        [
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--bench=scicode",
            "--bench-split=validation",
            "--model=oracle",
            "-n",
            "2",
            f"--bench-data-dir={SHARED_DATA}",
            f"--bench-cache-dir={tmp_path / 'cache'}",
            f"--bench-report-dir={tmp_path / 'reports'}",
        ],
        timeout=3600,
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    assert "main problems resolved 15/15 (100.0%), subproblems passed 50/50 (100.0%)" in done.stdout, done.stdout[
        -5000:
    ]
