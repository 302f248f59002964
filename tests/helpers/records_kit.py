"""Builders of what a benchmark run leaves behind (records, summaries, verdicts, a run folder), made in-process for
the tests of the report layer: plain functions, no fixture and no pytest session.

The records are those of the tiny SciCode dataset of ``scicode_builders.py`` (3 problems, 5 steps) as its
``mutant`` model scores them: a step named in ``broken`` fails, one named in ``errors`` ends in a model error, so
a test can judge the same run the ``tiny`` fixture would make without running it. SciCode's own ``summarize``
(through ``get_benchmark``) turns them into its metrics (``main``: problems solved, ``subproblem``: steps).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_agentbench.core.options import Sources, resolve
from pytest_agentbench.report.options import REPORT_OPTIONS, GateConfig, gate_config

from helpers.bench_runs import SHARED_DATA

TINY_STEPS = ("1.1", "1.2", "2.1", "2.2", "3.1")
MODEL_ERROR = "model_error"  # what a step whose model call raised ends in


def scicode_record(sid: str, status: str = "pass", generation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One SciCode step's record (``sid``: ``"2.2"``), with the fields the reports read."""
    return {
        "benchmark": "scicode",
        "task": sid.split(".")[0],
        "problem": sid.split(".")[0],
        "id": sid,
        "step": sid,
        "split": "validation",
        "scored": True,
        "status": status,
        "message": "the model service is down" if status == MODEL_ERROR else "",
        "worker": "main",
        "generation": dict(generation) if generation is not None else {"model_calls": 1, "status": "ok"},
    }


def tiny_records(broken: str = "", errors: str = "", steps: Sequence[str] = TINY_STEPS) -> list[dict[str, Any]]:
    """The records of a run of the tiny dataset: ``broken``/``errors`` name steps, comma-separated, as ``tiny``'s
    arguments do."""
    failed, erred = set(filter(None, broken.split(","))), set(filter(None, errors.split(",")))
    return [scicode_record(s, MODEL_ERROR if s in erred else "fail" if s in failed else "pass") for s in steps]


def scicode_settings(**extra: Any) -> dict[str, Any]:
    """A SciCode run's settings as the plugin records them (the ones the reports and comparisons read)."""
    return {
        "benchmark": "scicode",
        "split": "validation",
        "model": "mutant",
        "run_id": "r1",
        "mode": "naive",
        "background": True,
        "data_hashes": {"problems": "a" * 64, "targets": "b" * 64},
        **extra,
    }


def scicode():
    from pytest_agentbench.benchmarks.registry import get_benchmark  # why: loads the benchmarks on first use

    return get_benchmark("scicode")


def scicode_summary(
    records: Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any] | None = None,
    *,
    selection: Sequence[Mapping[str, Any]] | None = None,
    reused: Sequence[str] = (),
):
    """``build_summary`` of SciCode records, as the plugin's reporter makes it at the end of a session."""
    from pytest_agentbench.report.summary import build_summary  # why: the report layer loads NumPy

    return build_summary(records, scicode(), settings or scicode_settings(), selection=selection, reused=reused)


def report_options(tmp_path: Path, cli: Mapping[str, Any] | None = None, ini: Mapping[str, Any] | None = None):
    """The report layer's options resolved from a command line (option name -> value) and ini, as the plugin
    resolves them (paths relative to ``tmp_path``)."""
    return resolve(
        REPORT_OPTIONS,
        Sources(cli=dict(cli or {}), ini=dict(ini or {}), env={}, invocation_dir=tmp_path, rootdir=tmp_path),
    )


def scicode_gates(tmp_path: Path, **cli: Any) -> GateConfig:
    """SciCode's gate configuration from command-line values: ``scicode_gates(tmp, fail_under=["main=60%"])``."""
    return gate_config(report_options(tmp_path, cli=cli), scicode())


def judged_run(
    records: Sequence[Mapping[str, Any]],
    run_dir: Path,
    gates: GateConfig | None = None,
    *,
    baseline: Mapping[str, Any] | None = None,
    exit_status: int = 1,
    settings: Mapping[str, Any] | None = None,
):
    """What the reporter does at the end of a session, in-process: summary, verdict and reports written to
    ``run_dir`` (summary.json, summary.md, the baseline when ``gates`` ask to update it). ``exit_status``:
    pytest's before the gates (1: some item failed). Returns (summary, verdict, written)."""
    from pytest_agentbench.report.summary import judge, write_reports  # why: the report layer loads NumPy

    summary = scicode_summary(records, settings)
    verdict = judge(summary, gates, baseline, exit_status)
    written = write_reports(summary, verdict, run_dir, gates=gates, baseline=baseline)
    return summary, verdict, written


