"""A container's workspace is taken in only down to the bounds of the walk that judges it (``core.trees``).

Extracting a member costs a lookup per folder level on its way (the tar ``data`` filter resolves its path), so
a tree an agent nested 1,500 deep took over a minute of the controller's CPU to extract, deeper ones longer;
the walk after it stops at 256 levels anyway, so what lies below was never judged.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_agentbench.core.trees import DEFAULT_BOUNDS, remove_tree
from pytest_agentbench.envs.docker import DockerFactory

from helpers import envs_contract as contract
from helpers.capabilities import needs
from helpers.capsule_factory import labelled_containers

pytestmark = [pytest.mark.docker, pytest.mark.slow]  # (a container making a 1,500-deep tree: ~8 s)

DEEP = 1500


@pytest.fixture(autouse=True)
def no_deep_tree_left(tmp_path):
    """pytest's clean-up of old temporary folders uses ``shutil.rmtree``: a deep tree left there would end a
    later session."""
    yield
    for child in list(tmp_path.iterdir()):
        remove_tree(child)


def deepest_folder(root: Path) -> int:
    """How many folders deep the tree under ``root`` goes (a stack of its own: no recursion limit)."""
    most, stack = 0, [(str(root), 0)]
    while stack:
        folder, depth = stack.pop()
        most = max(most, depth)
        with os.scandir(folder) as entries:
            stack.extend((e.path, depth + 1) for e in entries if e.is_dir(follow_symlinks=False))
    return most


def test_a_tree_nested_past_the_depth_bound_is_copied_out_only_down_to_it(tmp_path):
    factory = DockerFactory(image=needs("docker"), network="none")
    try:
        with factory.start(contract.make_workspace(tmp_path), name="deep") as env:
            made = env.run(f'd=deep; for i in $(seq {DEEP}); do d=$d/a; done; mkdir -p "$d" && echo made', 120)
            assert made.stdout.strip() == "made", made
            env.run("echo '{\"q\": 1}' > report.json", 10)
            out = env.copy_out(tmp_path / "out")
            copied = env.copied
    finally:
        factory.close()
    assert labelled_containers() == []
    assert (
        copied.past_bound and "nested folders" in copied.past_bound and str(DEFAULT_BOUNDS.depth) in copied.past_bound
    )
    assert (out / "report.json").read_text() == '{"q": 1}\n'  # what lies within the bounds came
    assert (out / "capsule" / "data" / "values.csv").is_file()
    assert deepest_folder(out / "deep") <= DEFAULT_BOUNDS.depth  # nothing below the bound reached this machine
