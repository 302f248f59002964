"""The naming and the refusals of external agents' Docker layers, without an engine (the builds themselves are
driven end to end in tests/test_external_agents_docker.py)."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from pytest_agentbench.benchmarks import agent_layers, agents
from pytest_agentbench.envs import EnvError
from pytest_agentbench.envs.docker import proxy_socket

IMAGE_ID = "sha256:cee581a3c891a53a2b3cd8f6f0f8c2b1e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9"


def test_a_layer_tag_names_the_image_the_agent_and_its_version():
    mini = agents.parse_agent("mini-swe-agent")
    tag = agent_layers.layer_tag("registry.example/Team/capsule-env:2024", IMAGE_ID, mini)
    assert tag == "agentbench-agent:mini-swe-agent-2.4.6--registry.example-team-capsule-env-2024-cee581a3c891"
    assert agent_layers.layer_tag("registry.example/Team/capsule-env:2024", IMAGE_ID, mini) == tag
    other = agents.parse_agent("mini-swe-agent==2.4.5")
    assert agent_layers.layer_tag("registry.example/Team/capsule-env:2024", IMAGE_ID, other) != tag
    rebuilt = "sha256:0123456789ab" + IMAGE_ID[19:]
    assert agent_layers.layer_tag("registry.example/Team/capsule-env:2024", rebuilt, mini) != tag


def test_a_layer_tag_stays_a_valid_docker_tag():
    codex = agents.parse_agent("codex==0.171.0+local")
    tag = agent_layers.layer_tag("x" * 300, IMAGE_ID, codex)
    repository, _, name = tag.partition(":")
    assert repository == "agentbench-agent" and len(name) <= 128
    assert all(ch.isalnum() or ch in "_.-" for ch in name) and name[0].isalnum()


def test_wheel_platforms_of_a_glibc_go_from_it_down():
    tags = agent_layers.platforms("2.36", "x86_64")
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_17_x86_64" in tags
    assert tags[-3:] == ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    assert "manylinux2014_aarch64" not in agent_layers.platforms("2.12", "aarch64")


@pytest.mark.parametrize("host", ["tcp://10.0.0.5:2376", "ssh://user@gpu-box"])
def test_a_proxy_socket_for_an_engine_elsewhere_is_refused(monkeypatch, host):
    monkeypatch.setenv("DOCKER_HOST", host)
    with pytest.raises(EnvError, match="needs the engine on this machine"):
        proxy_socket()


def test_a_proxy_socket_is_in_a_folder_only_its_owner_opens(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    folder, listener = proxy_socket()
    try:
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        assert listener.getsockname() == os.path.join(folder, "proxy.sock")
    finally:
        listener.close()
        shutil.rmtree(folder)
