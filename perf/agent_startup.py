"""Start-up of each CORE-Bench agent: from the plugin starting the agent to its first model request.

For the built-in agent and each external agent installed in ``$AGENTBENCH_AGENTS_DIR`` (mini-swe-agent, Codex
CLI; one not installed is reported and skipped), one item's host environment (the sandbox the plugin gives an
agent, on a tiny workspace) and the tests' scripted OpenAI-compatible server (``tests/helpers/fake_openai.py``,
no latency, response cache off). The clock starts when the plugin starts the agent (the built-in agent's loop in
this process; an external agent's command in the sandbox, its metering proxy already listening) and stops when
the agent's first request reaches the run's model client (through the proxy, for an external agent). The
scripted reply ends the agent at once. Prints each run and the median of ``--runs`` per agent; the figures
depend on the machine's load.

    python perf/agent_startup.py [--runs 3] [--agents builtin,mini-swe-agent,codex]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from pytest_agentbench.benchmarks import agents  # noqa: E402
from pytest_agentbench.benchmarks.corebench.agent import AgentLimits, CoreAgent  # noqa: E402
from pytest_agentbench.envs.host import HostFactory  # noqa: E402
from pytest_agentbench.models.client import OpenAIModel  # noqa: E402
from pytest_agentbench.models.proxy import MeteringProxy  # noqa: E402

from helpers.fake_openai import FakeOpenAI  # noqa: E402  (the tests' scripted server)

QUESTION = "Report the mean accuracy."
PROMPT = f"Answer this question about the capsule: {json.dumps([QUESTION])}. Reply with a JSON object."
WORKDIR = "/capsule/environment"


class FirstCallClock:
    """The run's model client, noting when the first request reached it."""

    is_oracle = False

    def __init__(self, model: OpenAIModel) -> None:
        self.model, self.name, self.settings = model, model.name, model.settings
        self.first: float | None = None

    def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        if self.first is None:
            self.first = time.monotonic()
        return self.model.complete(messages, **kwargs)


def script_reply(server: FakeOpenAI, name: str) -> None:
    """The one reply that ends ``name`` at once."""
    answers = json.dumps({QUESTION: 0.93})
    if name == agents.BUILTIN:
        server.reply("", tool_calls=[("submit", {"answers": {QUESTION: 0.93}})])
    elif name == agents.MINI_SWE_AGENT:
        submit = f"printf '%s\\n' COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT {shlex.quote(answers)}"
        server.reply("Submitting.", tool_calls=[("bash", {"command": submit})])
    else:
        server.reply(answers)


def time_builtin(clock: FirstCallClock, env: Any) -> float:
    started = time.monotonic()
    CoreAgent(clock, env, [QUESTION], AgentLimits(time=120)).run(PROMPT)
    assert clock.first is not None, "the built-in agent made no model request"
    return clock.first - started


def time_external(clock: FirstCallClock, env: Any, agent: agents.ExternalAgent) -> float:
    """As the plugin starts an external agent (``ExternalAgentSolver.run_agent``): its folder, the proxy, its
    script in the sandbox."""
    limits = AgentLimits(time=120)
    folder = env.run(f'd="${{TMPDIR:-/tmp}}/{agents.AGENT_FOLDER}"; mkdir -p "$d" && cd "$d" && pwd', 60).stdout.strip()
    proxy = MeteringProxy(
        clock, listener=env.loopback_listener(), steps=agent.step_limit(limits.steps), view=agent.request_view()
    )
    setting = agents.AgentSetting(
        base_url=proxy.base_url,
        token=proxy.token,
        model=clock.name,
        prompt_file=f"{folder}/prompt.txt",
        answer_file=f"{folder}/answer.json",
        folder=folder,
        workdir=WORKDIR,
        time_limit=limits.time,
        command_timeout=limits.command_timeout,
        steps=limits.steps,
    )
    env.write_file(setting.prompt_file, PROMPT)
    script = agent.script(setting)
    with proxy:
        started = time.monotonic()
        done = env.run(script, limits.time)
    if clock.first is None:
        raise SystemExit(f"{agent.choice.label()} made no model request (exit {done.exit_code}): {done.stderr[-2000:]}")
    return clock.first - started


def one_run(name: str, server: FakeOpenAI, work: Path) -> float:
    agent = None
    readable: tuple[str, ...] = ()
    if name != agents.BUILTIN:
        agent = agents.make_agent(agents.parse_agent(name))
        agent.install(work / "cache")
        readable = (str(agent.install_dir),)
    script_reply(server, name)
    model = OpenAIModel("agent-model", base_url=server.base_url, api_key="sk-perf", cache_mode="off", max_retries=0)
    clock = FirstCallClock(model)
    workspace = Path(tempfile.mkdtemp(prefix="workspace-", dir=work))
    (workspace / "results").mkdir()
    (workspace / "results" / "output.txt").write_text("mean accuracy: 0.9300\n")
    with HostFactory().start(workspace, name=f"perf/{name}", workdir=WORKDIR, readable=readable) as env:
        if agent is None:
            return time_builtin(clock, env)
        return time_external(clock, env, agent)


def installed(name: str) -> bool:
    if name == agents.BUILTIN:
        return True
    root = os.environ.get(agents.AGENTS_DIR_ENV)
    folder = Path(root or "") / f"{name}-{agents.PINNED[name]}"
    return bool(root) and (folder / "installed.json").is_file()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--agents", default=",".join((agents.BUILTIN, agents.MINI_SWE_AGENT, agents.CODEX)))
    args = parser.parse_args()
    with FakeOpenAI() as server, tempfile.TemporaryDirectory(prefix="agentbench-perf-agents-") as work:
        for name in args.agents.split(","):
            if not installed(name):
                print(f"{name}: not installed in $AGENTBENCH_AGENTS_DIR (run .ci/agents), skipped")
                continue
            figures = []
            for run in range(args.runs):
                figures.append(one_run(name, server, Path(work)))
                print(f"{name} run {run + 1}: first model request {figures[-1]:.3f} s after the agent's start")
            print(
                f"{name}: agent start to first model request, median of {args.runs}: {statistics.median(figures):.3f} s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
