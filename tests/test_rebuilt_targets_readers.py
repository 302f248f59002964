"""The rebuilt targets file reads with the other readers of the official layout, as the official file does.

The readers of ``test_data.h5`` outside this package (upstream's runner, inspect_evals') follow the layout's
rules (the staged data's README): a test group ``<step>/test<i>`` with one member is that member's value, with
several (or none) a tuple of them in name order; a member is a dataset, or a group holding a ``list`` or
``sparse_matrix`` subgroup, or a dict's members. The strictest of them refuses a member group with nothing in
it. A test that never compares with ``target`` (78.1's and 78.2's compare with an ``expected_output``) must
still have its test group, so it is stored as an empty test group, which every reader takes as ``()``.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import pytest

from pytest_agentbench.benchmarks.scicode.targets import rebuild_targets, verify_targets

pytestmark = pytest.mark.slow  # the module's fixture rebuilds two problems in sandboxed children


def read_member(member):
    """One ``var<j>`` the way the layout's readers decode it; an empty member group is refused."""
    if isinstance(member, h5py.Dataset):
        value = member[()]
        return value.decode() if isinstance(value, bytes) else value
    names = list(member.keys())
    if not names:
        raise ValueError(f"{member.name}: an empty group holds no value")
    if names == ["list"]:
        return [read_member(member["list"][name]) for name in member["list"]]
    if names == ["sparse_matrix"]:
        return {name: member["sparse_matrix"][name][()] for name in member["sparse_matrix"]}
    return {name: read_member(member[name]) for name in names}


def read_test(test: h5py.Group):
    """A test group: its one member's value, or the tuple of its members in name order (none: ``()``)."""
    assert isinstance(test, h5py.Group), f"{test.name} is not a group"
    names = list(test.keys())
    if len(names) == 1:
        return read_member(test[names[0]])
    return tuple(read_member(test[name]) for name in sorted(names))


def validation_problems(shared_data: Path, ids: set[str]) -> list[dict]:
    lines = (shared_data / "scicode" / "problems_dev.jsonl").read_text().splitlines()
    return [p for p in map(json.loads, filter(None, lines)) if str(p["problem_id"]) in ids]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory, shared_data) -> tuple[Path, list[dict]]:
    problems = validation_problems(shared_data, {"78", "1"})
    out = tmp_path_factory.mktemp("rebuilt") / "targets.h5"
    report = rebuild_targets(problems, out, timeout=600, data_dir=shared_data)
    assert set(report.values()) == {"ok"}, report
    return out, problems


def test_every_test_group_of_the_rebuilt_file_reads_as_the_layout_says(rebuilt):
    out, problems = rebuilt
    with h5py.File(out, "r") as fh:
        for problem in problems:
            for step in problem["sub_steps"]:
                number = step["step_number"]
                for i in range(1, len(step["test_cases"]) + 1):
                    read_test(fh[f"{number}/test{i}"])  # raises on a group the readers refuse
        assert read_test(fh["78.1/test1"]) == () and read_test(fh["78.2/test3"]) == ()


def test_the_original_tests_still_pass_against_the_file(rebuilt, shared_data):
    out, problems = rebuilt
    report = verify_targets(problems, out, 600, data_dir=shared_data)
    assert set(report.values()) == {"ok"}, report
