"""The isolated host environment's commands have a network namespace of their own.

This test opens, on this machine, a TCP listener on 127.0.0.1, an abstract unix socket and a TCP listener
on one of the machine's non-loopback addresses (the stand-in for the internet; no other address is ever
contacted). An agent command reaches neither of the first two, by any way (127.0.0.1, slirp4netns's
gateway 10.0.2.2, the machine's other addresses), nor sees them in /proc/net; with ``--bench-set=host_network=user``
(the default) it still reaches the outbound listener, with ``none`` nothing. A run that needs slirp4netns
where it is missing is refused before it starts (exit 4), with the install hint.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import uuid
from pathlib import Path

import pytest

from pytest_agentbench.envs.docker import DockerFactory
from pytest_agentbench.envs.host import HostFactory

from helpers import envs_contract as contract
from helpers.capabilities import needs
from helpers.capsule_factory import build_capsule_archive
from helpers.network_listeners import Listener, machine_addresses

pytestmark = pytest.mark.isolation

SLIRP_GATEWAY = "10.0.2.2"


@pytest.fixture
def listeners():
    loop = Listener(socket.AF_INET, ("127.0.0.1", 0))
    name = f"agentbench-test-{uuid.uuid4().hex[:12]}"
    abstract = Listener(socket.AF_UNIX, "\0" + name)
    address = needs("outbound-address")
    outbound = Listener(socket.AF_INET, (address, 0))
    yield {"loop": loop, "abstract": abstract, "abstract_name": name, "outbound": outbound, "address": address}
    for listener in (loop, abstract, outbound):
        listener.close()


# Run by the agent's command: try every way to each listener, say what answered and what /proc/net shows.
PROBE = r"""
import json, socket, sys
spec = json.loads(sys.argv[1])
def tcp(host, port):
    try:
        with socket.create_connection((host, port), timeout=3) as s:
            return s.recv(5).decode()
    except OSError as exc:
        return type(exc).__name__
def unix(name):
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(3)
            s.connect("\0" + name)
            return s.recv(5).decode()
    except OSError as exc:
        return type(exc).__name__
out = {"loop": {h: tcp(h, spec["loop"]) for h in spec["hosts"]},
       "abstract": unix(spec["name"]),
       "outbound": tcp(spec["address"], spec["outbound"]),
       "proc_unix": spec["name"] in open("/proc/net/unix").read(),
       "proc_tcp": ("%04X" % spec["loop"]) in open("/proc/net/tcp").read()}
