"""--bench-replay checks its cache before any item runs: a replay whose response cache lacks the
first model call of a selected task would spend the whole run on ``model_error`` items.

Once the controller knows the selection (``Reporter.select``), a benchmark that can say where its tasks start
(``first_call_misses(opts, settings, tasks, samples, model)``: SciCode, CORE-Bench) is asked with the run's real
model in replay
mode, which only reads the cache. Tasks whose first call is missing end the session with exit 4, named.
"""

from __future__ import annotations

from typing import Any

import pytest

from ..core.errors import ConfigError
from ..models.options import ORACLE, build_model
from .checks import bench_model_overridden
from .run import BenchState

LISTED = 20  # task ids named in the message


def replay_misses(config: pytest.Config, state: BenchState, samples: list[Any]) -> list[str]:
    """The selected tasks whose first model call the replay's cache lacks ([] when it cannot tell: the oracle, a
    conftest's own client, a benchmark whose ``first_call_misses`` cannot say)."""
    opts = state.options
    if not opts.replay or opts.model in (None, "", ORACLE) or bench_model_overridden(config):
        return []
    try:
        model = build_model(opts)
    except ConfigError:
        return []  # the session reports it where the model is built
    return list(state.benchmark.first_call_misses(opts, state.settings, state.tasks, samples, model))


def stop_replay_without_cache(config: pytest.Config, state: BenchState, samples: list[Any]) -> None:
    """Exit 4 naming the tasks, before any item runs, when the cache lacks the first call of some."""
    missing = replay_misses(config, state, samples)
    if not missing:
        return
    named = ", ".join(missing[:LISTED]) + (f", ... ({len(missing)} in all)" if len(missing) > LISTED else "")
    pytest.exit(
        f"agentbench: --bench-replay {state.options.replay}: the response cache "
        f"{state.options.cache_dir} lacks the first model call of {len(missing)} selected task(s): {named}. "
        f"Replay with the --bench-cache-dir of the recorded run (and the same --model, --model-base-url, "
        f"--model-protocol, --model-params), or run those tasks with --bench-cache rw",
        returncode=pytest.ExitCode.USAGE_ERROR,
    )
