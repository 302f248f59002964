"""``python -m pytest_agentbench fetch-capsules``: download and unpack CORE-Bench capsules ahead of a run.

A capsule already unpacked is known before collection, so its ``gpu`` marker is applied then and
``pytest -m "not gpu"`` deselects the GPU capsules instead of discovering them at run time.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..benchmarks.corebench import capsules, dataset, prepare
from ..core.data import DataError
from ..core.run_options import default_cache_dir


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_agentbench fetch-capsules",
        description="Download and unpack CORE-Bench capsules, with progress.",
    )
    parser.add_argument("--split", choices=dataset.SPLITS, default="test")
    parser.add_argument(
        "--dataset", choices=dataset.DATASETS, default=dataset.V1, help="the run's --bench-dataset (default v1)"
    )
    parser.add_argument(
        "--allow-custom-data",
        action="store_true",
        help="the run's --bench-set allow_custom_data=true: a v1.1 manifest whose sha256 is not the pinned one",
    )
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="the run's --bench-data-dir")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="the run's --bench-cache-dir (default: as a run's: $AGENTBENCH_CACHE_DIR, else the per-user folder)",
    )
    parser.add_argument("--capsules-dir", type=Path, default=None, help="the run's --bench-capsules-dir")
    parser.add_argument("--dataset-path", type=Path, default=None, help="the run's --bench-set dataset_path")
    parser.add_argument("--ids", default="", help="comma-separated capsule ids (default: the whole split)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    chosen = dataset.data_set(args.dataset)
    try:
        if chosen.manifest is not None:  # a v1.1 set: its manifest (the split and --dataset-path do not apply)
            tasks, _ = dataset.load_manifest(args.data_dir, chosen, verify=not args.allow_custom_data)
        else:
            tasks = (
                dataset.read_custom(args.dataset_path)
                if args.dataset_path
                else dataset.load_split(args.data_dir, args.split)
            )
    except (dataset.DatasetError, DataError, OSError) as exc:
        print(f"fetch-capsules: {exc}", file=sys.stderr)
        return 2
    wanted = [i for i in args.ids.split(",") if i] or [t["capsule_id"] for t in tasks]
    if args.cache_dir is None:  # where a run started here looks by default
        given = os.environ.get("AGENTBENCH_CACHE_DIR", "")
        args.cache_dir = Path(given) if given else default_cache_dir(os.environ, Path.cwd())
    store = capsules.archive_store(args.data_dir, args.cache_dir, args.capsules_dir, chosen.capsule_folder)
    flagged = {t["capsule_id"] for t in tasks if t.get("gpu")}  # a v1.1 manifest's flags decide its GPUs
    extract_root = args.cache_dir / "capsules" / "extracted"  # where the plugin looks (CoreBenchRun.extract_root)
    failed = 0
    for number, capsule_id in enumerate(wanted, 1):
        print(f"[{number}/{len(wanted)}] {capsule_id} ...", flush=True)
        try:
            folder = capsules.ensure_capsule(capsule_id, store, extract_root, published=chosen.capsule_url)
        except capsules.CapsuleError as exc:
            failed += 1
            print(f"[{number}/{len(wanted)}] {capsule_id} FAILED: {exc}", flush=True)
            continue
        needs = capsule_id in flagged if chosen.manifest is not None else prepare.capsule_needs_gpu(folder)
        gpu = " (needs a GPU)" if needs else ""
        print(f"[{number}/{len(wanted)}] {capsule_id} ready in {folder}{gpu}", flush=True)
    print(f"fetch-capsules: {len(wanted) - failed} of {len(wanted)} capsules ready")
    return 1 if failed else 0
