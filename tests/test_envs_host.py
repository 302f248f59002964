"""The host environment against the environment contract, plus its own clean-up."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from pytest_agentbench.envs import EnvError, EnvSkip
from pytest_agentbench.envs.host import HostFactory
from pytest_agentbench.sandbox.isolation import NO_ISOLATION

from helpers import envs_contract as contract
from helpers.capabilities import needs

ROOT = "/workspace/core-bench"  # a workspace root this machine does not have


@pytest.fixture
def isolated():
    """The host environment maps a workspace root only in its sandbox: no isolation, no mapping (CI must have it)."""
    return needs("bwrap")


@pytest.fixture
def workspace(tmp_path):
    return contract.make_workspace(tmp_path)


def test_commands_files_and_copy_out(workspace):
    with HostFactory().start(workspace, name="t") as env:
        contract.check_command_basics(env)
        contract.check_files(env, workspace)
    assert not workspace.exists()


def test_timeout_and_flood(workspace):
    with HostFactory().start(workspace) as env:
        contract.check_timeout_kills_the_group(env, "3131.25")
        contract.check_flood_is_trimmed(env)
    assert contract.no_process_with("sleep\x003131.25")  # the background job it left, killed by stop()


def test_stop_kills_background_jobs_and_keeps_workspace_when_asked(workspace):
    env = HostFactory(keep_workspaces=True).start(workspace)
    assert env.run("sleep 3232.5 > /dev/null 2>&1 &", 10).exit_code == 0
    assert not contract.no_process_with("sleep\x003232.5")
    env.stop()
    env.stop()  # idempotent
    assert contract.no_process_with("sleep\x003232.5")
    assert workspace.is_dir()


def test_run_python_matches_the_contract(workspace):
    with HostFactory().start(workspace) as env:
        contract.check_python(contract.python_results(env))


def test_gpu_needs_bench_gpus(workspace):
    with pytest.raises(EnvSkip, match="--bench-set gpus"):
        HostFactory().start(workspace, needs_gpu=True)
    HostFactory(gpus="0").start(workspace, needs_gpu=True).stop()


def test_bad_timeout_is_refused(workspace):
    with HostFactory().start(workspace) as env, pytest.raises(ValueError, match="timeout must be positive"):
        env.run("true", 0)


# ---------------------------------------------------------------- the workspace at a root path (isolated)


@pytest.mark.isolation
def test_commands_work_at_the_requested_root(isolated, workspace):
    with HostFactory(isolation=isolated).start(workspace, workdir=ROOT) as env:
        assert not env.workdir_note
        contract.check_workspace_root(env, workspace, ROOT)
        assert env.run("ls /workspace", 30).stdout.split() == ["core-bench"]
        contract.check_command_basics(env)  # pwd == env.workdir
        contract.check_files(env, workspace)  # relative paths, copy_out into the item's own folder
        # absolute paths are the sandbox's: the root, its /tmp (where the agent's tools put scratch files)
        assert env.run(f"echo made > {ROOT}/at-root.txt && echo scratch > /tmp/s.txt", 30).exit_code == 0
        assert env.read_file(f"{ROOT}/at-root.txt") == b"made\n" and env.read_file("/tmp/s.txt") == b"scratch\n"
        env.write_file(f"{ROOT}/deep/er.txt", "w")
        assert env.run(f"cat {ROOT}/deep/er.txt", 30).stdout == "w"
        assert (workspace / "at-root.txt").is_file() and (workspace / "deep" / "er.txt").is_file()
    assert not os.path.exists(ROOT)  # nothing was made on this machine


@pytest.mark.isolation
def test_environments_at_the_same_root_at_once_see_only_their_own_files(isolated, tmp_path):
    factory = HostFactory(isolation=isolated)
    spaces = [tmp_path / name for name in ("one", "two")]
    for space in spaces:
        space.mkdir()
        (space / "mine.txt").write_text(space.name)
    envs = [factory.start(space, workdir=ROOT) for space in spaces]
    try:
        seen: dict[str, str] = {}
        both_wrote = threading.Barrier(2, timeout=60)

        def work(env, name):  # both at once, each in its own namespace: write, and once both wrote, list the path
            env.run(f"echo {name} > {ROOT}/wrote-{name}.txt", 30)
            both_wrote.wait()
            seen[name] = env.run(f"cat {ROOT}/mine.txt; ls {ROOT}", 30).stdout

        threads = [threading.Thread(target=work, args=(env, space.name)) for env, space in zip(envs, spaces)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert seen == {"one": "onemine.txt\nwrote-one.txt\n", "two": "twomine.txt\nwrote-two.txt\n"}
        assert envs[0].read_file("mine.txt") == b"one" and envs[1].read_file(f"{ROOT}/mine.txt") == b"two"
        assert sorted(p.name for p in spaces[0].iterdir()) == ["mine.txt", "wrote-one.txt"]
    finally:
        for env in envs:
            env.stop()


@pytest.fixture
def outside_tmp(tmp_path):
    """A folder outside /tmp (the sandbox has its own /tmp, which would hide a folder there anyway)."""
    if not str(tmp_path).startswith("/tmp/"):
        yield tmp_path
        return
    base = Path(tempfile.mkdtemp(prefix="agentbench-envs-host-", dir="/var/tmp"))
    base.chmod(0o755)  # readable by the sandbox's uid, as a folder on the machine normally is
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.isolation
def test_the_host_folder_is_seen_only_at_the_root(isolated, outside_tmp):
    space = outside_tmp / "space"
    space.mkdir()
    (space / "mine.txt").write_text("x")
    (outside_tmp / "beside.txt").write_text("beside\n")
    with HostFactory(isolation=isolated).start(space, workdir=ROOT) as env:
        looks = (
            f"ls -A {space} | wc -l; cat {space}/mine.txt 2>/dev/null || echo unseen; "
            f"touch {space}/w 2>/dev/null || echo refused; cat {outside_tmp}/beside.txt 2>/dev/null || echo unseen; "
            f"touch {outside_tmp}/w 2>/dev/null || echo refused; touch /workspace/w 2>/dev/null || echo refused; "
            f"touch /w 2>/dev/null || echo refused; cat mine.txt"
        )
        # (beside.txt: a data folder of the machine is not in the sandbox at all, see sandbox.isolation.SYSTEM_TOPS)
        assert env.run(looks, 30).stdout.split() == [
            "0",
            "unseen",
            "refused",
            "unseen",
            "refused",
            "refused",
            "refused",
            "x",
        ]
        with pytest.raises(PermissionError, match="cannot be read from outside"):
            env.read_file(f"{space}/mine.txt")  # the controller reads what the sandbox would see: nothing
    assert sorted(p.name for p in outside_tmp.iterdir()) == ["beside.txt"]  # the workspace gone, nothing added


@pytest.mark.isolation
def test_a_root_inside_a_hidden_folder_shows_only_the_workspace_there(isolated, tmp_path, outside_tmp):
    (outside_tmp / "answers.json").write_text("{}")
    space = tmp_path / "space"
    space.mkdir()
    (space / "mine.txt").write_text("mine\n")
    root = f"{outside_tmp}/ws"
    with HostFactory(isolation=isolated, hidden=[str(outside_tmp)]).start(space, workdir=root) as env:
        looks = f"ls -A {outside_tmp}; cat mine.txt; touch {outside_tmp}/x 2>/dev/null || echo refused"
        assert env.run(looks, 30).stdout.split() == ["ws", "mine", "refused"]
        assert env.read_file(f"{root}/mine.txt") == b"mine\n"
        with pytest.raises(PermissionError, match="cannot be read from outside"):
            env.read_file(f"{outside_tmp}/answers.json")
    assert sorted(p.name for p in outside_tmp.iterdir()) == ["answers.json"]


@pytest.mark.isolation
def test_links_the_agent_plants_are_followed_as_in_the_sandbox(isolated, tmp_path, outside_tmp):
    # outside /tmp: a link into /tmp reaches the sandbox's own /tmp, not the controller's files
    space, secret = tmp_path / "space", outside_tmp / "secret"
    space.mkdir()
    secret.mkdir()
    (secret / "answers.json").write_text("{}")
    target = outside_tmp / "outside.txt"
    target.write_text("controller's file")
    with HostFactory(isolation=isolated, hidden=[str(secret)]).start(space, workdir=ROOT) as env:
        env.run(
            f"echo inside > real.txt; ln -s {ROOT}/real.txt abs; ln -s ../../../..{ROOT}/real.txt rel; "
            f"ln -s {target} out; ln -s {secret}/answers.json answers; ln -s /proc/self/environ environ",
            30,
        )
        assert env.read_file("abs") == env.read_file("rel") == b"inside\n"  # resolved at the root, not on the host
        env.write_file("abs", "rewritten")
        assert (space / "real.txt").read_text() == "rewritten"
        with pytest.raises(PermissionError, match="not in a writable folder"):
            env.write_file("out", "overwritten by the controller")
        with pytest.raises(PermissionError, match="cannot be read from outside"):
            env.read_file("answers")
        with pytest.raises(PermissionError, match="cannot be read from outside"):
            env.read_file("environ")
    assert target.read_text() == "controller's file"


@pytest.mark.isolation
def test_a_root_the_sandbox_cannot_have_is_an_env_error(isolated, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for root, why in (("/proc/ws", "kernel"), (f"{tmp_path}/link/ws", "symbolic link")):
        space = tmp_path / "space"
        space.mkdir(exist_ok=True)
        with pytest.raises(EnvError, match=why):
            HostFactory(isolation=isolated).start(space, workdir=root)


def test_without_isolation_the_root_is_not_applied_and_the_environment_says_so(workspace):
    with HostFactory(isolation=NO_ISOLATION).start(workspace, workdir=ROOT) as env:
        assert env.workdir == str(workspace.resolve())
        assert env.run("pwd", 30).stdout.strip() == env.workdir
        assert env.workdir_note.startswith(f"{ROOT} not applied: without isolation") and env.workdir in env.workdir_note
        env.write_file("report.json", "{}")
        assert (workspace / "report.json").read_text() == "{}"


def resolved(cli=None, ini=None, env=None):
    from pathlib import Path

    from pytest_agentbench.core.options import Sources, resolve
    from pytest_agentbench.envs import ENV_OPTIONS
    from pytest_agentbench.sandbox.options import SANDBOX_OPTIONS

    return resolve(
        (*ENV_OPTIONS, *SANDBOX_OPTIONS),
        Sources(cli=cli or {}, ini=ini or {}, env=env or {}, invocation_dir=Path.cwd(), rootdir=Path.cwd()),
    )


def test_settings_select_the_factory_and_its_tool_limits():
    from pytest_agentbench.envs import build_env, env_settings
    from pytest_agentbench.envs.docker import DockerFactory

    host = build_env(
        resolved(
            cli={"executor": "subprocess", "memory_limit": "1.5"}, ini={"keep_workspaces": "true", "env_memory": "2g"}
        )
    )
    assert isinstance(host, HostFactory)
    assert (host.executor, host.python_memory, host.keep_workspaces, host.memory) == (
        "subprocess",
        3 << 29,
        True,
        2 << 30,
    )
    assert host.run_python("print(7)", 10) == {"status": "ok", "exit_code": 0, "stdout": "7\n", "stderr": ""}
    docker = build_env(resolved(ini={"env": "docker", "docker_network": "none"}))
    assert isinstance(docker, DockerFactory) and docker.network == "none" and docker.memory == 8 << 30
    assert env_settings(resolved())["env"] == "host"


def test_bad_environment_settings_name_their_source():
    from pytest_agentbench.core.options import OptionError

    with pytest.raises(OptionError, match="--bench-env.*'podman'.*host, docker"):
        resolved(cli={"env": "podman"})
    with pytest.raises(OptionError, match="agentbench_env_memory.*'lots' is not a size"):
        resolved(ini={"env_memory": "lots"})
    with pytest.raises(OptionError, match="--bench-set memory_limit.*positive.*'0'"):
        resolved(cli={"memory_limit": "0"})


@pytest.mark.parametrize("workdir", [None, ROOT])
@pytest.mark.isolation
def test_the_agents_file_tools_read_only_what_its_commands_could(isolated, workspace, workdir):
    """read_file (and view_image, which uses it) runs in the controller, perhaps as root: it must not reach
    what the agent's own commands cannot: folders outside the sandbox's view, files uid 65534 cannot read."""
    project_file = Path(__file__).resolve().parents[1] / "pyproject.toml"  # a folder of the machine, not a system one
    unreadable = next(
        (p for p in ("/etc/shadow", "/etc/gshadow") if os.path.exists(p) and not os.stat(p).st_mode & 0o004), None
    )
    with HostFactory(isolation=isolated).start(workspace, workdir=workdir) as env:
        assert env.read_file("/etc/hostname") == Path("/etc/hostname").read_bytes()  # a system folder: as seen
        assert env.run(f"cat {project_file} 2>/dev/null || echo unseen", 30).stdout.split() == ["unseen"]
        with pytest.raises((PermissionError, FileNotFoundError), match="pyproject.toml"):
            env.read_file(str(project_file))
        if unreadable:
            assert env.run(f"cat {unreadable} 2>/dev/null || echo denied", 30).stdout.split() == ["denied"]
            with pytest.raises(PermissionError, match="permission denied"):
                env.read_file(unreadable)
        env.write_file("mine.txt", "x")
        assert env.read_file("mine.txt") == b"x"  # the agent's own files stay readable
        # ... and writable by the agent's commands (as root the controller wrote it; uid 65534 must own it)
        assert env.run("echo y >> mine.txt && cat mine.txt", 30).stdout.split() == ["xy"]


@pytest.mark.isolation
def test_end_processes_stops_background_jobs_and_keeps_the_files(workspace):
    """Before the controller reads the agent's report, every process of the environment is gone (a loop left
    in the background could otherwise swap the file under the reader); the files stay for scoring."""
    with HostFactory(isolation=needs("bwrap")).start(workspace) as env:
        env.run("(while true; do date +%s%N > ticker.txt; sleep 0.05; done) >/dev/null 2>&1 &", 30)
        deadline = time.monotonic() + 10
        while not (workspace / "ticker.txt").is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        env.end_processes()
        before = (workspace / "ticker.txt").read_text()
        time.sleep(0.5)
        assert (workspace / "ticker.txt").read_text() == before
    assert not workspace.exists()  # stop still removes the workspace afterwards


@pytest.mark.isolation
def test_temporary_files_and_shared_memory_work_for_the_agent(workspace):
    """Tools that trust $TMPDIR (mktemp, sort -T) and POSIX shared memory (multiprocessing, joblib) work for
    the agent's commands (uid 65534 under isolation)."""
    with HostFactory(isolation=needs("bwrap")).start(workspace) as env:
        made = env.run('f=$(mktemp) && echo ok > "$f" && cat "$f"', 30)
        assert made.stdout.strip() == "ok", made
        pool = env.run(
            f"{sys.executable} -c 'import multiprocessing as m; print(sum(m.Pool(2).map(abs, [-1, -2])))'", 60
        )
        assert pool.stdout.strip() == "3", pool
