"""OS isolation of the children that run model code: what a child can and cannot do, under both executors
and in the host environment. In CI (CI=true) a machine that cannot isolate fails these tests instead of
skipping them."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.envs.host import HostFactory
from pytest_agentbench.sandbox.executors import SubprocessExecutor
from pytest_agentbench.sandbox.forkserver import ForkServer
from pytest_agentbench.sandbox.isolation import ISOLATION_ENV, NO_ISOLATION, SANDBOX_UID, probe
from pytest_agentbench.sandbox.limits import Limits, MiB
from pytest_agentbench.sandbox.options import isolation_from

KINDS = ["fork", "subprocess"]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def isolation():
    found = probe()
    if not found.active:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must be able to isolate children (install bubblewrap): isolation {found.describe()}")
        pytest.skip(f"this machine cannot isolate: {found.why}")
    return found


@pytest.fixture(scope="module")
def executors(isolation):
    fork = ForkServer(preload=("numpy",), isolation=isolation)
    yield {"fork": fork, "subprocess": SubprocessExecutor(isolation=isolation)}
    fork.close()


def run(executors, kind: str, source: str, **kwargs):
    result = executors[kind].run(textwrap.dedent(source), limits=kwargs.pop("limits", Limits(timeout=60)), **kwargs)
    assert result.limit is None and result.exit_code == 0, result
    return result


def process_with(marker: str) -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            pass
    return False


def wait_gone(marker: str, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while process_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ---------------------------------------------------------------- who the child is

@pytest.mark.parametrize("kind", KINDS)
def test_child_is_an_unprivileged_user_without_capabilities(executors, kind):
    result = run(executors, kind, """
        import os
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
        print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())
        for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs"):
            print(key, status[key].strip())
    """)
    lines = result.stdout.splitlines()
    assert lines[0] == f"{SANDBOX_UID} {SANDBOX_UID} {SANDBOX_UID} []"
    caps = dict(line.split() for line in lines[1:])
    assert all(int(caps[key], 16) == 0 for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"))
    assert caps["NoNewPrivs"] == "1"


@pytest.mark.parametrize("kind", KINDS)
def test_child_sees_only_its_own_processes(executors, kind):
    result = run(executors, kind, """
        import os
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        others = [p for p in pids if p != os.getpid()]  # (a forked child's own command line is the server's)
        commands = [open(f"/proc/{p}/cmdline", "rb").read().replace(b"\\0", b" ").decode() for p in others]
        print(len(pids), any("test_isolation.py" in c for c in commands), os.getppid() == 0)
    """)
    count, controller_seen, parent_hidden = result.stdout.split()
    assert int(count) <= 4 and controller_seen == "False"
    if kind == "fork":  # the fork server forked the child from outside its namespace: out of sight
        assert parent_hidden == "True"


# ---------------------------------------------------------------- secrets of the controller

SNOOPER = """
import json, os, sys, textwrap
sys.path.insert(0, {root!r})
from pytest_agentbench.sandbox.executors import SubprocessExecutor
from pytest_agentbench.sandbox.forkserver import ForkServer
from pytest_agentbench.sandbox.isolation import NO_ISOLATION, probe
from pytest_agentbench.sandbox.limits import Limits
# the child looks for the key in every environment it can read, this process's first
child = textwrap.dedent('''
    import os
    found = []
    for pid in ["{{me}}"] + [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            if b"sk-agentbench-secret" in open(f"/proc/{{pid}}/environ", "rb").read():
                found.append(pid)
        except OSError:
            pass
    print("found" if found else "not found")
'''.replace("{{me}}", str(os.getpid())))
out = {{}}
for name, isolation in (("isolated", probe()), ("plain", NO_ISOLATION)):
    for kind, executor in (("fork", ForkServer(preload=(), isolation=isolation)),
                           ("subprocess", SubprocessExecutor(isolation=isolation))):
        out[f"{{name}} {{kind}}"] = executor.run(child, limits=Limits(timeout=60)).stdout.strip()
        if kind == "fork":
            executor.close()
print(json.dumps(out))
"""


def test_the_api_key_in_the_controllers_environment_is_unreadable(isolation):
    env = dict(os.environ, OPENAI_API_KEY="sk-agentbench-secret")
    done = subprocess.run([sys.executable, "-c", SNOOPER.format(root=str(REPO))], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["isolated fork"] == seen["isolated subprocess"] == "not found"
    # not hollow: the same snooping succeeds without isolation (as root, or as the same user)
    assert seen["plain fork"] == seen["plain subprocess"] == "found"


# ---------------------------------------------------------------- nothing survives, nothing is written

@pytest.mark.parametrize("kind", KINDS)
def test_a_daemon_that_setsids_and_forks_is_gone_after_the_step(executors, kind):
    marker = f"7{KINDS.index(kind)}.125"
    run(executors, kind, f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", "{marker}"])
            os._exit(0)
        time.sleep(0.3)
        print("daemon started")
    """)
    assert wait_gone(f"sleep\0{marker}")


@pytest.mark.parametrize("kind", KINDS)
def test_writes_outside_the_work_folder_fail(executors, kind, tmp_path):
    import numpy

    targets = {"project": REPO / "agentbench-escape.txt", "home": Path.home() / "agentbench-escape.txt",
               "site-packages": Path(numpy.__file__).parents[1] / "agentbench-escape.pth",
               "package": REPO / "pytest_agentbench" / "agentbench_escape.py",
               "etc": Path("/etc/agentbench-escape"), "tmp_path": tmp_path / "agentbench-escape.txt"}
    result = run(executors, kind, f"""
        import json
        out = {{}}
        for name, path in {json.dumps({k: str(v) for k, v in targets.items()})}.items():
            try:
                with open(path, "a") as fh:
                    fh.write("x")
                out[name] = "written"
            except OSError as exc:
                out[name] = type(exc).__name__
        open("inside.txt", "w").write("ok")
        open("/tmp/scratch.txt", "w").write("ok")
        print(json.dumps(out))
    """)
    outcome = json.loads(result.stdout)
    assert "written" not in outcome.values(), outcome
    assert not any(path.exists() for path in targets.values())