print(json.dumps(out))
"""


def probe_command(listeners) -> str:
    spec = {
        "loop": listeners["loop"].sock.getsockname()[1],
        "name": listeners["abstract_name"],
        "hosts": ["127.0.0.1", SLIRP_GATEWAY, *machine_addresses()],
        "address": listeners["address"],
        "outbound": listeners["outbound"].sock.getsockname()[1],
    }
    return f"python3 -c {shlex.quote(PROBE)} {shlex.quote(json.dumps(spec))}"


@pytest.mark.parametrize("network", ["user", "none"])
def test_agent_commands_reach_no_listener_of_this_machine_but_the_outbound_one(listeners, tmp_path, network):
    needs("bwrap")
    if network == "user":
        needs("slirp4netns")
    factory = HostFactory(network=network)
    assert ("outbound through slirp4netns" if network == "user" else "without network") in factory.describe_isolation()
    with factory.start(contract.make_workspace(tmp_path)) as env:
        result = env.run(probe_command(listeners), 60)
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    reached = {host: answer for host, answer in seen["loop"].items() if answer == "HELLO"}
    assert not reached, f"the loopback listener answered the agent through {sorted(reached)}"
    assert seen["abstract"] != "HELLO", "the agent connected to this machine's abstract unix socket"
    assert not seen["proc_unix"] and not seen["proc_tcp"], f"/proc/net shows this machine's sockets: {seen}"
    assert listeners["loop"].accepted == 0 and listeners["abstract"].accepted == 0
    if network == "user":
        assert seen["outbound"] == "HELLO", f"no outbound access with --bench-set=host_network=user: {seen}"
        assert listeners["outbound"].accepted == 1
    else:
        assert seen["outbound"] != "HELLO" and listeners["outbound"].accepted == 0, seen


def test_background_jobs_share_the_namespace_between_commands(tmp_path):
    """A server an agent starts in one command is reachable from the next (one namespace per item)."""
    needs("bwrap")
    with HostFactory(network="none").start(contract.make_workspace(tmp_path)) as env:
        started = env.run("python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 & sleep 1; echo up", 30)
        assert started.stdout.strip() == "up", started.stderr
        fetched = env.run(
            "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8765/', timeout=5).status)\"",
            30,
        )
    assert fetched.stdout.strip() == "200", fetched.stderr


@pytest.mark.docker
def test_the_user_network_leaves_this_machines_mounts_alone(tmp_path):
    """slirp4netns's sandbox detaches its copy of this machine's mounts; that must not reach this machine's
    namespace. Run as root it did: the engine's view of every running container's file system (the overlay
    mounts under Docker's shared /var/lib/docker) went with it, and the archive API then answered 404
    (``Could not find the file /tmp in container``) for a container still running."""
    needs("bwrap")
    needs("slirp4netns")
    docker = DockerFactory(image=needs("docker"), network="none")
    try:
        with docker.start(contract.make_workspace(tmp_path / "docker")) as container:
            container.write_file("before.txt", "written before")
            with HostFactory(network="user").start(contract.make_workspace(tmp_path / "host")) as host:
                assert host.run("echo up", 30).stdout == "up\n"
            assert container.read_file("before.txt") == b"written before"
            container.write_file("after.txt", "written after")
            assert container.run("cat before.txt after.txt", 30).stdout == "written beforewritten after"
    finally:
        docker.close()


# ---- through pytest, as a user runs CORE-Bench --------------------------------------------------

CID = "capsule-7038571"


def corebench_host_run(pytester, tmp_path, base_url: str, run_id: str, *extra: str):
    staged = tmp_path / "staged"
    build_capsule_archive(staged, CID)
    return pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--bench-split=train",
        f"--bench-ids={CID}",
        "--model=agent-model",
        f"--model-base-url={base_url}",
        "--model-api-key=x",
        "--bench-cache=off",
        f"--bench-capsules-dir={staged}",
        "--bench-env=host",
        f"--bench-report-dir={tmp_path / 'r'}",
        f"--bench-run-id={run_id}",
        "-p",
        "no:cacheprovider",
        "--bench-set=agent_steps=2",
        *extra,
        timeout=900,
    )


@pytest.mark.e2e
@pytest.mark.slow
def test_the_agent_of_a_corebench_run_cannot_reach_the_controllers_loopback(pytester, tmp_path, listeners):
    """A real model's agent (the scripted server) runs the probe with bash; its tool output says what answered,
    and the run's isolation line names the network namespace."""
    from helpers.fake_openai import FakeOpenAI

    needs("bwrap")
    needs("slirp4netns")
    with FakeOpenAI() as server:
        server.reply(tool_calls=[("bash", {"command": probe_command(listeners)})])
        server.reply(tool_calls=[("bash", {"command": "true"})])
        result = corebench_host_run(pytester, tmp_path, server.base_url, "net")
    run_dir = tmp_path / "r" / "core-bench" / "agent-model" / "net"
    assert (run_dir / "records.jsonl").exists(), result.stdout.str()[-3000:] + result.stderr.str()[-3000:]
    record = json.loads((run_dir / "records.jsonl").read_text().splitlines()[0])
    messages = json.loads((run_dir / record["trajectory"]).read_text())["messages"]
    tool = [m["content"] for m in messages if m["role"] == "tool"][0]
    seen = json.loads(next(line for line in tool.splitlines() if line.startswith("{")))
    assert "HELLO" not in seen["loop"].values() and seen["abstract"] != "HELLO", seen
    assert seen["outbound"] == "HELLO", seen
    line = json.loads((run_dir / "summary.json").read_text())["settings"]["isolation"]
    assert "agent commands: own network namespace, outbound through slirp4netns" in line, line
    assert squeezed(line) in header_text(result)  # the header prints the same line


def header_text(result) -> str:
    """The run's output without its line prefixes and any white space (the header wraps a long line)."""
    return "".join("".join(line.removeprefix("agentbench:").split()) for line in result.stdout.lines)


def squeezed(text: str) -> str:
    return "".join(text.split())


def path_without(program: str, folder: Path) -> str:
    """A PATH like ours in which ``program`` is missing: links to every other program of our PATH."""
    folder.mkdir()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(entry):
            continue
        for name in os.listdir(entry):
            if name != program and not (folder / name).exists():
                (folder / name).symlink_to(os.path.join(entry, name))
    return str(folder)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_that_needs_slirp4netns_where_it_is_missing_is_refused(pytester, tmp_path, monkeypatch):
    needs("bwrap")
    monkeypatch.setenv("PATH", path_without("slirp4netns", tmp_path / "bin"))
    result = corebench_host_run(pytester, tmp_path, "http://127.0.0.1:9/v1", "refused")
    assert result.ret == 4, result.stdout.str()[-2000:] + result.stderr.str()[-2000:]
    result.stderr.fnmatch_lines(
        [
            "*--bench-set=host_network=user*slirp4netns*not installed*apt-get install -y "
            "slirp4netns*--bench-set=host_network=none*"
        ]
    )
    # with no network wanted nothing extra is needed: the same run is not refused for it
    none = corebench_host_run(
        pytester, tmp_path, "http://127.0.0.1:9/v1", "none", "--bench-set=host_network=none", "--collect-only"
    )
    assert none.ret == 0, none.stdout.str()[-2000:] + none.stderr.str()[-2000:]
    assert squeezed("agent commands: own network namespace without network") in header_text(none)
