"""Trees an agent wrote are walked with a stack of the walk's own and within bounds, and removed at any depth.

Python 3.11's ``os.walk`` and ``shutil.rmtree`` recurse once per folder level: a workspace nested 1,500 deep
raised RecursionError in the copy-out walk, which is no ``OSError``, so it escaped every ``ignore_errors``, made
the agent's doing an infrastructure ``error`` (retried: one more conversation) and left the workspace behind.
Each case here builds the real tree on disk.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.corebench import dataset, scorer
from pytest_agentbench.core.trees import TreeBounds, remove_tree
from pytest_agentbench.envs.copyout import copy_tree, prune_tree

from helpers.bench_runs import SHARED_DATA  # honours $AGENTBENCH_DATA_DIR
from helpers.capabilities import needs
from helpers.capsule_factory import build_capsule_archive

DEEP = 1500
CAPSULE = "capsule-7038571"


@pytest.fixture(autouse=True)
def no_deep_tree_left(tmp_path):
    """Every tree a case made is removed after it: pytest's own clean-up of old temporary folders uses
    ``shutil.rmtree``, and a 1,500-deep tree left there would end a later session (of anyone on the machine)."""
    yield
    for child in list(tmp_path.iterdir()):
        remove_tree(child)


def nest(root: Path, depth: int = DEEP, name: str = "a") -> Path:
    """``root/a/a/.../a`` ``depth`` folders deep, made through folder descriptors (no long path needed)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    return root


def test_a_deep_workspace_is_copied_up_to_the_depth_bound_and_said(tmp_path):
    src = nest(tmp_path / "ws")
    (src / "report.json").write_text('{"q": 1}')
    copied = copy_tree(src, tmp_path / "out", cap=1 << 20)
    assert copied.past_bound and "nested folders" in copied.past_bound and "256" in copied.past_bound
    assert copied.to_record()["past_bound"] == copied.past_bound
    assert (tmp_path / "out" / "report.json").read_text() == '{"q": 1}'  # the root's files came first
    pruned = prune_tree(src, cap=1 << 20)
    assert pruned.past_bound and "nested folders" in pruned.past_bound


def test_the_report_is_found_in_a_deep_workspace_and_a_deep_one_below_the_bound_is_not_looked_for(tmp_path):
    src = nest(tmp_path / "ws")
    assert scorer.find_report(src) is None  # past the bound: nothing more is looked at, nothing raised
    (src / "report.json").write_text("{}")
    assert scorer.find_report(src) == src / "report.json"


def test_a_wide_workspace_stops_at_the_entries_bound(tmp_path):
    src = tmp_path / "ws"
    (src / "wide").mkdir(parents=True)
    (src / "report.json").write_text("{}")
    for i in range(300):
        (src / "wide" / f"f{i}").write_bytes(b"")
    copied = copy_tree(src, tmp_path / "out", cap=1 << 20, bounds=TreeBounds(entries=100))
    assert copied.past_bound and "100 entries" in copied.past_bound
    assert copied.files <= 100 and (tmp_path / "out" / "report.json").exists()
    assert copy_tree(src, tmp_path / "all", cap=1 << 20).past_bound is None  # within the default bound


def test_a_sparse_huge_file_is_left_out_without_being_read(tmp_path):
    src = tmp_path / "ws"
    src.mkdir()
    with open(src / "huge.bin", "wb") as fh:
        fh.truncate(1 << 40)  # 1 TiB of nothing
    copied = copy_tree(src, tmp_path / "out", cap=1 << 20)
    assert [s["path"] for s in copied.skipped] == ["huge.bin"] and copied.past_bound is None
    assert not (tmp_path / "out" / "huge.bin").exists()


def test_remove_tree_removes_any_depth_and_locked_folders(tmp_path):
    deep = nest(tmp_path / "deep", name="d" * 200)  # 300,000 characters of path: past PATH_MAX too
    assert remove_tree(deep) and not deep.exists()
    locked = tmp_path / "locked"
    (locked / "in").mkdir(parents=True)
    (locked / "in" / "f").write_text("x")
    os.chmod(locked / "in", 0)
    os.chmod(locked, 0o500)
    assert remove_tree(locked) and not locked.exists()
    assert remove_tree(tmp_path / "absent")


# ---- end to end: the agent's deep workspace is the agent's failure -------------------------------------------
def env_args(kind: str) -> list[str]:
    if kind == "docker":
        return ["--bench-env=docker", f"--bench-set=docker_image={needs('docker')}", "--bench-set=docker_network=none"]
    return ["--bench-env=host"]


@pytest.mark.parametrize("kind", ["host", pytest.param("docker", marks=pytest.mark.docker)])
@pytest.mark.e2e
@pytest.mark.slow
def test_a_deep_workspace_fails_the_item_once_and_is_removed(pytester, tmp_path, server, monkeypatch, kind):
    """The scripted agent nests a folder 1,500 deep, writes a sparse 2 TiB file and submits the right answers:
    the item fails (the agent's outcome, the bound named), is not retried (one conversation), and no
    workspace is left in the run's temporary folder."""
    answers = next(t for t in dataset.load_split(SHARED_DATA, "train") if t["capsule_id"] == CAPSULE)["results"][0]
    make = f'd=deep; for i in $(seq {DEEP}); do d=$d/a; done; mkdir -p "$d" && truncate -s 2T big.bin && echo made'
    server.reply(tool_calls=[("bash", {"command": make, "timeout": 120})])
    server.reply(tool_calls=[("submit", {"answers": answers})])
    staged, scratch = tmp_path / "staged", tmp_path / "scratch"
    scratch.mkdir()
    build_capsule_archive(staged, CAPSULE)
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))
    monkeypatch.setenv("TMPDIR", str(scratch))
    result = pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--bench-split=train",
        f"--bench-ids={CAPSULE}",
        "--model=agent-model",
        f"--model-base-url={server.base_url}",
        "--model-api-key=x",
        "--bench-cache=off",
        *env_args(kind),
        "--bench-set=max_retries=2",
        f"--bench-capsules-dir={staged}",
        f"--bench-report-dir={tmp_path / 'reports'}",
        "--bench-run-id=deep",
        "-p",
        "no:cacheprovider",
    )
    records_file = tmp_path / "reports" / "core-bench" / "agent-model" / "deep" / "records.jsonl"
    records = [json.loads(line) for line in records_file.read_text().splitlines()]
    assert len(records) == 1
    record = records[0]
    assert record["status"] == "fail", record["message"]
    assert "nested folders" in record["message"] and "256" in record["message"]
    assert record["copy_out"]["past_bound"]
    result.assert_outcomes(failed=1)
    assert server.count("/chat/completions") == 2  # one conversation: never retried
    left = [p.name for p in scratch.iterdir() if p.name.startswith(("corebench-", "agentbench-host-"))]
    assert left == []
