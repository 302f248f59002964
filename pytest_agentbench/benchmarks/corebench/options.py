"""CORE-Bench's own options, declared once (flag, ini key, type, default, help, check).

The plugin registers them with pytest and resolves them with the run's other options; this module
only declares them and turns the resolved values into the benchmark's effective settings.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ...core.options import Option
from . import agent, capsules, prepare

OWNER = "core-bench"


def existing_folder(path: Path) -> Path:
    """The check of --bench-capsules-dir: the folder must exist (capsules are downloaded into it)."""
    if not Path(path).is_dir():
        raise ValueError(f"is not a folder ({path}); create it (capsules are downloaded into it) or fix the path")
    return path


CORE_BENCH_OPTIONS: tuple[Option, ...] = (
    Option("difficulty", "--bench-difficulty", kind="choice", choices=prepare.DIFFICULTIES, default="hard",
           ini="agentbench_difficulty", owner=OWNER,
           help="CORE-Bench difficulty: easy (answer from the shipped results/), medium (reproduce with "
                "REPRODUCING.md and environment/ given), hard (reproduce from the code alone). Default hard."),
    Option("capsules_dir", "--bench-capsules-dir", kind="path", check=existing_folder,
           ini="agentbench_capsules_dir", owner=OWNER,
           help="CORE-Bench: folder with pre-staged capsules (<capsule_id>.tar.gz or unpacked <capsule_id>/); "
                "missing ones are downloaded into it. Default <data-dir>/core_bench/capsules, or <cache>/capsules "
                "when the data dir is read-only."),
    Option("hints", "--bench-hints", kind="bool", default=True, negatable=True, ini="agentbench_hints", owner=OWNER,
           help="CORE-Bench: add short difficulty-specific hints to the task prompt (the same for every "
                "model); --no-bench-hints gives upstream's prompt alone. Default on."),
    Option("upstream_abort", "--bench-upstream-abort", kind="bool", default=False, ini="agentbench_upstream_abort",
           owner=OWNER,
           help="CORE-Bench: score like upstream, which stops reading a report at the first value "
                "that cannot be compared (e.g. text for a numeric question), so later answers earn "
                "nothing. Default: such a value fails only its own question."),
    Option("agent_steps", "--bench-agent-steps", kind="int", default=agent.DEFAULT_STEPS, minimum=0,
           exclusive_minimum=True, ini="agentbench_agent_steps", owner=OWNER,
           help=f"CORE-Bench agent: most model turns per capsule (default {agent.DEFAULT_STEPS})."),
    Option("agent_time", "--bench-agent-time", kind="float", default=agent.DEFAULT_TIME, minimum=0,
           exclusive_minimum=True, ini="agentbench_agent_time", owner=OWNER,
           help=f"CORE-Bench agent: seconds per capsule (default {agent.DEFAULT_TIME:g}, as upstream)."),
    Option("agent_tokens", "--bench-agent-tokens", kind="int", default=None, minimum=0, exclusive_minimum=True,
           ini="agentbench_agent_tokens", owner=OWNER,
           help="CORE-Bench agent: budget of prompt plus completion tokens per capsule (default: none)."),
    Option("agent_command_timeout", "--bench-agent-command-timeout", kind="float",
           default=agent.DEFAULT_COMMAND_TIMEOUT, minimum=0, exclusive_minimum=True,
           ini="agentbench_agent_command_timeout", owner=OWNER,
           help=f"CORE-Bench agent: default timeout of one bash command in seconds (default "
                f"{agent.DEFAULT_COMMAND_TIMEOUT:g}); the agent may ask for up to ten times more."),
)


def effective_settings(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a CORE-Bench run (report header, summary.json, baselines) from resolved options.

    ``opts`` holds at least the values of ``CORE_BENCH_OPTIONS``; ``env`` (the environment option,
    declared by the environment layer) is taken when present, else the host.
    """
    capsules_dir = opts["capsules_dir"]
    return {
        "difficulty": opts["difficulty"],
        "hints": bool(opts["hints"]),
        "upstream_abort": bool(opts["upstream_abort"]),
        "capsules_dir": str(capsules_dir) if capsules_dir else None,
        "capsule_url": capsules.capsule_base_url(),
        "env": opts.get("env") or "host",
        "agent_steps": opts["agent_steps"],
        "agent_time": float(opts["agent_time"]),
        "agent_tokens": opts["agent_tokens"],
        "agent_command_timeout": float(opts["agent_command_timeout"]),
    }


def agent_limits(settings: Mapping[str, Any]) -> agent.AgentLimits:
    return agent.AgentLimits(steps=settings["agent_steps"], time=settings["agent_time"],
                             tokens=settings["agent_tokens"], command_timeout=settings["agent_command_timeout"])
