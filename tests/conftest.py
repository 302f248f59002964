"""The project's own tests: the shared fixtures, and the order the modules run in.

Helpers live in the package tests/helpers; the fixtures every module may use come from its plugin modules,
loaded below through ``pytest_plugins``:

- helpers/fixtures.py: ``shared_data``, ``shared_cache``, ``cache_dir``, ``bench`` (run pytest as a user does),
  ``pytester`` with the scientific stack imported before its first in-process run, and the runs the whole test
  session shares, read-only: ``tiny_run`` (the tiny dataset) and ``validation_oracle_run`` (SciCode's validation
  split with the oracle; once per session even under xdist);
- helpers/fake_openai.py: ``server`` (the scripted OpenAI-compatible server) and ``make_model`` (the client
  against it);
- helpers/scicode_builders.py: ``custom_scicode`` (a run of a hand-made SciCode dataset) and ``tiny`` (the tiny
  one).

Nothing here imports the scientific stack or the SDK, so collecting the tests stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The one toy benchmark, tests/toybench, is importable as `toybench` (test_gates.py and test_compare.py declare
# their gates on it; test_architecture.py installs it as a distribution and runs it through its entry point).
sys.path.insert(0, str(Path(__file__).resolve().parent / "toybench"))

# Rewrite the helpers' asserts as a test module's, and before any of them is imported (a plugin module imported
# by another before its own turn would otherwise be left as it is, with a warning).
pytest.register_assert_rewrite("helpers")

pytest_plugins = ["helpers.fixtures", "helpers.fake_openai", "helpers.scicode_builders"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules run in the order of their share of slow tests, highest first, each module kept whole (its module
    fixtures set up once) and the order otherwise unchanged. Under -n 2 xdist's loadfile (pyproject.toml's
    addopts) hands a free worker the next whole module: the long end-to-end runs start early and the short
    modules fill in around them, instead of the suite ending on one worker busy with a long run while the other
    waits."""
    counts: dict[Path, list[int]] = {}
    for item in items:
        slow, total = counts.setdefault(item.path, [0, 0])
        counts[item.path] = [slow + bool(item.get_closest_marker("slow")), total + 1]
    items.sort(key=lambda item: -counts[item.path][0] / counts[item.path][1])
