"""What a resumed run keeps and what it runs again, decided in-process on a run folder's records file: the
controller's steps after it read the finished records (``pytest_plugin/state.py``). Pass and fail verdicts are
kept; an item that ended in an error, whose worker died or whose host lacked what it needs runs again, its line
cut from the file; a benchmark's revision of its records (CORE-Bench's review) is applied to the kept ones; a run
with a record for every selected item has nothing left to run. The sessions that resume a real run are in
``test_resume.py`` and ``test_resume_errors.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_agentbench.core import records as rec
from pytest_agentbench.core.options import Settings
from pytest_agentbench.core.records import Record
from pytest_agentbench.pytest_plugin.run import BenchState
from pytest_agentbench.pytest_plugin.state import drop_rerun, nothing_left, revise_resumed, runs_again
from pytest_agentbench.report.resume import load_for_controller

from helpers.bench_runs import read_jsonl
from helpers.records_kit import scicode_record
from toybench import Toy


def records_file(folder: Path, *records: dict) -> Path:
    """A run's records file holding ``records``, one line each, as the controller wrote them."""
    path = folder / "steps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def reloaded(path: Path) -> tuple[dict[str, Record], list[str]]:
    """What the controller reads first: the finished records and the notes of the resume."""
    resumed = load_for_controller(path)
    return resumed.records, resumed.notes


def test_errors_lost_and_unplaced_items_run_again_and_verdicts_are_kept(tmp_path):
    path = records_file(
        tmp_path,
        scicode_record("1.1"),
        scicode_record("1.2", "fail"),
        scicode_record("2.1", "model_error"),
        scicode_record("2.2", "blocked"),
        scicode_record("3.1", "env_error"),
        {**scicode_record("4.1", "error"), rec.LOST_FIELD: True},
        {**scicode_record("5.1", "error"), rec.UNPLACED_FIELD: True},
    )
    finished, notes = reloaded(path)
    assert notes == [f"resuming {tmp_path}: 7 finished record(s) reused, the rest runs now"]
    kept = drop_rerun(path, finished, notes)
    assert sorted(kept) == ["1.1", "1.2"] and kept["1.2"].status == "fail"
    assert notes == [
        f"resuming {tmp_path}: 2 finished record(s) reused, the rest runs now",
        "1 item(s) whose worker died run again: 4.1",
        "1 item(s) whose host lacked what they need run again: 5.1",
        "3 item(s) that ended in an error (model_error, env_error, blocked) run again: 2.1, 2.2, 3.1",
    ]
    # the file keeps only the verdicts, so each item ends with one record once it has run again
    assert [r["id"] for r in read_jsonl(path)] == ["1.1", "1.2"]


def test_a_run_of_verdicts_only_is_reused_whole_and_its_file_untouched(tmp_path):
    path = records_file(tmp_path, scicode_record("1.1"), scicode_record("1.2", "fail"))
    before = path.read_bytes()
    finished, notes = reloaded(path)
    assert drop_rerun(path, finished, notes) is finished
    assert notes == [f"resuming {tmp_path}: 2 finished record(s) reused, the rest runs now"]
    assert path.read_bytes() == before


def test_a_later_verdict_of_an_item_that_erred_first_is_kept(tmp_path):
    """A lost item xdist ran again has its lost record, then its verdict: the verdict is the item's."""
    lost = {**scicode_record("1.1", "error"), rec.LOST_FIELD: True}
    path = records_file(tmp_path, lost, scicode_record("1.2"), scicode_record("1.1"))
    finished, notes = reloaded(path)
    kept = drop_rerun(path, finished, notes)
    assert {k: r.status for k, r in kept.items()} == {"1.1": "pass", "1.2": "pass"}
    assert len(notes) == 1  # nothing runs again
    assert [r["id"] for r in read_jsonl(path)] == ["1.2", "1.1"]  # the lost line left the file


@pytest.mark.parametrize(
    "status,again",
    [("pass", False), ("fail", False), ("skipped", False), ("model_error", True), ("blocked", True), ("error", True)],
)
def test_only_records_without_a_verdict_run_again(status, again):
    assert runs_again(scicode_record("1.1", status)) is again


class Reviewed(Toy):
    """The toy benchmark with a review of its records (what CORE-Bench's --bench-review does on resume): a human
    verdict overrides the automatic one of the sample t1.2."""

    def revise_record(self, record: Record) -> Record:
        if record.id == "t1.2" and "reviewed" not in record:
            return record.replaced(reviewed="pass")
        return record


def toy_record(sample: str, status: str = "pass") -> dict:
    return {"benchmark": "toy", "task": sample.split(".")[0], "id": sample, "split": "dev", "status": status}


def test_the_benchmarks_revision_is_applied_to_the_kept_records_and_their_file(tmp_path):
    path = records_file(tmp_path, toy_record("t1.1"), toy_record("t1.2", "fail"))
    finished, _ = reloaded(path)
    revised = revise_resumed(Reviewed(), path, finished)
    assert revised["t1.2"]["reviewed"] == "pass" and revised["t1.2"].status == "fail"  # the automatic one stays
    assert revised["t1.1"] is finished["t1.1"]
    assert [r.get("reviewed") for r in read_jsonl(path)] == [None, "pass"]


def test_a_benchmark_that_revises_nothing_leaves_the_file_alone(tmp_path):
    path = records_file(tmp_path, toy_record("t1.1"), toy_record("t1.2", "fail"))
    before = path.stat().st_mtime_ns, path.read_bytes()
    finished, _ = reloaded(path)
    assert revise_resumed(Toy(), path, finished) == finished
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before


def toy_state(tmp_path: Path, resumed: dict[str, Record], attempts: int = 1, *, resume: bool = True) -> BenchState:
    """The controller's state of a resumed toy run (its four samples selected)."""
    benchmark = Toy()
    options = Settings({"resume": tmp_path if resume else None, "attempts": attempts})
    return BenchState(
        benchmark=benchmark,
        split="dev",
        settings={},
        options=options,
        tasks=benchmark.load_tasks(options, "dev"),
        run_dir=tmp_path,
        only_bench=True,
        records_path=tmp_path / benchmark.records_file,
        is_worker=False,
        resumed=resumed,
    )


def finished_toy(*keys: str) -> dict[str, Record]:
    return {key: Record.from_json(toy_record(key.split("[")[0])) for key in keys}


def test_nothing_is_left_only_when_every_selected_item_has_a_record(tmp_path):
    every = ("t1.1", "t1.2", "t2.1", "t2.2")
    assert nothing_left(toy_state(tmp_path, finished_toy(*every)))
    assert not nothing_left(toy_state(tmp_path, finished_toy(*every[:3])))
    assert not nothing_left(toy_state(tmp_path, finished_toy(*every), resume=False))  # not a resumed run
    # with attempts, every attempt of every sample is an item
    two = [f"{s}[attempt{a}]" for a in (1, 2) for s in every]
    assert not nothing_left(toy_state(tmp_path, finished_toy(*every), attempts=2))
    assert not nothing_left(toy_state(tmp_path, finished_toy(*two[:-1]), attempts=2))
    assert nothing_left(toy_state(tmp_path, finished_toy(*two), attempts=2))
