"""The Docker environment against the environment contract, container clean-up, and SciCode's
code_interpreter giving the same results in Docker as on the host."""

from __future__ import annotations

import json
import os
import re
import socket

import pytest

from pytest_agentbench.envs import EnvError, EnvSkip
from pytest_agentbench.envs.docker import DockerFactory, remove_stale_containers
from pytest_agentbench.envs.host import HostFactory

from helpers import envs_contract as contract
from helpers.capabilities import needs
from helpers.capsule_factory import STAGED_BY_LABEL, labelled_containers
from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import CLOSE, custom_data_args, problem, step, write_dataset

pytestmark = pytest.mark.docker


@pytest.fixture
def factory():
    made = DockerFactory(image=needs("docker"), network="none")
    yield made
    made.close()
    assert labelled_containers() == []


@pytest.fixture
def workspace(tmp_path):
    return contract.make_workspace(tmp_path)


def test_commands_files_and_copy_out(factory, workspace):
    with factory.start(workspace, name="t") as env:
        assert env.workdir == "/capsule"
        contract.check_command_basics(env)
        contract.check_files(env, workspace)
        assert env.run("cat /proc/net/dev | grep -c eth0 || true", 10).stdout.strip() == "0"  # network none
    assert not workspace.exists()


def test_timeout_and_flood(factory, workspace):
    with factory.start(workspace) as env:
        contract.check_timeout_kills_the_group(env, "3131.25")
        contract.check_flood_is_trimmed(env)


def test_container_removed_when_the_body_raises(factory, workspace):
    with pytest.raises(RuntimeError, match="boom"):
        with factory.start(workspace):
            assert len(labelled_containers()) == 1
            raise RuntimeError("boom")
    assert labelled_containers() == []


def test_stale_container_of_a_dead_worker_is_removed(factory, workspace):
    client = factory.client()
    dead = client.containers.run(
        needs("docker"),
        ["sleep", "300"],
        detach=True,
        network_mode="none",
        labels={
            "agentbench": "1",
            "agentbench.host": socket.gethostname(),
            "agentbench.pid": "999999999",
            STAGED_BY_LABEL: str(os.getpid()),
        },
    )
    alive = client.containers.run(
        needs("docker"),
        ["sleep", "300"],
        detach=True,
        network_mode="none",
        labels={"agentbench": "1", "agentbench.host": socket.gethostname(), "agentbench.pid": str(os.getpid())},
    )
    # made by a process of another PID namespace (a sandbox, a container on this engine): its pid means
    # nothing here, so its creator cannot be judged dead from here
    foreign = client.containers.run(
        needs("docker"),
        ["sleep", "300"],
        detach=True,
        network_mode="none",
        labels={
            "agentbench": "1",
            "agentbench.host": socket.gethostname(),
            "agentbench.pid": "999999998",
            "agentbench.pidns": "pid:[1]",
            STAGED_BY_LABEL: str(os.getpid()),  # the other worker's tests leave it alone
        },
    )
    try:
        removed = remove_stale_containers(client)
        # another process's start on this engine (the other xdist worker's) may have removed the dead one first
        assert removed == [dead.id] or (
            removed == [] and dead.id not in {c.id for c in client.containers.list(all=True, ignore_removed=True)}
        )
        assert {c.id for c in labelled_containers()} == {alive.id, foreign.id}
    finally:
        alive.remove(force=True)
        foreign.remove(force=True)
        dead.remove(force=True) if dead.id in [c.id for c in labelled_containers()] else None


def test_gpu_needs_bench_gpus(factory, workspace):
    with pytest.raises(EnvSkip, match="--bench-set gpus"):
        factory.start(workspace, needs_gpu=True)


def test_missing_image_is_an_env_error(workspace):
    needs("docker")  # a reachable engine: without one the error is about the engine, not the image
    made = DockerFactory(image="agentbench-no-such-image:never", network="none")
    with pytest.raises(EnvError, match="agentbench-no-such-image:never"):
        made.start(workspace)


