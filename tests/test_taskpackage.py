"""One task, one package, without any scheduler: ``python -m pytest_agentbench run-task``
runs one task of a run with the run's settings and writes its package into the run's spool; ``collect``
takes the packages in with the code that takes in xdist deliveries and writes the summaries."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from pytest_agentbench.backends.slurm import spool
from pytest_agentbench.core import records as rec

from helpers.bench_runs import read_jsonl, run_dirs

pytestmark = pytest.mark.e2e

IDS = "1,3"  # two small validation problems, one step each


def comparable(record: dict) -> dict:
    # targets_source says whether this process built the targets or found them cached: not a result
    return {k: v for k, v in rec.comparable(record).items() if k != "targets_source"}


def command(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.run(sys.executable, "-m", "pytest_agentbench", *args, timeout=600)


def emptied(run_dir: Path) -> None:
    """The run folder as a scheduler backend leaves it before any task ran: settings.json only."""
    for path in run_dir.iterdir():
        if path.name != "settings.json":
            path.unlink()


@pytest.mark.slow
def test_run_task_packages_and_collect_gives_the_local_records(bench, pytester: pytest.Pytester) -> None:
    local = bench(
        "--bench=scicode", "--bench-split=validation", "--model=oracle", f"--bench-ids={IDS}", "--bench-run-id=r1"
    )
    assert local.ret == 0, local.stdout.str()
    (run_dir,) = run_dirs(pytester.path)
    reference = {r["id"]: comparable(r) for r in read_jsonl(run_dir / "steps.jsonl")}
    assert sorted(reference) == ["1.1", "3.1"]
    emptied(run_dir)

    for task in ("1", "3"):
        job = pytester.popen(
            [sys.executable, "-m", "pytest_agentbench", "run-task", str(run_dir), task],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = job.communicate(timeout=600)
        assert job.returncode == 0, out + err
        assert f"run-task: task {task}: package {spool.package_path(run_dir, task)}" in out, out
        # The command became the task's session: one process, the one a Slurm job starts and signals.
        assert spool.read_package(spool.package_path(run_dir, task))["meta"]["pid"] == job.pid
    assert not (run_dir / "steps.jsonl").exists()  # a task writes its package, nothing else of the run

    # A package from another process is checked like a worker's delivery: a file outside the run is refused.
    path = spool.package_path(run_dir, "3")
    body = json.loads(path.read_text())
    body["items"][0]["delivery"]["files"].append(
        ["../escape.txt", spool.encode_delivery({"files": [["x", zlib.compress(b"out")]]})["files"][0][1]]
    )
    path.write_text(json.dumps(body))

    collected = command(pytester, "collect", str(run_dir))
    assert collected.ret == 0, collected.stdout.str() + collected.stderr.str()
    records = read_jsonl(run_dir / "steps.jsonl")
    assert {r["id"]: comparable(r) for r in records} == {
        "1.1": reference["1.1"],
        "3.1": {
            **reference["3.1"],
            "delivery_errors": [
                "refused a file from the worker: run file '../escape.txt': '..' or an empty name "
                "(only paths inside the run folder are written)"
            ],
        },
    }
    assert all(r["worker"].startswith("task ") for r in records)  # the process that ran the task
    assert not (run_dir.parent / "escape.txt").exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["counts"] == {"pass": 2} and summary["complete"]
    assert (run_dir / "report.html").is_file()
    assert sorted(p.name for p in (spool.spool_dir(run_dir) / spool.TAKEN_DIR).iterdir()) == [
        "task-1.package.json",
        "task-3.package.json",
    ]

    # A package taken in already (a requeued job that finished twice) is ignored.
    taken = spool.read_package(spool.spool_dir(run_dir) / spool.TAKEN_DIR / "task-1.package.json")
    spool.write_package(run_dir, "1", taken["items"], {})
    again = command(pytester, "collect", str(run_dir))
    assert again.ret == 0, again.stdout.str()
    assert len(read_jsonl(run_dir / "steps.jsonl")) == 2
    assert not spool.waiting_packages(run_dir)


def test_run_task_refuses_a_folder_that_is_not_a_run(pytester: pytest.Pytester) -> None:
    done = command(pytester, "run-task", str(pytester.path), "1")
    assert done.ret == 2
    assert "has no settings.json: not a run folder" in done.stderr.str()
    done = command(pytester, "collect", str(pytester.path))
    assert done.ret == 2
    assert "not a run folder" in done.stderr.str()
