"""No item can end the run.

Whatever fails while one item is scored, while its record is built, written or delivered from an xdist worker
becomes that item's ``error`` record naming the stage and the cause; every other item gets its record and the
reports are written. The faults are injected by the tests' own plugin ``helpers.fault_stages`` (loaded with
``-p`` by the runs started here, xdist workers included), which wraps the plugin function doing each stage: the
package ships nothing for it. A records file
that cannot be appended to is the one failure no item's record can hold: the run stops with exit 3 naming the
file and the last record written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers.bench_runs import read_jsonl
from helpers.scicode_builders import MODEL_CONFTEST, CustomScicode

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TINY_STEPS = ["1.1", "1.2", "2.1", "2.2", "3.1"]
FAULT_CONFTEST = (
    MODEL_CONFTEST
    + '''

def pytest_agentbench_record(record, item):
    """A plugin that breaks a record: a value that refers to itself (it cannot be written as JSON)."""
    if record["id"] in os.environ.get("CYCLIC", "").split(","):
        record["plugin_note"] = {"self": record}
    if record["id"] == os.environ.get("BREAK_FILE_AT"):  # the records file becomes unwritable (see below)
        import shutil
        run_dir = os.path.join(os.environ["REPORTS"], "scicode", "mutant", "faults")
        if os.environ["HOW"] == "removed":
            shutil.rmtree(run_dir)
        else:  # a full disk: every write to /dev/full fails with ENOSPC
            os.replace(os.path.join(run_dir, "steps.jsonl"), os.path.join(run_dir, "steps.kept"))
            os.symlink("/dev/full", os.path.join(run_dir, "steps.jsonl"))
'''
)


@pytest.fixture
def faulty(pytester, bench, shared_data, monkeypatch):
    """Run the tiny dataset (ground truth answers) with the fault plugin and conftest: faulty(*args, FAULT=..., ...)."""
    pytester.makeconftest(FAULT_CONFTEST)
    custom = CustomScicode(pytester, bench, shared_data)
    custom.write()
    reports = pytester.path / "reports"

    tests = str(Path(__file__).resolve().parent)  # helpers.fault_stages, for the run and its xdist workers
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")])))

    def run(*args: str, **env: str):
        for name in ("FAULT", "CYCLIC", "BREAK_FILE_AT", "HOW", "BREAK_STEPS", "ERROR_STEPS"):
            monkeypatch.setenv(name, env.get(name, ""))
        monkeypatch.setenv("REPORTS", str(reports))
        return custom(
            "--bench-timeout=20",
            f"--bench-report-dir={reports}",
            "--bench-run-id=faults",
            "-p",
            "helpers.fault_stages",
            *args,
            subprocess=True,
        )

    run.run_dir = reports / "scicode" / "mutant" / "faults"
    return run


def complete_records(result, run_dir: Path) -> dict[str, dict]:
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 1, out[-3000:]  # failed items, nothing worse: not 2 (interrupted), 3 or 4
    assert "INTERNALERROR" not in out, out[-3000:]
    records = {r["id"]: r for r in read_jsonl(run_dir / "steps.jsonl")}
    assert sorted(records) == TINY_STEPS, out[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary  # the reports were written
    assert (run_dir / "summary.md").is_file() and (run_dir / "report.html").is_file()
    return records


STAGE_WORDS = {
    "score": "scoring this item failed",
    "record": "building this item's record failed",
    "write": "writing this item's record failed",
    "deliver": "delivering this item's record from its worker failed",
}


@pytest.mark.parametrize(
    "stage,xdist",
    [
        ("score", ()),
        ("record", ()),
        ("write", ()),
        ("score", ("-n", "2")),
        ("record", ("-n", "2")),
        ("write", ("-n", "2")),
        ("deliver", ("-n", "2")),
    ],
    ids=["score", "record", "write", "score-xdist", "record-xdist", "write-xdist", "deliver-xdist"],
)
def test_a_fault_at_any_stage_is_that_items_error(faulty, stage, xdist):
    result = faulty(*xdist, FAULT=f"{stage}:1.2")
    records = complete_records(result, faulty.run_dir)
    broken = records["1.2"]
    assert broken["status"] == "error" and broken["error_stage"] == stage, broken
    assert broken["message"] == f"agentbench: {STAGE_WORDS[stage]}: RuntimeError: injected {stage} fault in 1.2"
    assert "RuntimeError" in broken["traceback"]
    assert broken["task"] == "1" and broken["split"] == "validation" and broken["model"] == "mutant"
    if stage != "score":
        assert broken["status_before_error"] == "pass"  # what it was before the stage failed
    assert all(records[s]["status"] == "pass" for s in TINY_STEPS if s != "1.2"), records
    out = result.stdout.str()
    assert f"error: agentbench: {STAGE_WORDS[stage]}" in out  # the item is shown failed with the cause
    assert "4 pass, 1 error" in out


def test_a_record_that_cannot_be_written_is_that_items_error(faulty):
    """A real fault, not an injected one: a plugin's hook makes a record refer to itself."""
    result = faulty(CYCLIC="2.1")
    records = complete_records(result, faulty.run_dir)
    broken = records["2.1"]
    assert broken["status"] == "error" and broken["error_stage"] == "record", broken
    assert "RecursionError" in broken["message"] or "Circular reference" in broken["message"], broken
    assert all(records[s]["status"] == "pass" for s in TINY_STEPS if s != "2.1")


@pytest.mark.parametrize("how", ["removed", "disk-full"])
def test_a_records_file_that_cannot_be_appended_to_stops_the_run(faulty, how):
    result = faulty(BREAK_FILE_AT="2.1", HOW=how)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 3, out[-3000:]
    records_file = faulty.run_dir / "steps.jsonl"
    assert f"cannot append to the records file {records_file}" in out, out[-3000:]
    assert "the last record written is 1.2" in out
    assert ("No such file or directory" if how == "removed" else "No space left on device") in out
    if how == "disk-full":
        kept = [r["id"] for r in read_jsonl(faulty.run_dir / "steps.kept")]
        assert kept == ["1.1", "1.2"]  # every record written before the failure is on disk
