"""What a benchmark run's processes import on their way to the first item (the start-up time itself is
``perf/first_request.py``'s: tests assert no timing).

An xdist worker imports the run's plugin (``session.py``) and builds the environment its items use: neither loads
the controller's checks (the sandbox self-test, the model preflight), the Slurm back-end, the remote hosts'
helpers, the progress line, another environment or numpy. Declaring the options, which every pytest session with
the plugin installed does, loads neither the sandbox's codec nor a benchmark's preparation. Each check runs in a
fresh interpreter, as a session starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers.bench_runs import checkout_python_path

NOT_ON_A_WORKER = (
    "pytest_agentbench.sandbox.selftest",
    "pytest_agentbench.models.preflight",
    "pytest_agentbench.pytest_plugin.slurm.backend",
    "pytest_agentbench.pytest_plugin.slurm.taskpackage",
    "pytest_agentbench.pytest_plugin.distribution.remote",
    "pytest_agentbench.pytest_plugin.distribution.hostprobe",
    "pytest_agentbench.pytest_plugin.progress",
    "pytest_agentbench.envs.docker",
    "numpy",
)
NOT_FOR_THE_OPTIONS = ("pytest_agentbench.sandbox.codec", "pytest_agentbench.benchmarks.corebench.prepare")


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        env={**os.environ, "PYTHONPATH": checkout_python_path()},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_worker_loads_none_of_the_controllers_checks_slurm_or_remote_helpers():
    loaded = modules_after(
        "import pytest_agentbench.pytest_plugin.session\n"
        "from pytest_agentbench.envs import build_env\n"
        "build_env({}, default='host')"
    )
    assert "pytest_agentbench.envs.host" in loaded  # the environment it uses is there
    assert not [name for name in NOT_ON_A_WORKER if name in loaded]


def test_declaring_the_options_loads_no_codec_and_no_preparation():
    loaded = modules_after("from pytest_agentbench.pytest_plugin.options import all_options\nall_options()")
    assert "pytest_agentbench.benchmarks.scicode.options" in loaded
    assert not [name for name in NOT_FOR_THE_OPTIONS if name in loaded]


def test_the_operand_cap_default_is_the_codecs_bound():
    from pytest_agentbench.benchmarks.corebench import defaults, prepare
    from pytest_agentbench.benchmarks.scicode.options import OPERAND_CAP, OPTIONS
    from pytest_agentbench.sandbox import codec

    assert OPERAND_CAP == codec.DEFAULT_MAX_BYTES
    assert next(o for o in OPTIONS if o.name == "operand_cap").default == codec.DEFAULT_MAX_BYTES
    assert prepare.DIFFICULTIES == defaults.DIFFICULTIES == ("easy", "medium", "hard")
