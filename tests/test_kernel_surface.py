"""The kernel surface of a run of model code is denied by default: its own user namespace (what the kernel keeps
per user dies with the run), a seccomp filter refusing what Docker's default profile refuses, and an environment
by allowlist. Per kind of run: scoring under each executor, a host tool call, a host agent command; and end to
end, repeated attempts that try to pass by reading what the first one left in the keyring.

The probes call the keyring and the other refused calls by their x86-64 numbers (Python has no binding for
them): on another architecture these tests skip."""

from __future__ import annotations

import json
import platform
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_agentbench.envs.host import HostFactory
from pytest_agentbench.sandbox.isolation import SANDBOX_UID
from pytest_agentbench.sandbox.limits import Limits

from helpers.bench_runs import read_jsonl
from helpers.capabilities import needs
from helpers.executor_pairs import executor_pair
from helpers.fake_openai import FakeOpenAI
from helpers.keyring_attack import keyring_cheat
from helpers.scicode_builders import custom_data_args, write_dataset

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the probes use x86-64 system call numbers")

# What a run leaves in per-user (and per-IPC-namespace) kernel stores, and how the next run looks for it.
STORE_AND_LOOK = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY, REQUEST_KEY, KEYCTL = 248, 249, 250
USER_KEYRING, SESSION_KEYRING, USER_SESSION_KEYRING = -4, -3, -5
tag = TAG
mode = MODE
found, stored = [], []

def check(what, ok):
    (stored if mode == "store" else found).append(what) if ok else None

for ring, name in ((USER_KEYRING, "@u"), (SESSION_KEYRING, "@s"), (USER_SESSION_KEYRING, "@us")):
    if mode == "store":
        key = libc.syscall(ADD_KEY, b"user", tag.encode(), b"6", 1, ctypes.c_long(ring))
        check("key " + name, key >= 0)
    else:
        key = libc.syscall(REQUEST_KEY, b"user", tag.encode(), None, ctypes.c_long(ring))
        check("key " + name, key >= 0)
libc.mq_open.restype = ctypes.c_int
queue = ("/" + tag).encode()
if mode == "store":
    check("POSIX message queue", libc.mq_open(queue, os.O_CREAT | os.O_RDWR, 0o666, None) >= 0)
else:
    check("POSIX message queue", libc.mq_open(queue, os.O_RDONLY) >= 0)
shm_key = int(tag[-6:], 16)
if mode == "store":
    check("SysV shared memory", libc.shmget(shm_key, 4096, 0o1000 | 0o666) >= 0)
    check("SysV message queue", libc.msgget(shm_key, 0o1000 | 0o666) >= 0)
    check("SysV semaphore", libc.semget(shm_key, 1, 0o1000 | 0o666) >= 0)
else:
    check("SysV shared memory", libc.shmget(shm_key, 0, 0) >= 0)
    check("SysV message queue", libc.msgget(shm_key, 0) >= 0)
    check("SysV semaphore", libc.semget(shm_key, 0, 0) >= 0)
print(json.dumps({"stored": stored, "found": found, "userns": os.readlink("/proc/self/ns/user"),
                  "uid_map": open("/proc/self/uid_map").read().split(), "uid": os.getuid()}))
"""

# Each refused call, made the way model code would (arguments that would succeed without the filter where that
# is possible as uid 65534), and the errors that count as refused.
DENIED_CALLS = r"""
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
calls = {
    "add_key": (248, b"user", b"agentbench-probe", b"x", 1, ctypes.c_long(-4)),
    "keyctl": (250, 0, ctypes.c_long(-4), 1),  # KEYCTL_GET_KEYRING_ID of @u, creating it
    "request_key": (249, b"user", b"agentbench-probe", None, ctypes.c_long(-4)),
    "bpf": (321, 0, None, 0),
    "perf_event_open": (298, None, 0, -1, -1, 0),
    "userfaultfd": (323, 0),
    "ptrace": (101, 0x4206, 1, 0, 0),  # PTRACE_SEIZE of pid 1
    "unshare": (272, 0x10000000),  # CLONE_NEWUSER
    "setns": (308, -1, 0),
    "mount": (165, b"none", b"/tmp", b"tmpfs", 0, None),
    "io_uring_setup": (425, 1, None),
    "personality": (135, 0x0040000),  # ADDR_NO_RANDOMIZE
    "clock_settime": (227, 0, None),
    "init_module": (175, None, 0, b""),
    "clone (new namespace)": (56, 0x20000000 | 17, 0, 0, 0, 0),  # CLONE_NEWPID | SIGCHLD
    "clone3": (435, None, 0),
}
out = {}
for name, (number, *args) in calls.items():
    result = libc.syscall(number, *args)
    out[name] = [result, errno.errorcode.get(ctypes.get_errno(), "0")]
