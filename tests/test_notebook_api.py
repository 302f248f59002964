"""A notebook user computes a benchmark's metrics from records with ``benchmark_metrics``: the numbers of the run's
summary.json, from a run folder, from its records, and from the records ``score_scicode_step`` returns.

The notebook runs in a real Jupyter kernel (nbclient and ipykernel, of the ``test`` extra), as a user's does.
"""

from __future__ import annotations

import json

import pytest

import pytest_agentbench as ab
from pytest_agentbench.benchmarks.scicode import h5codec
from pytest_agentbench.core.errors import ConfigError

from helpers.capabilities import needs
from helpers.scicode_builders import PROBLEMS, TARGETS

NOTEBOOK = """\
import json
from pathlib import Path

import pytest_agentbench as ab

run = Path({run!r})
summary = json.loads((run / "summary.json").read_text())
records = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines() if line]
print(json.dumps({{
    "summary": summary["metrics"],
    "folder": ab.benchmark_metrics(run),
    "records": ab.benchmark_metrics(records),
    "exported": "benchmark_metrics" in ab.__all__,
}}))
"""


def run_notebook(source: str, folder) -> list[str]:
    """The stdout of ``source`` run as the one cell of a notebook in a fresh python3 kernel."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    )
    client.execute()
    outputs = notebook.cells[0].outputs
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, "\n".join("\n".join(e.traceback) for e in errors)
    return [o.text for o in outputs if o.output_type == "stream" and o.name == "stdout"]


@pytest.mark.e2e
def test_a_notebook_gets_the_summary_s_metrics_from_a_run_folder(request, tmp_path):
    for module in ("nbclient", "nbformat", "ipykernel"):
        needs("dev-tool", module)
    tiny_run = request.getfixturevalue("tiny_run")  # only once the test can run: the first to ask pays for it
    assert tiny_run.returncode == 1, tiny_run.tail()  # the session's tiny run: one problem of three not resolved
    shown = json.loads("".join(run_notebook(NOTEBOOK.format(run=str(tiny_run.path)), tmp_path)))
    assert shown["summary"]["main"] == pytest.approx(2 / 3) and shown["summary"]["subproblem"] == pytest.approx(4 / 5)
    assert shown["folder"] == shown["summary"] and shown["records"] == shown["summary"]
    assert shown["exported"] is True


def test_the_records_score_scicode_step_returns_give_the_metrics(tmp_path):
    h5 = tmp_path / "targets.h5"
    for number, values in TARGETS.items():
        h5codec.write_step_targets(h5, number, values)
    targets = ab.official_scicode_targets(h5)
    one, two = PROBLEMS[0], PROBLEMS[1]
    records = [
        ab.score_scicode_step(one, 0, one["sub_steps"][0]["ground_truth_code"], targets=targets, timeout=60),
        ab.score_scicode_step(one, 1, one["sub_steps"][1]["ground_truth_code"], targets=targets, timeout=60),
        ab.score_scicode_step(two, 0, two["sub_steps"][0]["ground_truth_code"], targets=targets, timeout=60),
        ab.score_scicode_step(two, 1, "def cube(a):\n    return a * a", targets=targets, timeout=60),
    ]
    assert [r["status"] for r in records] == ["pass", "pass", "pass", "fail"]
    assert (records[0]["benchmark"], records[0]["task"], records[0]["id"], records[0]["split"]) == (
        "scicode",
        "1",
        "1.1",
        "validation",
    )
    metrics = ab.benchmark_metrics(records)
    assert metrics["main"] == pytest.approx(1 / 2) and metrics["subproblem"] == pytest.approx(3 / 4)
    assert metrics["validation.main"] == pytest.approx(1 / 2)


def test_records_that_name_no_benchmark_say_what_to_pass():
    with pytest.raises(ConfigError, match="pass benchmark="):
        ab.benchmark_metrics([])
    metrics = ab.benchmark_metrics(
        [{"task": "7", "id": "7.1", "split": "validation", "status": "pass", "scored": True}], benchmark="scicode"
    )
    assert metrics["main"] == 1.0
