"""Runs of different agents are not comparable: the agent is CORE-Bench's harness comparability key."""

from __future__ import annotations

import pytest

from pytest_agentbench.benchmarks import agents
from pytest_agentbench.benchmarks.corebench.bench import CoreBench
from pytest_agentbench.benchmarks.corebench.options import agent_settings
from pytest_agentbench.report import comparability


def keys(**opts) -> dict:
    settings = agent_settings({"agent": None, "agent_command": None, **opts})
    return CoreBench().comparability(None, "test", {"data_hashes": {"core_test.json": "abc"}, **settings})


def test_the_agent_and_its_version_are_the_harness_key():
    assert keys()["harness"] == {"agent": "builtin"}
    assert keys(agent="mini-swe-agent")["harness"] == {"agent": "mini-swe-agent 2.4.6"}
    assert keys(agent="codex==0.170.0")["harness"] == {"agent": "codex 0.170.0"}


@pytest.mark.parametrize("other", ["builtin", "mini-swe-agent==2.4.5", "codex"])
def test_a_baseline_of_another_agent_is_incomparable(other):
    mini = keys(agent="mini-swe-agent")
    assert comparability.incomparable(mini, keys(agent="mini-swe-agent")) == []
    found = comparability.incomparable(mini, keys(agent=other))
    assert len(found) == 1 and found[0].startswith("harness.agent: mini-swe-agent 2.4.6 vs ")


def test_agent_settings_name_the_agent_only_when_external():
    assert agent_settings({"agent": "builtin"}) == {}
    assert agent_settings({"agent": "codex"}) == {"agent": "codex==0.171.0"}
    assert agent_settings({"agent": "command", "agent_command": "my-agent"}) == {
        "agent": "command",
        "agent_command": "my-agent",
    }
    with pytest.raises(ValueError, match="needs --bench-set agent_command"):
        agents.parse_agent("command")
    with pytest.raises(ValueError, match="unknown agent 'opencode'"):
        agents.parse_agent("opencode")
