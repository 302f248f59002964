"""Records and summaries keep their files: the run folder in tests/old_runs/ (written before the ``Record`` and
``Summary`` types, see its README) loads, every field survives load -> save byte for byte, its summary is
rebuilt unchanged from its records, and ``--bench-resume`` of it reuses every record and leaves its files as
they were."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.registry import get_benchmark
from pytest_agentbench.core import records as rec
from pytest_agentbench.core.records import Record
from pytest_agentbench.core.types import Sample
from pytest_agentbench.pytest_plugin.run import run_with_retries
from pytest_agentbench.report.baseline import json_text, load_summary, write_baseline
from pytest_agentbench.report.ledger import Ledger, RunPlan
from pytest_agentbench.report.summary import Summary, Verdict, build_summary, render_markdown

from helpers.scicode_builders import MODEL_CONFTEST

OLD = Path(__file__).parent / "old_runs" / "scicode-tiny"
IDENTITY = ("benchmark", "task", "id", "split", "scored", "model")


def old_records() -> list[Record]:
    return [Record.from_json(data) for data in rec.read_records(OLD / "steps.jsonl")]


def test_every_old_record_survives_load_and_save(tmp_path):
    lines = (OLD / "steps.jsonl").read_bytes().splitlines(keepends=True)
    records = old_records()
    assert [(r.id, r.task, r.status, r.scored, r.message) for r in records] == [
        ("1.1", "1", "pass", True, ""),
        ("1.2", "1", "pass", True, ""),
        ("2.1", "2", "pass", True, ""),
        ("2.2", "2", "fail", True, records[3].message),
        ("3.1", "3", "model_error", True, records[4].message),
    ]
    assert "AssertionError" in records[3].message and "the model service is down" in records[4].message
    assert records[0].extra["generation"] == {"model_calls": 1, "status": "ok"} and "status" not in records[0].extra
    for line, record in zip(lines, records, strict=True):
        data = json.loads(line)
        assert rec.record_line(record) == line  # byte for byte
        assert record.to_json() == data and list(record.to_json()) == list(data)  # every field, in its order
        assert record == data and dict(record) == data and record["generation"] == data["generation"]
    rec.rewrite_records(tmp_path / "steps.jsonl", records)
    assert (tmp_path / "steps.jsonl").read_bytes() == (OLD / "steps.jsonl").read_bytes()


def test_a_record_gives_back_exactly_the_json_it_was_given():
    odd = [
        {"id": 7, "status": "pass"},  # a number for an id, no benchmark/task/split/scored/message
        {"message": None, "scored": "yes", "id": "1.1", "status": "fail", "x": {"nested": [1, 2]}},
        {
            "z": 1,
            "attempt": 2,
            "id": "1.1",
            "task": "1",
            "split": "dev",
            "benchmark": "b",
            "status": "pass",
            "scored": False,
            "message": "m",
        },
    ]
    for data in odd:
        record = Record.from_json(data)
        assert record.to_json() == data and list(record.to_json()) == list(data) and len(record) == len(data)
        assert rec.to_json(record) == rec.to_json(data) and record == data
    assert Record.from_json(odd[0]).id == "" and Record.from_json(odd[0])["id"] == 7  # typed field only when typed
    assert "benchmark" not in Record.from_json(odd[0]) and Record.from_json(odd[1]).message == ""
    third = Record.from_json(odd[2])
    assert third.key == "1.1[attempt2]" and not third.scored and third.extra == {"z": 1, "attempt": 2}
    changed = third.replaced(status="fail", new=1)
    assert changed.status == "fail" and list(changed) == [*odd[2], "new"] and third.status == "pass"
    assert json.loads(json.dumps({"r": third}, default=rec.json_default)) == {"r": odd[2]}  # nested in JSON


def test_old_summary_json_survives_load_and_save(tmp_path):
    text = (OLD / "summary.json").read_text()
    summary = Summary(load_summary(OLD))  # a baseline's summary: its file's fields and _path, which stays in memory
    assert summary["_path"] == str(OLD / "summary.json")
    assert json_text(summary.to_json()) == text
    write_baseline(tmp_path / "baseline.json", summary)
    assert (tmp_path / "baseline.json").read_text() == text


# run counts added since the old run was made (the items selected and scored): the rest is as it was
ADDED_RUN_COUNTS = ("items", "items_scored")


# what a resumed run's usage adds: this session's calls apart from the reused records'
ADDED_USAGE = ("this_session", "reused")


def without_added_counts(summary: dict) -> dict:
    counts = {k: v for k, v in summary["run_counts"].items() if k not in ADDED_RUN_COUNTS}
    usage = {k: v for k, v in summary["usage"].items() if k not in ADDED_USAGE}
    return {**summary, "run_counts": counts, "usage": usage}


def test_the_old_records_give_the_old_summary_and_summary_md():
    old = json.loads((OLD / "summary.json").read_text())
    records = old_records()
    plan = RunPlan()
    plan.select([{k: r[k] for k in IDENTITY} for r in records])
    ledger = Ledger()
    for record in records:
        ledger.add(record.to_json())
    ledger.reuse(records)  # already there: kept as delivered
    assert len(ledger) == 5 and "2.2" in ledger and ledger.records() == records
    summary = build_summary(ledger, get_benchmark("scicode"), old["settings"], plan.items)
    assert set(old) - set(summary.to_json()) == {"run", "exit_code"}  # added at the end of the session
    # the items that ended in an error, a key added since the old run was made
    assert summary["errors"] == {"items": 1, "counts": {"model_error": 1}, "ids": ["3.1"]}
    new = {k: v for k, v in without_added_counts(summary.to_json()).items() if k != "errors"}
    assert {k: v for k, v in old.items() if k not in ("run", "exit_code")} == new
    assert summary.not_run == [] and summary.terminal[0].startswith("validation: main problems resolved 1/3")
    summary.update(run=old["run"], exit_code=old["exit_code"])
    markdown = render_markdown(summary, Verdict(exit_before=1, exit_code=1), picture=True)
    # the tables of the run and its settings list them in the order the run made them (the files sort them)
    head, _, tables = markdown.partition("\n## Run\n")
    old_head, _, old_tables = (OLD / "summary.md").read_text().partition("\n## Run\n")
    # the run counts' line names how many items were scored, a figure added since the old run was made
    old_head = old_head.replace("subproblem_total 5)\n", "subproblem_total 5); items scored 4 of 5\n")
    # the error warning moved from SciCode's own Markdown to the head every page shares (report/caveats.py)
    old_head = old_head.replace(
        "**1 step(s) ended in a model or environment error** (counted as not passed): the score is incomplete.\n\n", ""
    ).replace(
        "run old-format\n\n",
        "run old-format\n\n> **1 item(s) ended in an error (1 model_error): 3.1**\n>\n> They are no verdict on the "
        "model and count as not passed: the score is incomplete. Resuming the run runs them again with its own "
        "settings and keeps the pass and fail verdicts.\n\n",
    )

    # table cells now pass the one gate for outside text, which escapes Markdown syntax (pytest\\_agentbench): the
    # cells are compared as they render
    def rendered(text: str) -> list[str]:
        return sorted(re.sub(r"\\([_*\[\]<>~`#+=-])", r"\1", line) for line in text.splitlines())

    assert head == old_head and rendered(tables) == rendered(old_tables)


@pytest.mark.e2e
def test_a_resume_of_an_old_run_reuses_every_verdict(tiny, pytester, shared_cache):
    run_dir = pytester.path / "reports" / "scicode" / "mutant" / "old-format"
    shutil.copytree(OLD, run_dir)
    # the run moved here: its own options (settings.json "_run") name this test's dataset and cache
    settings = (OLD / "settings.json").read_text()
    moved = settings.replace("/tmp/types-gen/cache", str(shared_cache)).replace("/tmp/types-gen", str(pytester.path))
    (run_dir / "settings.json").write_text(moved)
    # only 3.1, the old run's model_error, runs again: a fresh 2.2 would pass, its kept fail stays
    result = tiny(f"--bench-resume={run_dir}", broken="", errors="")
    result.assert_outcomes(passed=4, failed=1)
    old_lines = (OLD / "steps.jsonl").read_bytes().splitlines(keepends=True)
    new_lines = (run_dir / "steps.jsonl").read_bytes().splitlines(keepends=True)
    assert new_lines[:-1] == [line for line in old_lines if b'"model_error"' not in line]
    assert json.loads(new_lines[-1])["id"] == "3.1" and json.loads(new_lines[-1])["status"] == "pass"
    assert (run_dir / "settings.json").read_text() == moved
    old, new = (json.loads((folder / "summary.json").read_text()) for folder in (OLD, run_dir))
    assert new["usage"]["this_session"]["model_calls"] == 1  # 3.1 asked again; every other call was the first's
    assert new["usage"]["reused"]["items"] == 4
    # the comparability keys are new since the old run was made: the resumed summary records them
    assert "comparability" not in old and new["comparability"]["benchmark"] == "scicode"
    assert old["counts"] == {"pass": 3, "fail": 1, "model_error": 1} and new["counts"] == {"pass": 4, "fail": 1}
    # settings added since the old run was made (max_retry_time) are recorded with their defaults
    assert {k for k in new["settings"] if new["settings"][k] != old["settings"].get(k)} <= {
        "cache_dir",
        "notes",
        "isolation",
        "max_retry_time",
        "child_env",  # the names a child's environment may hold, listed since
    }


# ---- records are typed where they are made ---------------------------------------------------------------
SAMPLE = Sample(id="4.2", task_id="4", split="validation")


def test_a_benchmark_makes_its_record_typed_and_checked():
    fields = {"answer": "7", "status": "fail", "generation": {"model_calls": 1}}
    record = rec.sample_record("toy", SAMPLE, fields)
    identity = (record.benchmark, record.task, record.id, record.split, record.scored)
    assert identity == ("toy", "4", "4.2", "validation", True)
    assert (record.status, record.message) == ("fail", "")  # a message left out is empty
    assert record.extra == {"answer": "7", "generation": {"model_calls": 1}}
    # the sample's identity first, then the benchmark's fields in their order (report.html lists them so)
    assert list(record.to_json()) == [*IDENTITY[:5], "answer", "status", "generation", "message"]
    with pytest.raises(ValueError, match="toy 4.2: status 'passed' is none of pass, fail, "):
        rec.sample_record("toy", SAMPLE, {"status": "passed"})
    with pytest.raises(ValueError, match="toy 4.2: record field 'message' is NoneType, not str"):
        rec.sample_record("toy", SAMPLE, {"status": "pass", "message": None})
    with pytest.raises(ValueError, match="record field 'scored' is int, not bool"):
        rec.sample_record("toy", SAMPLE, {"status": "pass", "scored": 1})


class CheckedRun:
    """A benchmark's run (the BenchRun protocol) whose record is made by ``sample_record``."""

    def __init__(self, fields):
        self.fields = fields

    def run_sample(self, sample):
        return rec.sample_record("toy", sample, self.fields)

    def close(self):
        pass


