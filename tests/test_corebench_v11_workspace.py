"""The workspace as CORE-Bench v1.1 prepares it (hard only): every results/ folder and the files the authors' hard
filter leaves out are gone before the agent starts; v1's difficulties are unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.corebench import prepare

from helpers.capsule_factory import write_capsule_tree
from helpers.corebench_v11 import HIDDEN_EXTRAS, KEPT_EXTRAS

CAPSULE = "capsule-3639589"


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.fixture
def capsule(tmp_path):
    root = write_capsule_tree(tmp_path / "store", CAPSULE)
    for rel, text in {**HIDDEN_EXTRAS, **KEPT_EXTRAS}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "data" / "results").mkdir()  # an empty results folder deep down goes too
    return root


def test_the_v11_hard_workspace_drops_results_and_the_filtered_files(capsule, tmp_path):
    workspace = prepare.prepare_workspace(capsule, tmp_path / "ws", CAPSULE, "hard", rules="v1.1")
    left = files_under(workspace)
    assert not [f for f in left if "results" in f.split("/")]
    assert not any((workspace / p).exists() for p in ("results", "code/results", "data/results"))
    for gone in ["REPRODUCING.md", "code/run", "code/run.sh", "environment/Dockerfile", *HIDDEN_EXTRAS]:
        assert gone not in left, gone
    for kept in ["code/main.py", "code/README.md", "data/values.csv", "metadata/metadata.yml", *KEPT_EXTRAS]:
        assert kept in left, kept
    # folders left empty by the filter go (upstream copies files only): no empty environment/ or cache/
    assert not (workspace / "environment").exists() and not (workspace / "code" / "cache").exists()
    assert not list(workspace.rglob("*.tar.gz"))
    assert (capsule / "results" / "output.txt").is_file()  # the unpacked capsule itself is untouched


def test_v1_hard_keeps_an_empty_results_folder_and_the_other_files(capsule, tmp_path):
    workspace = prepare.prepare_workspace(capsule, tmp_path / "ws", CAPSULE, "hard")
    left = files_under(workspace)
    assert (workspace / "results").is_dir() and not any((workspace / "results").iterdir())
    assert "code/results/old_output.txt" in left and "data/train_split.csv" in left  # v1 removes neither


@pytest.mark.parametrize(
    ("path", "dropped"),
    [
        ("results/a.txt", True),
        ("code/sub/results/a.txt", True),
        ("resultsfile.txt", False),
        ("code/REPRODUCING.md", True),
        ("environment/Dockerfile", True),
        ("code/environment.yml", False),
        ("code/run", True),
        ("code/run.py", False),
        ("x/code/run.sh", True),
        ("data/mtrain3.parquet", True),
        ("data/TRAIN.H5", True),
        ("data/train.py", False),
        ("data/cache/x", True),
        ("data/Cache/x", True),
        ("code/checkpoint", True),
        ("code/Checkpoint-2.bin", True),
        ("code/a.CKPT", True),  # the name is lowered first
        ("code/ckpt.txt", False),
        ("code/__pycache__/m.pyc", True),
    ],
)
def test_the_hard_filter_rules(path, dropped):
    assert prepare.v11_hard_drops(path) is dropped


def test_the_plugin_pins_the_published_v11_sets():
    from pytest_agentbench.benchmarks.corebench import dataset

    main, ood = dataset.DATA_SETS["v1.1"], dataset.DATA_SETS["v1.1-ood"]
    assert main.manifest.sha256 == "d4aa5ebb984df7f293e04f2dd120722f172fddea6fcb54a0c928e09bc6ef837d"
    assert ood.manifest.sha256 == "ad09c0cc164fd6d73b3891e2c42e8e04eee28aed861cb5a8e57a2a9f74f668c5"
    assert (len(main.capsule_ids), len(set(main.capsule_ids)), len(ood.capsule_ids)) == (39, 39, 19)
    assert not set(main.capsule_ids) & set(ood.capsule_ids)
    assert (
        main.capsule_url == "https://huggingface.co/datasets/agent-evals/core-bench-v1.1-mainline/resolve/main/capsules"
    )
    assert (main.manifest.subdir, main.capsule_folder) == ("core_bench/v1.1", "core_bench/v1.1/capsules")
    assert dataset.data_set(None) is dataset.DATA_SETS["v1"] and dataset.DATA_SETS["v1"].manifest is None


def test_fetch_capsules_readies_a_v11_set_and_names_its_gpu_capsules(tmp_path, monkeypatch, capsys):
    from pytest_agentbench.cli.capsules import main

    from helpers.bench_runs import SHARED_DATA
    from helpers.corebench_v11 import GPU_CAPSULE, LIST_CAPSULE, write_v11_data

    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    data = tmp_path / "data"
    write_v11_data(data, SHARED_DATA)
    args = ["--dataset=v1.1", f"--data-dir={data}", f"--cache-dir={tmp_path / 'cache'}"]
    assert main(args) == 2  # the synthetic manifest is not the pinned one
    assert "checksum mismatch" in capsys.readouterr().err
    assert main([*args, "--allow-custom-data"]) == 0
    out = capsys.readouterr().out
    assert (
        f"{GPU_CAPSULE} ready in" in out and "(needs a GPU)" in out.split(f"{GPU_CAPSULE} ready in")[1].split("\n")[0]
    )
    assert "(needs a GPU)" not in out.split(f"{LIST_CAPSULE} ready in")[1].split("\n")[0]
    assert "3 of 3 capsules ready" in out
