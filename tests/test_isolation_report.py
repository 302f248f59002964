"""Every run says how the children that run model code are isolated, and can demand that they are."""

from __future__ import annotations

import json

import pytest

from pytest_agentbench.core.text import printable

from helpers.bench_runs import run_dirs

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_a_run_without_isolation_says_so_in_header_and_summaries(pytester, tiny, monkeypatch):
    monkeypatch.setenv("AGENTBENCH_ISOLATION", "off")
    result = tiny(subprocess=True)
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*isolation: none (turned off with $AGENTBENCH_ISOLATION=off)*"])
    [run] = run_dirs(pytester.path)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["settings"]["isolation"] == "none (turned off with $AGENTBENCH_ISOLATION=off)"
    cell = printable(
        "none (turned off with $AGENTBENCH_ISOLATION=off)", markdown=True
    )  # a cell as summary.md escapes it
    assert f"| isolation | {cell} |" in (run / "summary.md").read_text()


def test_require_isolation_refuses_a_machine_that_cannot(pytester, tiny, monkeypatch):
    monkeypatch.setenv("AGENTBENCH_ISOLATION", "off")
    result = tiny("--bench-require-isolation", subprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--bench-require-isolation: this machine cannot isolate*turned off*"])
    assert not run_dirs(pytester.path)


@pytest.mark.slow
def test_an_isolated_run_says_how(pytester, tiny):
    result = tiny("--bench-require-isolation", subprocess=True)
    result.assert_outcomes(passed=5)
    [run] = run_dirs(pytester.path)
    assert json.loads((run / "summary.json").read_text())["settings"]["isolation"].startswith("bwrap (")
