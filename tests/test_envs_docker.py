"""The Docker environment against the environment contract, container clean-up, and SciCode's
code_interpreter giving the same results in Docker as on the host."""

from __future__ import annotations

import os
import socket

import pytest

from pytest_agentbench.envs import EnvError, EnvSkip
from pytest_agentbench.envs.docker import DockerFactory, remove_stale_containers
from pytest_agentbench.envs.host import HostFactory

import envs_contract as contract
from capabilities import needs
from capsule_factory import STAGED_BY_LABEL, labelled_containers

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
        assert remove_stale_containers(client) == [dead.id]
        assert {c.id for c in labelled_containers()} == {alive.id, foreign.id}
    finally:
        alive.remove(force=True)
        foreign.remove(force=True)
        dead.remove(force=True) if dead.id in [c.id for c in labelled_containers()] else None


def test_gpu_needs_bench_gpus(factory, workspace):
    with pytest.raises(EnvSkip, match="--bench-gpus"):
        factory.start(workspace, needs_gpu=True)


def test_missing_image_is_an_env_error(workspace):
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