def test_unreachable_engine_names_docker_host(workspace, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    with pytest.raises(EnvError, match="tcp://127.0.0.1:9"):
        DockerFactory(image="x").start(workspace)


def test_scicode_code_interpreter_same_in_docker_as_on_host(factory, tmp_path):
    docker_results = {name: factory.run_python(source, 2) for name, source in contract.PYTHON_CASES.items()}
    host_results = {name: HostFactory().run_python(source, 2) for name, source in contract.PYTHON_CASES.items()}
    contract.check_python(docker_results)
    contract.check_python(host_results)
    assert docker_results == host_results


def tiny_pdf() -> bytes:
    """A valid one-page PDF (an empty 72x72 pt page), offsets computed."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 72 72] >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


@pytest.mark.parametrize("where", ["docker", "host"])
def test_view_image_renders_a_pdf_page_where_pdftoppm_exists(factory, workspace, where):
    import shutil

    from pytest_agentbench.benchmarks.corebench.agent import AgentLimits, CoreAgent

    (workspace / "capsule" / "figure.pdf").write_bytes(tiny_pdf())
    (workspace / "capsule" / "notes.txt").write_text("not an image")
    env = factory.start(workspace) if where == "docker" else HostFactory().start(workspace)
    with env:
        agent = CoreAgent(model=None, env=env, questions=["q"], limits=AgentLimits())
        has_pdftoppm = where == "docker" or shutil.which("pdftoppm") is not None
        reply = agent._dispatch({"id": "c1", "name": "view_image", "arguments": '{"path": "capsule/figure.pdf"}'})
        if has_pdftoppm:
            assert reply.startswith("capsule/figure.pdf (image/png,"), reply
            assert agent.pending_images[0]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
        else:
            assert reply.startswith("error: cannot show a PDF: pdftoppm is not installed"), reply
        reply = agent._dispatch({"id": "c2", "name": "view_image", "arguments": '{"path": "capsule/notes.txt"}'})
        assert reply == "error: capsule/notes.txt is not a PNG, JPEG, GIF, WebP or PDF file"


# ---- tool calls share nothing ----------------------------------------------------------------------------------

# The first call plants what a later call could run or read (a daemon, a .pth and a sitecustomize in every site
# folder it can write, files in /tmp, /dev/shm, the home folder and above its own folder) and shows it worked.
PLANT = r"""
import json, os, site, time
MARK = "@@MARK@@"
planted = []
def plant(path, text):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(text)
        planted.append(path)
    except OSError:
        pass
for folder in site.getsitepackages() + [site.getusersitepackages()]:
    plant(os.path.join(folder, MARK + ".pth"), "import builtins; setattr(builtins, %r, 1)\n" % (MARK + "_pth"))
    for name in ("sitecustomize.py", "usercustomize.py"):
        plant(os.path.join(folder, name), "import os; os.environ['%s_ENV'] = '1'\n" % MARK)
for folder in ("/tmp", "/dev/shm", os.path.expanduser("~"), os.path.dirname(os.getcwd())):
    plant(os.path.join(folder, MARK + "-file"), "left by the first call")
log = "/tmp/" + MARK + "-daemon.log"
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sh", [MARK + "-daemon", "-c", "while :; do date >> %s; sleep 0.2; done" % log])
    os._exit(0)
deadline = time.monotonic() + 15  # the daemon's first line (the call's limit is 20 s: this only ends a hang)
while not (os.path.exists(log) and os.path.getsize(log) > 0) and time.monotonic() < deadline:
    time.sleep(0.05)
print("UID", os.getuid(), os.geteuid())
print("PLANTED", json.dumps(planted))
print("DAEMON", os.path.exists(log) and os.path.getsize(log) > 0)
"""

# The second call looks for all of it: the daemon among the processes it can see, the files, the .pth's effect.
PROBE = r"""
import builtins, json, os, site
MARK = "@@MARK@@"
found = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmdline = open("/proc/%s/cmdline" % pid, "rb").read()
    except OSError:
        continue
    if MARK.encode() in cmdline:
        found.append("process %s: %r" % (pid, cmdline[:80]))
roots = ["/tmp", "/dev/shm", os.path.expanduser("~"), os.path.dirname(os.getcwd())]
roots += site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    for folder, _, files in os.walk(root):
        found += [os.path.join(folder, f) for f in files if MARK in f or f in ("sitecustomize.py", "usercustomize.py")]
if hasattr(builtins, MARK + "_pth"):
    found.append("a planted .pth ran")
found += ["environment: " + k for k in os.environ if MARK in k]
print("UID", os.getuid(), os.geteuid())
print("FOUND", json.dumps(sorted(set(found))))
"""


def planted_and_found(first: str, second: str) -> tuple[list[str], list[str]]:
    """What the first call says it planted (its daemon running) and what the second found; both ran as non-root."""
    for output in (first, second):
        uids = re.search(r"^UID (\d+) (\d+)$", output, re.M)
        assert uids and "0" not in uids.groups(), f"a tool call ran as root:\n{output}"
    assert "DAEMON True" in first, f"the first call's daemon did not run:\n{first}"
    planted = json.loads(re.search(r"^PLANTED (.*)$", first, re.M).group(1))
    found = json.loads(re.search(r"^FOUND (.*)$", second, re.M).group(1))
    return planted, found


def test_a_tool_call_leaves_nothing_for_the_next(factory):
    mark = f"agentbench-leftover-{os.getpid()}"
    first = factory.run_python(PLANT.replace("@@MARK@@", mark), 20)
    second = factory.run_python(PROBE.replace("@@MARK@@", mark), 20)
    assert first["status"] == second["status"] == "ok", (first, second)
    planted, found = planted_and_found(first["stdout"], second["stdout"])
    assert any(path.startswith("/tmp/") for path in planted), planted  # it could write; the next call sees none
    assert found == [], f"the second call found what the first left: {found}"


def test_a_long_tool_script_arrives_whole(factory):
    source = "text = " + repr("x" * 3_000_000) + "\nprint(len(text), len(open('main.py').read()))\n"
    result = factory.run_python(source, 30)
    assert result == {"status": "ok", "exit_code": 0, "stdout": f"3000000 {len(source)}\n", "stderr": ""}


@pytest.mark.e2e
@pytest.mark.slow
def test_code_interpreter_calls_of_two_problems_share_nothing(bench, pytester, shared_data):
    """SciCode in tool-use mode with --bench-env=docker: the scripted model's tool call on problem 1 starts a
    daemon and plants files; its tool call on problem 2 looks for them and finds none, and neither runs as root."""
    problems = [
        problem("1", [step("1.1", "def add(a, b):\n    return a + b", [CLOSE.format(call="add(1, 2)")])]),
        problem("2", [step("2.1", "def sq(a):\n    return a * a", [CLOSE.format(call="sq(3)")])]),
    ]
    data, h5 = write_dataset(pytester.path, shared_data, targets={"1.1": [3], "2.1": [9]}, problems=problems)
    mark = f"agentbench-leftover-{os.getpid()}"
    seen: dict[str, str] = {}

    def make(body: dict) -> dict:
        messages = body["messages"]
        number = next(n for n in ("1.1", "2.1") if any(f"step {n}" in str(m.get("content")) for m in messages))
        if messages[-1]["role"] == "tool":
            seen[number] = messages[-1]["content"]
            code = next(s["ground_truth_code"] for p in problems for s in p["sub_steps"] if s["step_number"] == number)
            return {"text": f"```python\n{code}\n```\n"}
        tool = PLANT if number == "1.1" else PROBE
        return {"tool_calls": [("code_interpreter", {"code": tool.replace("@@MARK@@", mark)})]}

    with FakeOpenAI() as server:
        for _ in range(4):
            server.reply_with(make)
        result = bench(
            *custom_data_args(data, h5, "--bench-mode=tool_use", model="scripted", server=server),
            "--bench-cache=off",
            "--bench-env=docker",
            f"--bench-set=docker_image={needs('docker')}",
            "--bench-set=docker_network=none",
            subprocess=True,
        )
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert set(seen) == {"1.1", "2.1"}, seen
    planted, found = planted_and_found(seen["1.1"], seen["2.1"])
    assert planted, seen["1.1"]
    assert found == [], f"problem 2's tool call found what problem 1's left: {found}"
    assert labelled_containers() == []