def generated_records(
    model: Any, problems: Sequence[Mapping[str, Any]], *, price: Any = None, budget: float | None = None
) -> list[dict[str, Any]]:
    """Each problem's first step asked of ``model`` (a real client) through SciCode's own naive harness, with
    ``price`` (a ``models.price.Price``) costing its calls: the record of each, ``pass`` when the harness got code
    (what the scripted answers of the cost tests score), else the harness's status (``model_error``, ``budget``).
    The ``generation`` field is the harness's accounting, as a run records it."""
    from pytest_agentbench.benchmarks.scicode.generate import generate_step  # why: loads the openai SDK
    from pytest_agentbench.benchmarks.scicode.prompts import load_templates

    templates = load_templates(SHARED_DATA)
    out = []
    for problem in problems:
        step = problem["sub_steps"][0]["step_number"]
        result = generate_step(
            model,
            dict(problem),
            0,
            [],
            mode="naive",
            with_background=False,
            templates=templates,
            run_code=no_code_runs,
            price=price,
            budget=budget,
        )
        record = scicode_record(step, "pass" if result.status == "ok" else result.status, result.accounting)
        out.append({**record, "message": result.message})
    return out


def no_code_runs(code: str, timeout: float) -> dict:
    raise AssertionError("the naive harness runs no code")


def toy_records(statuses: Mapping[str, str], answers: str = "fresh", responses: str = "same") -> list[dict[str, Any]]:
    """Records of the toy benchmark (``tests/toybench``), one per ``id -> status``: a benchmark the report layer
    does not know. ``answers``: how the answers were got (``fresh``, ``replayed``); ``responses``: the responses'
    digest prefix (two runs with equal prefixes got the same answers)."""
    return [
        {
            "benchmark": "toy",
            "task": i.split(".")[0],
            "id": i,
            "split": "dev",
            "status": s,
            "scored": True,
            "message": "",
            "generation": {"answers": answers, "responses": f"{responses}-{i}"},
        }
        for i, s in statuses.items()
    ]


# One step (3.1) right in one of three attempts, [fail, pass, fail], as the terminal states it. By hand: mean 1/3
# ± sd([0, 1, 0]) / sqrt(3) = 1/3 (pass@1 and both headline metrics); pass@2's jackknife leaves out attempt 1, 2,
# 3: pass@2 of [pass, fail] = 1, [fail, fail] = 0, [fail, pass] = 1: sqrt(2/3 * ((1/3)^2 + (2/3)^2 + (1/3)^2)) =
# 2/3; pass@3 uses every attempt: none.
ONE_IN_THREE_LINES = [
    "main: mean over 3 attempts 33.3% ± 33.3% (standard error)",
    "subproblem: mean over 3 attempts 33.3% ± 33.3% (standard error)",
    "per task: pass@1 33.3% ± 33.3%, pass@2 66.7% ± 66.7%, pass@3 100.0% ± n/a",
    "per item: pass@1 33.3% ± 33.3%, pass@2 66.7% ± 66.7%, pass@3 100.0% ± n/a",
    "(± standard error over the 3 attempts; pass@k's by the jackknife, so pass@3 has none)",
]


def check_one_in_three(summary: Mapping[str, Any], markdown: str) -> None:
    """The figures of ``ONE_IN_THREE_LINES`` as summary.json (``summary``) and summary.md (``markdown``) give them."""
    stats = summary["attempts"]
    for unit in ("item", "task"):
        assert [stats["pass_at_k"][unit][k]["value"] for k in "123"] == pytest.approx([1 / 3, 2 / 3, 1])
        assert [stats["pass_at_k"][unit][k]["stderr"] for k in "12"] == pytest.approx([1 / 3, 2 / 3])
        assert stats["pass_at_k"][unit]["3"]["stderr"] is None
    assert summary["metrics"]["main"] == pytest.approx(1 / 3)
    assert stats["stderr"]["main"] == pytest.approx(1 / 3) and stats["stderr"]["subproblem"] == pytest.approx(1 / 3)
    assert "| per item | 33.3% ± 33.3% | 66.7% ± 66.7% | 100.0% ± n/a |" in markdown
    assert [(i["id"], i["attempt"]) for i in summary["items"]] == [("3.1", 1), ("3.1", 2), ("3.1", 3)]
