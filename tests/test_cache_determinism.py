"""Only deterministic results are cached, and a process prepares only
what it runs.

A cache entry (SciCode's rebuilt targets of one problem, a CORE-Bench capsule unpacked from its tarball) is
stored only for an outcome the same inputs always give, under a key that covers those inputs; a failure the
environment caused is the item's ``env_error``, never stored, and the next run tries again without anyone
touching the cache. A record says where its targets or its capsule came from (``targets_source``,
``capsule_source``). SciCode's targets are rebuilt per problem when its first step reaches the process,
outside the step's ``duration``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.corebench import capsules
from pytest_agentbench.benchmarks.scicode import locate
from pytest_agentbench.benchmarks.scicode.locate import RebuiltTable, build_problem, entry_key, entry_path
from pytest_agentbench.sandbox.executors import Limits

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.capsule_factory import build_capsule_archive, write_capsule_tree
from helpers.scicode_builders import MODEL_CONFTEST, PROBLEMS, custom_data_args, tiny_problems, write_dataset

STEPS = [s["step_number"] for p in PROBLEMS for s in p["sub_steps"]]


def entries(cache: Path) -> list[Path]:
    """The rebuilt-targets entries in a cache folder (an h5 file and its manifest each; lock files aside)."""
    folder = cache.joinpath(*locate.REBUILT_FOLDER)
    return sorted(folder.glob("*.h5")) if folder.is_dir() else []


@pytest.fixture
def rebuilding(pytester, bench, shared_data, tmp_path):
    """Run the tiny dataset with its targets rebuilt from the ground truth into a cache of the test's own:
    rebuilding(*args, problems=...) -> (RunResult, {step: record}); ``rebuilding.cache`` is that cache."""
    pytester.makeconftest(MODEL_CONFTEST)
    cache = tmp_path / "cache"

    def run(*args: str, problems: list[dict] = PROBLEMS):
        data, _ = write_dataset(pytester.path, shared_data, problems=problems)
        for old in run_dirs(pytester.path):
            (old / "steps.jsonl").unlink(missing_ok=True)
        result = bench(
            *custom_data_args(data, None, "--bench-timeout=20"),
            f"--bench-cache-dir={cache}",
            *args,
        )
        records = {
            r["step"]: r
            for d in run_dirs(pytester.path)
            if (d / "steps.jsonl").is_file()
            for r in read_jsonl(d / "steps.jsonl")
        }
        return result, records

    run.cache = cache
    return run


# ---- SciCode: rebuilt targets ------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
def test_a_rebuild_the_environment_broke_is_an_env_error_and_the_next_run_rebuilds_it(rebuilding):
    """A memory limit under which the rebuild's interpreter cannot even import numpy: every step is an env_error
    naming the cause and nothing is stored; the next run (limit lifted, cache untouched) rebuilds and passes."""
    broken, records = rebuilding("--bench-set=memory_limit=0.03")
    assert broken.ret == 1 and sorted(records) == STEPS
    for record in records.values():
        assert record["status"] == "env_error", record
        assert record["message"].startswith(f"could not rebuild the targets of step {record['step']}")
        assert "numpy" in record["message"] or "memory" in record["message"], record["message"]
        assert "targets_source" not in record
    assert entries(rebuilding.cache) == []  # a failure is never stored
    fixed, records = rebuilding()
    assert fixed.ret == 0, fixed.stdout.str()[-3000:]
    assert {r["status"] for r in records.values()} == {"pass"}
    assert {r["targets_source"] for r in records.values()} == {"rebuilt"}
    assert len(entries(rebuilding.cache)) == len(PROBLEMS)
    again, records = rebuilding()
    assert again.ret == 0 and {r["targets_source"] for r in records.values()} == {"cached"}
    assert len(entries(rebuilding.cache)) == len(PROBLEMS)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_problem_selected_alone_rebuilds_only_its_own_targets(rebuilding):
    only, records = rebuilding("--bench-ids=2")
    assert only.ret == 0 and sorted(records) == ["2.1", "2.2"]
    [entry] = entries(rebuilding.cache)
    assert entry.name.startswith("2-")
    by_k, records = rebuilding("-k", "3.1")
    assert by_k.ret == 0 and sorted(records) == ["3.1"] and records["3.1"]["targets_source"] == "rebuilt"
    assert sorted(e.name.split("-")[0] for e in entries(rebuilding.cache)) == ["2", "3"]


REBUILD_SECONDS = 20  # far over the step's 3 s timeout and any step's own time; under the rebuild's 30 s limit
SLOW_TO_REBUILD = (  # sleeps only where the rebuild runs it: the rebuild's child has a result.json to write
    "import os, time\ndef six():\n    if os.path.exists('result.json'):\n"
    f"        time.sleep({REBUILD_SECONDS})\n    return 6"
)


@pytest.mark.e2e
@pytest.mark.slow
def test_the_rebuild_is_neither_in_the_step_duration_nor_in_its_timeout(rebuilding):
    problems = tiny_problems(**{"3.1": SLOW_TO_REBUILD})
    result, records = rebuilding("--bench-ids=3", "--bench-timeout=3", problems=problems)
    assert result.ret == 0, result.stdout.str()[-3000:]
    record = records["3.1"]
    # passed: the rebuild, longer than the timeout, was not under it
    assert record["status"] == "pass" and record["targets_source"] == "rebuilt", record
    # a duration with the rebuild in it would be at least the rebuild's sleep; the step alone is under a second
    assert record["duration"] < REBUILD_SECONDS, record["duration"]


@pytest.mark.e2e
def test_a_step_whose_ground_truth_fails_is_an_eval_error_and_not_stored(rebuilding):
    problems = tiny_problems(**{"3.1": "def six():\n    raise ValueError('no six today')"})
    result, records = rebuilding("--bench-ids=3", problems=problems)
    assert records["3.1"]["status"] == "eval_error" and "no six today" in records["3.1"]["message"]
    assert entries(rebuilding.cache) == []


def problem_one() -> dict:
    return json.loads(json.dumps(PROBLEMS[0]))


def test_an_interpreter_that_cannot_start_is_an_env_error_retried_by_the_next_build(tmp_path, monkeypatch):
    """The rebuild's children run ``sys.executable``: pointed at a path that does not exist, they cannot start
    (for real: the executor's spawn fails). Nothing is stored; with the interpreter back the problem rebuilds."""
    folder = tmp_path / "rebuilt"
    folder.mkdir()
    monkeypatch.setattr(sys, "executable", str(tmp_path / "gone" / "bin" / "python3"))
    failed = build_problem(problem_one(), folder, data_dir=None, limits=Limits(timeout=60), timeout=60, wait=True)
    assert {t.status for t in failed.values()} == {"env_error"}
    assert all("could not" in t.message for t in failed.values()), [t.message for t in failed.values()]
    assert not list(folder.glob("*.h5")) and not list(folder.glob("*.json"))
    monkeypatch.undo()
    built = build_problem(problem_one(), folder, data_dir=None, limits=Limits(timeout=60), timeout=60, wait=True)
    assert {t.origin for t in built.values()} == {"rebuilt"} and built["1.1"].read_step("1.1") == [3]
    assert len(list(folder.glob("*.h5"))) == 1


def test_an_entry_of_other_versions_or_other_data_is_not_used(tmp_path, monkeypatch):
    folder = tmp_path / "rebuilt"
    folder.mkdir()
    first = build_problem(problem_one(), folder, data_dir=None, limits=Limits(timeout=60), timeout=60, wait=True)
    assert first["1.1"].origin == "rebuilt"
    again = build_problem(problem_one(), folder, data_dir=None, limits=Limits(timeout=60), timeout=60, wait=True)
    assert again["1.1"].origin == "cached"
    key = entry_key(problem_one(), None)
    for package in ("numpy", "scipy", "h5py"):
        other = dict(key["versions"], **{package: "0.0.1"})
        monkeypatch.setattr(locate, "package_versions", lambda other=other: other)
        assert entry_path(problem_one(), entry_key(problem_one(), None), folder) != first["1.1"].path
        rebuilt = build_problem(problem_one(), folder, data_dir=None, limits=Limits(timeout=60), timeout=60, wait=True)
        assert rebuilt["1.1"].origin == "rebuilt", package
    monkeypatch.undo()
    # the entry stored under the first key, with its manifest copied next to the name another key gives:
    # the key inside the manifest is not the one asked for, so it is not used either
    changed = problem_one()
    changed["sub_steps"][0]["test_cases"] = ["assert np.allclose(add(2, 2), target)"]
    other_path = entry_path(changed, entry_key(changed, None), folder)
    other_path.write_bytes(first["1.1"].path.read_bytes())
    other_path.with_suffix(".json").write_text(first["1.1"].path.with_suffix(".json").read_text())
    rebuilt = build_problem(changed, folder, data_dir=None, limits=Limits(timeout=60), timeout=60, wait=True)
    assert rebuilt["1.1"].origin == "rebuilt" and rebuilt["1.1"].read_step("1.1") == [4]


def test_a_table_builds_a_problem_when_its_first_step_is_asked_for(tmp_path):
    table = RebuiltTable(PROBLEMS, tmp_path / "cache", data_dir=None, limits=Limits(timeout=60))
    assert table.steps == {} and entries(tmp_path / "cache") == []
    table.prepare_step("2.2")
    assert sorted(table.steps) == ["2.1", "2.2"] and len(entries(tmp_path / "cache")) == 1
    assert table.for_step("2.1").read_step("2.1") == [9]
    assert table.for_step("9.1").path is None


# ---- CORE-Bench: capsules ----------------------------------------------------------------------------------

CID = "capsule-1234567"


def store_and_cache(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "store", tmp_path / "cache" / "capsules" / "extracted"


def test_a_replaced_capsule_tarball_is_unpacked_again(tmp_path):
    store, extracted = store_and_cache(tmp_path)
    build_capsule_archive(store, CID, extra={"data/version.txt": "first\n"})
    first, source, _ = capsules.prepare_capsule(CID, store, extracted)
    assert source == "extracted" and (first / "data" / "version.txt").read_text() == "first\n"
    again, source, _ = capsules.prepare_capsule(CID, store, extracted)
    assert source == "cached" and again == first
    build_capsule_archive(store, CID, extra={"data/version.txt": "second\n"})  # the tarball replaced
    replaced, source, _ = capsules.prepare_capsule(CID, store, extracted)
    assert source == "extracted" and (replaced / "data" / "version.txt").read_text() == "second\n"
    assert not first.exists()  # the copy of the old tarball is gone, not left to be used


def test_a_staged_capsule_folder_is_used_as_is(tmp_path):
    store, extracted = store_and_cache(tmp_path)
    staged = write_capsule_tree(store, CID)
    (staged / "data" / "mine.txt").write_text("staged by hand\n")
    build_capsule_archive(store, CID)  # a tarball next to it does not replace what the user staged
    folder, source, digest = capsules.prepare_capsule(CID, store, extracted)
    assert source == "staged" and folder == staged and (folder / "data" / "mine.txt").is_file() and digest is None
    assert not extracted.exists()


@pytest.mark.e2e
@pytest.mark.slow
def test_corebench_records_say_where_the_capsule_came_from(pytester, shared_data, tmp_path, monkeypatch):
    capsule = "capsule-7038571"  # a train capsule: the oracle answers it
    store = tmp_path / "store"
    build_capsule_archive(store, capsule)
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(shared_data))
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "http://127.0.0.1:9")  # nothing is downloaded here
    runs = []

    def run() -> dict:
        runs.append(f"r{len(runs)}")
        result = pytester.runpytest(
            "--bench=core-bench",
            "--model=oracle",
            "--bench-split=train",
            f"--bench-ids={capsule}",
            f"--bench-capsules-dir={store}",
            "--bench-report-dir=reports",
            f"--bench-cache-dir={tmp_path / 'cache'}",
            f"--bench-run-id={runs[-1]}",
            "-p",
            "no:cacheprovider",
        )
        assert result.ret == 0, result.stdout.str()[-3000:]
        [record] = read_jsonl(pytester.path / "reports" / "core-bench" / "oracle" / runs[-1] / "records.jsonl")
        return record

    first = run()
    assert first["capsule_source"] == "extracted" and first["capsule_sha256"] == capsules.sha256_of(
        store / f"{capsule}.tar.gz"
    )
    assert run()["capsule_source"] == "cached"
    build_capsule_archive(store, capsule, extra={"data/more.csv": "1\n"})
    replaced = run()
    assert replaced["capsule_source"] == "extracted" and replaced["capsule_sha256"] != first["capsule_sha256"]
    write_capsule_tree(store, capsule)
    staged = run()
    assert staged["capsule_source"] == "staged" and "capsule_sha256" not in staged