out["personality query"] = [libc.syscall(135, 0xFFFFFFFF), "0"]
print(json.dumps(out))
"""

ENVIRONMENT = "import json, os; print(json.dumps(dict(os.environ)))"
LEAKY = {
    "DATABASE_URL": "postgres://admin:hunter2@db.internal/prod",
    "DEPLOY_WEBHOOK_URL": "https://hooks.example/T000/B000/abc",
    "MY_PAT": "ghp_personal_access_token",
}

KINDS = ("scoring-fork", "scoring-subprocess", "tool-call-host", "agent-command-host")
DOCKER_KINDS = ("tool-call-docker", "agent-command-docker")  # Docker's default profile and namespaces
ALL_KINDS = [*KINDS, *(pytest.param(kind, marks=pytest.mark.docker) for kind in DOCKER_KINDS)]


@pytest.fixture(scope="module")
def isolation():
    return needs("bwrap")


@pytest.fixture(scope="module")
def executors(isolation):
    yield from executor_pair(isolation, preload=())


@pytest.fixture(scope="module")
def factory(isolation):
    return HostFactory(isolation=isolation)


@pytest.fixture
def runner(executors, factory, tmp_path) -> Callable[[str], Callable[[str], str]]:
    """``runner(kind)`` -> a function that runs a Python source as one run of that kind and returns its stdout.
    Agent commands: each call is another item's environment (items share nothing)."""
    started: list = []
    docker: list = []

    def docker_factory():
        from pytest_agentbench.envs.docker import DockerFactory  # why: the docker SDK, for these kinds only

        if not docker:
            docker.append(DockerFactory(image=needs("docker"), network="none"))
        return docker[0]

    def make(kind: str) -> Callable[[str], str]:
        def scoring(source: str, executor: str) -> str:
            result = executors[executor].run(source, limits=Limits(timeout=60))
            assert result.exit_code == 0, result
            return result.stdout

        def tool_call(source: str) -> str:
            out = factory.run_python(source, 60)
            assert out["status"] == "ok", out
            return out["stdout"]

        def agent_command(source: str) -> str:
            space = tmp_path / f"item-{len(started)}"
            space.mkdir()
            env = factory.start(space)
            started.append(env)
            (space / "probe.py").write_text(source)
            import sys

            result = env.run(f"{sys.executable} probe.py", 60)
            assert result.exit_code == 0, result
            return result.stdout

        def docker_tool_call(source: str) -> str:
            out = docker_factory().run_python(source, 120)
            assert out["status"] == "ok", out
            return out["stdout"]

        def docker_agent_command(source: str) -> str:
            space = tmp_path / f"item-{len(started)}"
            space.mkdir()
            (space / "probe.py").write_text(source)
            env = docker_factory().start(space)
            started.append(env)
            result = env.run("python3 probe.py", 120)
            assert result.exit_code == 0, result
            return result.stdout

        return {
            "tool-call-docker": docker_tool_call,
            "agent-command-docker": docker_agent_command,
            "scoring-fork": lambda source: scoring(source, "fork"),
            "scoring-subprocess": lambda source: scoring(source, "subprocess"),
            "tool-call-host": tool_call,
            "agent-command-host": agent_command,
        }[kind]

    yield make
    for env in started:
        env.stop()
    for made in docker:
        made.close()


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


