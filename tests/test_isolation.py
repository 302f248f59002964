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
from pathlib import Path

import pytest

from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.envs.host import HostFactory
from pytest_agentbench.sandbox import isolation as sandbox_isolation
from pytest_agentbench.sandbox.forkserver import ForkServer
from pytest_agentbench.sandbox.isolation import ISOLATION_ENV, NO_ISOLATION, SANDBOX_UID, bwrap_argv, probe
from pytest_agentbench.sandbox.limits import Limits, MiB
from pytest_agentbench.sandbox.options import isolation_from

from helpers.bench_runs import SHARED_DATA
from helpers.capabilities import needs
from helpers.executor_pairs import KINDS, executor_pair, process_with, wait_gone, wait_until
from helpers.network_listeners import Listener

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def isolation():
    return needs("bwrap")


@pytest.fixture(scope="module")
def executors(isolation):
    yield from executor_pair(isolation, preload=("numpy",))


def run(executors, kind: str, source: str, **kwargs):
    result = executors[kind].run(textwrap.dedent(source), limits=kwargs.pop("limits", Limits(timeout=60)), **kwargs)
    assert result.limit is None and result.exit_code == 0, result
    return result


# ---------------------------------------------------------------- who the child is


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.isolation
def test_child_is_an_unprivileged_user_without_capabilities(executors, kind):
    result = run(
        executors,
        kind,
        """
        import os
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
        print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())
        for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs"):
            print(key, status[key].strip())
    """,
    )
    lines = result.stdout.splitlines()
    assert lines[0] == f"{SANDBOX_UID} {SANDBOX_UID} {SANDBOX_UID} []"
    caps = dict(line.split() for line in lines[1:])
    assert all(int(caps[key], 16) == 0 for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"))
    assert caps["NoNewPrivs"] == "1"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.isolation
def test_child_sees_only_its_own_processes(executors, kind):
    result = run(
        executors,
        kind,
        """
        import os
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        others = [p for p in pids if p != os.getpid()]  # (a forked child's own command line is the server's)
        commands = [open(f"/proc/{p}/cmdline", "rb").read().replace(b"\\0", b" ").decode() for p in others]
        print(len(pids), any("test_isolation.py" in c for c in commands), os.getppid() == 0)
    """,
    )
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


@pytest.mark.isolation
def test_the_api_key_in_the_controllers_environment_is_unreadable(isolation):
    env = dict(os.environ, OPENAI_API_KEY="sk-agentbench-secret")
    done = subprocess.run(
        [sys.executable, "-c", SNOOPER.format(root=str(REPO))], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["isolated fork"] == seen["isolated subprocess"] == "not found"
    # not hollow: the same snooping succeeds without isolation (as root, or as the same user)
    assert seen["plain fork"] == seen["plain subprocess"] == "found"


# ---------------------------------------------------------------- nothing survives, nothing is written


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.isolation
def test_a_daemon_that_setsids_and_forks_is_gone_after_the_step(executors, kind):
    marker = f"7{KINDS.index(kind)}.125"
    run(
        executors,
        kind,
        f"""
        import os
        ready, started = os.pipe()  # not inherited over exec: it closes once the daemon is `sleep`
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", "{marker}"])
            os._exit(0)
        os.close(started)
        os.read(ready, 1)
        print("daemon started")
    """,
    )
    assert wait_gone(f"sleep\0{marker}", 30.0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.isolation
def test_writes_outside_the_work_folder_fail(executors, kind, tmp_path):
    import numpy

    targets = {
        "project": REPO / "agentbench-escape.txt",
        "home": Path.home() / "agentbench-escape.txt",
        "site-packages": Path(numpy.__file__).parents[1] / "agentbench-escape.pth",
        "package": REPO / "pytest_agentbench" / "agentbench_escape.py",
        "etc": Path("/etc/agentbench-escape"),
        "tmp_path": tmp_path / "agentbench-escape.txt",
    }
    result = run(
        executors,
        kind,
        f"""
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
    """,
    )
    outcome = json.loads(result.stdout)
    assert "written" not in outcome.values(), outcome
    assert not any(path.exists() for path in targets.values())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.isolation
def test_a_disk_fill_is_capped_and_leaves_nothing(executors, kind):
    result = run(
        executors,
        kind,
        """
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
    """,
        limits=Limits(timeout=120, disk=16 * MiB),
    )
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
@pytest.mark.isolation
def test_no_network(executors, kind, listener):
    socket.create_connection(("127.0.0.1", listener), timeout=5).close()  # reachable from here
    result = run(
        executors,
        kind,
        f"""
        import socket
        for address in (("127.0.0.1", {listener}), ("1.1.1.1", 53)):
            try:
                socket.create_connection(address, timeout=3).close()
                print("connected")
            except OSError as exc:
                print("blocked")
    """,
    )
    assert result.stdout.split() == ["blocked", "blocked"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.isolation
def test_private_folders_are_hidden(executors, kind, tmp_path):
    data = REPO / "pytest_agentbench" / "report"  # a folder the child sees otherwise (the package is bound in)
    result = run(
        executors,
        kind,
        f"""
        import os
        print(sorted(os.listdir({str(data)!r})))
    """,
        limits=Limits(timeout=60, hidden=(str(data),)),
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.isolation
def test_only_system_folders_python_and_the_package_exist(executors, kind):
    """A copy of the ground truth can lie anywhere on a machine (a second checkout, a download folder): the
    child sees the system's folders, Python and this package, and no other folder of the machine. Here:
    neither the project around the package nor the world-readable files beside the data dir."""
    data = Path(SHARED_DATA).resolve()
    probes = [
        str(REPO / "README.md"),
        str(REPO / "tests"),
        str(data.parent / "README.md"),
        str(data / "scicode" / "problems_dev.jsonl"),
    ]
    result = run(
        executors,
        kind,
        f"""
        import json, os, numpy, pytest_agentbench
        print(json.dumps([p for p in {probes!r} if os.path.exists(p)]))
        print(json.dumps(sorted(set(os.listdir("/")) - {set(sandbox_isolation.SYSTEM_TOPS)!r})))
    """,
    )
    visible, extra_tops = map(json.loads, result.stdout.splitlines())
    assert visible == [], visible
    allowed = {"dev", "proc", "tmp", *(p.split("/")[1] for p in sandbox_isolation.needed_paths())}
    assert set(extra_tops) <= allowed, extra_tops


@pytest.mark.isolation
def test_collected_files_come_back_capped(executors):
    for kind in KINDS:
        result = run(executors, kind, "open('channel.bin', 'wb').write(b'x' * 100)\n", collect={"channel.bin": 10})
        assert result.files == {"channel.bin": b"x" * 11}, kind


# ---------------------------------------------------------------- the host environment


@pytest.fixture
def hidden_data(tmp_path) -> Path:
    """A private data folder (with an answer file) that the host environment must hide."""
    secret = tmp_path / "data"
    secret.mkdir()
    (secret / "answers.json").write_text("{}")
    return secret


@pytest.fixture
def workspace(tmp_path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


def check_hidden_and_unseen_but_online(env, hidden_data: Path, listener: int) -> None:
    """What every isolated host environment command gets: no private data, no sight of the controller (this
    pytest process) nor of its loopback listeners, but outbound network (test_host_network.py tries every way)."""
    assert env.run(f"ls {hidden_data} | wc -l; cat {hidden_data}/answers.json || true", 30).stdout.split()[0] == "0"
    seen = env.run("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '", 30).stdout
    assert "test_isolation.py" not in seen
    needs("slirp4netns")
    outbound = Listener(socket.AF_INET, (needs("outbound-address"), 0))
    try:
        for (host, port), expected in (
            ((needs("outbound-address"), outbound.sock.getsockname()[1]), "net"),
            (("127.0.0.1", listener), ""),
        ):
            probe_net = f"python3 -c \"import socket; socket.create_connection(('{host}', {port}), 5); print('net')\""
            assert env.run(probe_net, 30).stdout.strip() == expected, (host, port)
    finally:
        outbound.close()


@pytest.mark.isolation
def test_host_environment_commands_are_isolated_with_outbound_network_only(isolation, workspace, hidden_data, listener):
    with HostFactory(hidden=[str(hidden_data)], isolation=isolation).start(workspace) as env:
        assert env.run("id -u; touch made.txt && echo written", 30).stdout.split() == [str(SANDBOX_UID), "written"]
        assert env.run(f"echo x > {REPO}/agentbench-escape.txt", 30).exit_code != 0
        check_hidden_and_unseen_but_online(env, hidden_data, listener)
        assert env.run("sleep 8181.5 > /dev/null 2>&1 &", 30).exit_code == 0
        # (the shell returns once it started the job; the job's exec of sleep may come a moment later)
        assert wait_until(lambda: process_with("sleep\x008181.5"), 60.0)  # a background job lives on between commands
    assert wait_gone("sleep\x008181.5", 30.0)  # and dies with the environment
    assert not (REPO / "agentbench-escape.txt").exists()


@pytest.mark.isolation
def test_host_environment_at_a_workspace_root_keeps_every_guarantee(isolation, workspace, hidden_data, listener):
    root = "/capsule/environment"
    with HostFactory(hidden=[str(hidden_data)], isolation=isolation).start(workspace, workdir=root) as env:
        who = env.run(
            "pwd; id -u; grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status | awk '{print $2}' | sort -u; "
            "touch made.txt && echo written",
            30,
        ).stdout.split()
        assert who == [root, str(SANDBOX_UID), "0000000000000000", "written"]
        assert (workspace / "made.txt").is_file()
        for path in (f"{REPO}/agentbench-escape.txt", "/capsule/escape.txt", "/escape.txt", "/usr/escape.txt"):
            assert env.run(f"echo x > {path}", 30).exit_code != 0, path
        check_hidden_and_unseen_but_online(env, hidden_data, listener)
        assert env.run("sleep 8282.5 > /dev/null 2>&1 &", 30).exit_code == 0
        assert wait_until(lambda: process_with("sleep\x008282.5"), 60.0)
        listing = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"
        assert env.run(f"{listing} | grep -c '^sleep 8282.5'", 30).stdout.strip() == "1"  # one PID namespace
    assert wait_gone("sleep\x008282.5", 30.0)
    assert not (REPO / "agentbench-escape.txt").exists() and not os.path.exists("/capsule/escape.txt")


@pytest.mark.isolation
def test_the_machine_is_rebuilt_read_only_around_a_relocated_folder(isolation, tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    (source / "in.txt").write_text("in\n")
    # a root under an existing folder: its other entries stay (read-only), /usr keeps working
    script = (
        "cat /usr/agentbench-ws/in.txt; ls /usr/bin/env; test -L /bin && echo link; "
        "echo x > /usr/agentbench-ws/out.txt && echo written; touch /usr/w 2>/dev/null || echo refused"
    )
    argv = bwrap_argv(isolation, relocated=[(str(source), "/usr/agentbench-ws")]) + ["bash", "-c", script]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    expected = ["in", "/usr/bin/env", "written", "refused"]
    if os.path.islink("/bin"):
        expected.insert(2, "link")
    assert done.stdout.split() == expected, done.stderr
    assert (source / "out.txt").read_text() == "x\n" and not os.path.exists("/usr/agentbench-ws")
    with pytest.raises(ValueError, match="kernel"):
        bwrap_argv(isolation, relocated=[(str(source), "/proc/ws")])


# ---------------------------------------------------------------- where isolation is impossible


def test_the_probe_says_why_and_require_isolation_refuses(monkeypatch):
    monkeypatch.setenv(ISOLATION_ENV, "off")
    try:
        found = probe(refresh=True)
        assert not found.active and found.describe() == f"none (turned off with ${ISOLATION_ENV}=off)"
        with pytest.raises(ConfigError, match="--bench-require-isolation: this machine cannot isolate"):
            isolation_from({"require_isolation": True})
        assert isolation_from({"require_isolation": False}) == found
        assert not ForkServer(preload=()).isolation.active
    finally:
        monkeypatch.delenv(ISOLATION_ENV)
        probe(refresh=True)


def test_no_isolation_is_a_plain_value():
    assert not NO_ISOLATION.active and NO_ISOLATION.describe().startswith("none (")


def test_the_runs_private_folders_are_hidden_from_scoring_children(tmp_path):
    from pytest_agentbench.sandbox.options import limits_from

    opts = {
        "memory_limit": 1.0,
        "data_dir": tmp_path / "data",
        "cache_dir": tmp_path / "cache",
        "report_dir": tmp_path / "reports",
    }
    limits = limits_from(opts, timeout=5)
    assert limits.hidden == tuple(str(tmp_path / name) for name in ("data", "cache", "reports"))
    assert limits.memory == 1 << 30 and limits.timeout == 5


@pytest.mark.parametrize("pythonpath", [".", f"{REPO}/", str(REPO.parent)])
def test_a_checkout_on_the_python_path_binds_only_the_package(pythonpath):
    """Run from a checkout with the project on PYTHONPATH (spelt relatively, with a trailing slash, or a folder
    around it): the sandbox still gets only the package's own folder, never the project (its reports, its
    cache of rebuilt targets) nor a folder around it."""
    code = "import json; from pytest_agentbench.sandbox import isolation as I; print(json.dumps(I.needed_paths()))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": pythonpath},
    )
    assert done.returncode == 0, done.stderr
    paths = json.loads(done.stdout)
    package = str(REPO / "pytest_agentbench")
    if not any(package.startswith(p.rstrip("/") + "/") for p in paths if p != package):  # an editable checkout
        assert package in paths, paths
        around = [p for p in paths if p == str(REPO) or str(REPO).startswith(p.rstrip("/") + "/")]
        assert around == [], paths


def test_the_environment_switch_is_read_at_every_probe_not_kept_with_the_machines_answer(isolation, monkeypatch):
    """A process running several sessions (a notebook, pytester runs) gets each session's own setting: a session
    with isolation turned off leaves the next one isolated again."""
    machine = probe()
    assert machine.active, machine.why
    monkeypatch.setenv(ISOLATION_ENV, "off")
    turned_off = probe()
    assert not turned_off.active and turned_off.why == f"turned off with ${ISOLATION_ENV}=off"
    monkeypatch.delenv(ISOLATION_ENV)
    assert probe() == machine