class PlainRun(CheckedRun):
    """A benchmark of another package that still returns its record's fields as a dict."""

    def run_sample(self, sample):
        return dict(self.fields)


def test_the_run_loop_carries_records_and_a_record_failing_its_check_is_the_items_error():
    made = run_with_retries(CheckedRun({"status": "pass", "answer": "7"}), SAMPLE, max_retries=0)
    assert isinstance(made, Record) and made.status == "pass" and made["answer"] == "7"
    assert list(made.to_json()) == [*IDENTITY[:5], "status", "answer", "message", "duration"]
    plain = run_with_retries(PlainRun({"status": "fail", "answer": "8"}), SAMPLE, max_retries=0)
    assert isinstance(plain, Record) and (plain.status, plain.message, plain["answer"]) == ("fail", "", "8")
    broken = run_with_retries(CheckedRun({"status": "passed"}), SAMPLE, max_retries=1)
    assert isinstance(broken, Record) and broken.status == "error"  # retried once (an error), then kept
    assert "ValueError: toy 4.2: status 'passed' is none of" in broken.message
    assert broken["counted_try"] == 2 and [t["status"] for t in broken["tries"]] == ["error", "error"]


RECORD_HOOK = """
def pytest_agentbench_record(record, item):
    # a user's conftest changes the record in place (the hook's contract), a common field included
    if record["id"] == "3.1":
        record["status"] = "fail"
        record["message"] = "failed by the reviewer"
    record["reviewed_by"] = "conftest"
"""


@pytest.mark.slow
@pytest.mark.e2e
def test_a_record_the_hook_changed_in_place_is_the_one_written_and_summarized(tiny, pytester):
    pytester.makeconftest(MODEL_CONFTEST + RECORD_HOOK)
    result = tiny("--bench-ids=1,3", "--bench-run-id=hooked")
    result.assert_outcomes(passed=3)  # the item's outcome was decided before the hook ran
    run_dir = pytester.path / "reports" / "scicode" / "mutant" / "hooked"
    records = {r["id"]: r for r in rec.read_records(run_dir / "steps.jsonl")}
    assert sorted(records) == ["1.1", "1.2", "3.1"]
    assert all(r["reviewed_by"] == "conftest" for r in records.values())
    assert (records["3.1"]["status"], records["3.1"]["message"]) == ("fail", "failed by the reviewer")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["counts"] == {"pass": 2, "fail": 1}
    assert {i["id"]: i["status"] for i in summary["items"]} == {"1.1": "pass", "1.2": "pass", "3.1": "fail"}