@pytest.mark.isolation
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_what_a_run_stores_in_per_user_kernel_state_is_gone_for_the_next(runner, kind):
    run = runner(kind)
    tag = f"agentbench-{uuid.uuid4().hex[:12]}"
    probe = STORE_AND_LOOK.replace("TAG", repr(tag))
    first = last_json(run(probe.replace("MODE", '"store"')))
    second = last_json(run(probe.replace("MODE", '"look"')))
    assert second["found"] == [], f"{kind}: the next run found what the first stored ({first['stored']})"
    if kind in DOCKER_KINDS:  # (the engine's user namespace; its profile refuses the keyrings)
        assert not [what for what in first["stored"] if what.startswith("key")], first
        return
    # each run is uid 65534 of a user namespace made for it (mapping that one uid), never the machine's; (the
    # namespaces' numbers are not compared: the kernel reuses the number of one that is gone)
    assert first["uid"] == second["uid"] == SANDBOX_UID
    for run_view in (first, second):
        assert run_view["uid_map"][0] == str(SANDBOX_UID) and run_view["uid_map"][2] == "1", run_view
        assert str(Path("/proc/self/ns/user").readlink()) != run_view["userns"]


@pytest.mark.isolation
@pytest.mark.parametrize("kind", KINDS)
def test_refused_calls_fail_in_the_child(runner, kind):
    out = last_json(runner(kind)(DENIED_CALLS))
    refused = {name: err for name, (result, err) in out.items() if name != "personality query" and result == -1}
    expected = {name: "ENOSYS" if name == "clone3" else "EPERM" for name in out if name != "personality query"}
    assert refused == expected, f"{kind}: {out}"
    assert out["personality query"][0] >= 0  # the harmless query still answers (Docker's profile allows it)


@pytest.mark.isolation
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_a_child_gets_only_the_allowlisted_environment(runner, kind, monkeypatch):
    for name, value in LEAKY.items():
        monkeypatch.setenv(name, value)
    env = last_json(runner(kind)(ENVIRONMENT))
    assert not set(LEAKY) & set(env), f"{kind} leaks {set(LEAKY) & set(env)}"
    assert not any(value in json.dumps(env) for value in LEAKY.values())
    if kind in DOCKER_KINDS:  # (the image's own environment)
        return
    assert env["HOME"] == "/tmp" or env["HOME"].endswith("/home")  # its own home (agent: the item's)
    from pytest_agentbench.sandbox.limits import CHILD_SETTINGS, passes_to_children

    # the package's folder; a host item's GPUs; what bash sets itself in an agent command
    extra = {"PYTHONPATH", "CUDA_VISIBLE_DEVICES", "PWD", "OLDPWD", "SHLVL", "_"}
    assert all(passes_to_children(name) or name in CHILD_SETTINGS or name in extra for name in env), env


def test_the_filter_is_written_by_libseccomp_and_refuses_what_docker_refuses():
    from pytest_agentbench.sandbox import syscalls

    code = syscalls.program()
    assert code is not None, syscalls.unavailable()
    assert len(code) % syscalls.SOCK_FILTER_SIZE == 0
    # Docker's default profile refuses these to an unprivileged container; so does ours
    docker_refuses = {"add_key", "request_key", "keyctl", "bpf", "perf_event_open", "userfaultfd", "ptrace"}
    docker_refuses |= {"mount", "umount2", "unshare", "setns", "pivot_root", "io_uring_setup", "init_module"}
    docker_refuses |= {"finit_module", "delete_module", "clock_settime", "settimeofday", "kexec_load", "reboot"}
    docker_refuses |= {"swapon", "swapoff", "open_by_handle_at", "acct", "quotactl", "process_vm_readv"}
    assert docker_refuses <= set(syscalls.DENIED)


def test_personality_blocks_cover_exactly_what_is_not_allowed():
    from pytest_agentbench.sandbox import syscalls

    blocks = syscalls.blocks_outside(syscalls.PERSONALITY_ALLOWED)
    samples = [*syscalls.PERSONALITY_ALLOWED, 1, 9, 0x40000, 0x400000, 0x20009, 0x80000008, 0xFFFFFFFE]
    for value in samples:
        refused = any(value & mask == bits for mask, bits in blocks)
        assert refused == (value not in syscalls.PERSONALITY_ALLOWED), hex(value)