@pytest.mark.parametrize("kind", KINDS)
def test_a_disk_fill_is_capped_and_leaves_nothing(executors, kind):
    result = run(executors, kind, """
        import os
        written = files = 0
        chunk = b"x" * (1 << 20)
        for folder in (".", "/tmp", "/dev/shm"):
            try:
                for i in range(10_000):
                    with open(os.path.join(folder, f"agentbench-fill-{i}"), "wb") as fh:
                        fh.write(chunk)
                    written += 1
            except OSError:
                pass
        try:
            for i in range(1_000_000):  # many empty files under any per-file cap
                open(f"/tmp/agentbench-empty-{i}", "w").close()
                files += 1
        except OSError:
            pass
        print(written, files, os.path.realpath(".").replace("/", "|"))  # (the work folder's path is shown as ".")
    """, limits=Limits(timeout=120, disk=16 * MiB))
    written, files, work = result.stdout.split()
    assert int(written) <= 2 * 17 and int(files) < 1_000_000  # /tmp (with the work folder) and /dev/shm, 16 MiB each
    assert not Path(work.replace("|", "/")).exists() and not list(Path("/tmp").glob("agentbench-fill-*"))
    assert not list(Path("/tmp").glob("agentbench-empty-*"))


# ---------------------------------------------------------------- no network, no private folders

@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


@pytest.mark.parametrize("kind", KINDS)
def test_no_network(executors, kind, listener):
    socket.create_connection(("127.0.0.1", listener), timeout=5).close()  # reachable from here
    result = run(executors, kind, f"""
        import socket
        for address in (("127.0.0.1", {listener}), ("1.1.1.1", 53)):
            try:
                socket.create_connection(address, timeout=3).close()
                print("connected")
            except OSError as exc:
                print("blocked")
    """)
    assert result.stdout.split() == ["blocked", "blocked"]


@pytest.mark.parametrize("kind", KINDS)
def test_private_folders_are_hidden(executors, kind, tmp_path):
    data = REPO / "tests"  # any folder the child could otherwise read
    result = run(executors, kind, f"""
        import os
        print(sorted(os.listdir({str(data)!r})))
    """, limits=Limits(timeout=60, hidden=(str(data),)))
    assert result.stdout.strip() == "[]"


def test_collected_files_come_back_capped(executors):
    for kind in KINDS:
        result = run(executors, kind, "open('channel.bin', 'wb').write(b'x' * 100)\n", collect={"channel.bin": 10})
        assert result.files == {"channel.bin": b"x" * 11}, kind


# ---------------------------------------------------------------- the host environment

def test_host_environment_commands_are_isolated_but_keep_the_network(isolation, tmp_path, listener):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    secret = tmp_path / "data"
    secret.mkdir()
    (secret / "answers.json").write_text("{}")
    factory = HostFactory(hidden=[str(secret)], isolation=isolation)
    with factory.start(workspace) as env:
        assert env.run("id -u; touch made.txt && echo written", 30).stdout.split() == [str(SANDBOX_UID), "written"]
        assert env.run(f"ls {secret} | wc -l; cat {secret}/answers.json || true", 30).stdout.split()[0] == "0"
        assert env.run(f"echo x > {REPO}/agentbench-escape.txt", 30).exit_code != 0
        seen = env.run("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '", 30).stdout
        assert "test_isolation.py" not in seen  # the controller (this pytest process) is out of sight
        probe_net = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {listener}), 5); print('net')\""
        assert env.run(probe_net, 30).stdout.strip() == "net"
        assert env.run("sleep 8181.5 > /dev/null 2>&1 &", 30).exit_code == 0
        assert process_with("sleep\x008181.5")  # a background job lives on between commands
    assert wait_gone("sleep\x008181.5")  # and dies with the environment
    assert not (REPO / "agentbench-escape.txt").exists()


# ---------------------------------------------------------------- where isolation is impossible

def test_the_probe_says_why_and_require_isolation_refuses(monkeypatch):
    monkeypatch.setenv(ISOLATION_ENV, "off")
    try:
        found = probe(refresh=True)
        assert not found.active and found.describe() == f"none (turned off with ${ISOLATION_ENV}=off)"
        with pytest.raises(ConfigError, match="--bench-require-isolation: this machine cannot isolate"):
            isolation_from({"require_isolation": True})
        assert isolation_from({"require_isolation": False}) is found
        assert not ForkServer(preload=()).isolation.active
    finally:
        monkeypatch.delenv(ISOLATION_ENV)
        probe(refresh=True)


def test_no_isolation_is_a_plain_value():
    assert not NO_ISOLATION.active and NO_ISOLATION.describe().startswith("none (")


def test_the_runs_private_folders_are_hidden_from_scoring_children(tmp_path):
    from pytest_agentbench.sandbox.options import limits_from

    opts = {"memory_limit": 1.0, "data_dir": tmp_path / "data", "cache_dir": tmp_path / "cache",
            "report_dir": tmp_path / "reports"}
    limits = limits_from(opts, timeout=5)
    assert limits.hidden == tuple(str(tmp_path / name) for name in ("data", "cache", "reports"))
    assert limits.memory == 1 << 30 and limits.timeout == 5