# ---------------------------------------------------------------- end to end: attempts that read attempt 1's answer


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.isolation
@pytest.mark.parametrize("executor", ["fork", "subprocess"])
def test_later_attempts_cannot_read_what_attempt_one_left_in_the_keyring(
    bench, pytester, shared_data, tmp_path, executor
) -> None:
    needs("bwrap")
    data, h5 = write_dataset(pytester.path, shared_data)
    tag = f"agentbench-{uuid.uuid4().hex[:12]}"
    with FakeOpenAI() as server:
        cheat = keyring_cheat(tag)
        for _ in range(6):
            server.reply_with(cheat)
        result = bench(
            *custom_data_args(
                data,
                h5,
                "--bench-mode=naive",
                "--bench-ids=3",
                "--bench-attempts=3",
                "--bench-max-connections=1",  # attempt 1 answers (and is scored) first
                f"--bench-set=executor={executor}",
                f"--bench-cache-dir={tmp_path / 'cache'}",
                "--bench-require-isolation",
                model="cheat",
                server=server,
            )
        )
    [run] = list((pytester.path / "reports/scicode/cheat").iterdir())
    records = read_jsonl(run / "steps.jsonl")
    assert sorted((r["attempt"], r["status"]) for r in records) == [(1, "pass"), (2, "fail"), (3, "fail")], [
        (r["attempt"], r["status"], r.get("stderr", "")[-300:]) for r in records
    ]
    assert result.ret == 1
    # the run's settings page names what a child's environment may hold
    passed = json.loads((run / "settings.json").read_text())["child_env"]
    assert "PATH" in passed and "LC_*" in passed and not [name for name in passed if "DATABASE" in name]


# ---------------------------------------------------------------- a machine that cannot deny them all


def test_a_machine_without_a_kernel_surface_says_so_and_require_isolation_refuses(monkeypatch):
    from pytest_agentbench.core.errors import ConfigError
    from pytest_agentbench.sandbox import isolation as sandbox_isolation
    from pytest_agentbench.sandbox.options import isolation_from

    lacking = sandbox_isolation.Isolation(
        "root", "", "/usr/bin/bwrap", ("no seccomp filter (libseccomp is not installed)",)
    )
    # what the probe found on such a machine (the probe keeps one answer per process)
    monkeypatch.setitem(sandbox_isolation._PROBED, "result", lacking)
    monkeypatch.delenv(sandbox_isolation.ISOLATION_ENV, raising=False)
    assert lacking.active and not lacking.complete
    assert "NOT MET: no seccomp filter (libseccomp is not installed)" in lacking.describe()
    with pytest.raises(ConfigError, match="cannot isolate.*no seccomp filter"):
        isolation_from({"require_isolation": True})
    assert isolation_from({"require_isolation": False}) == lacking


def test_this_machine_denies_every_kernel_surface(isolation):
    """Where bwrap isolates (CI), the probe's child got its own user namespace and the filter."""
    assert isolation.complete, isolation.describe()
    assert "own user namespace per run, seccomp filter" in isolation.describe()


def test_the_probe_reports_what_its_child_measured_not_what_was_asked():
    """A child still in its parent's user namespace, or not filtering, is reported even when setting it up raised
    nothing (a kernel that ignores the request); what drop_privileges already reported is not said twice."""
    from pytest_agentbench.sandbox.isolation import measured_shortfalls

    filtered = "Name:\tpython3\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n"
    assert measured_shortfalls([], "user:[4026531837]", "user:[4026532999]", filtered) == []
    shared = measured_shortfalls([], "user:[4026531837]", "user:[4026531837]", filtered)
    assert shared == ["no user namespace per run (measured: the child is in user:[4026531837], its parent's)"]
    unfiltered = measured_shortfalls([], "user:[1]", "user:[2]", filtered.replace("Seccomp:\t2", "Seccomp:\t0"))
    assert unfiltered == ["no seccomp filter (measured: Seccomp: 0 in /proc/self/status)"]
    assert measured_shortfalls(["no seccomp filter (libseccomp is missing)"], "a", "b", "Seccomp:\t0\n") == []


def test_the_settings_page_lists_the_names_that_pass():
    from pytest_agentbench.sandbox.limits import passed_env_names

    names = passed_env_names()
    assert {"PATH", "HOME", "TMPDIR", "LC_*", "OMP_NUM_THREADS"} <= set(names)
    assert not any("DATABASE" in name or "KEY" in name for name in names)
