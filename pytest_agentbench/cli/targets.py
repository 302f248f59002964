"""``python -m pytest_agentbench rebuild-targets --out FILE``: SciCode validation targets rebuilt from the ground
truth (``benchmarks.scicode.targets``), with a line of progress per step."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..benchmarks.scicode import dataset, h5codec
from ..benchmarks.scicode.targets import (
    NOT_OFFICIAL_NOTE,
    RebuildError,
    find_problems_file,
    load_problems,
    rebuild_targets,
    verify_targets,
)
from ..core.data import DATA_DIR_ENV, DataError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_agentbench rebuild-targets",
        description="Rebuild SciCode validation targets (test_data.h5 layout) by running the "
        "ground truth of problems_dev.jsonl, then check every step's tests pass "
        "against them. " + NOT_OFFICIAL_NOTE[0].upper() + NOT_OFFICIAL_NOTE[1:] + ".",
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get(DATA_DIR_ENV) or "data",
        help=f"folder holding scicode/{dataset.PROBLEM_FILES['validation'].name} (default ${DATA_DIR_ENV} or ./data)",
    )
    parser.add_argument("--out", required=True, help="HDF5 file to write (existing steps are kept)")
    parser.add_argument("--steps", default=None, help="comma-separated step numbers, e.g. 10.3,6.1")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per step (default 600)")
    parser.add_argument("--jobs", type=int, default=1, help="steps run in parallel (default 1)")
    parser.add_argument("--no-verify", action="store_true", help="skip re-running the original tests")
    return parser


def print_progress(step: str, status: str, seconds: float) -> None:
    shown = "ok" if status == "ok" else "FAILED: " + status.splitlines()[-1][:300]
    print(f"  {step:>6}  {seconds:6.1f} s  {shown}", flush=True)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    steps = [s.strip() for s in args.steps.split(",") if s.strip()] if args.steps else None
    data_dir = Path(args.data_dir).expanduser()
    out = Path(args.out).expanduser()
    print(f"note: {NOT_OFFICIAL_NOTE}.")
    started = time.monotonic()
    try:
        problems = load_problems(find_problems_file(data_dir))
        print(f"rebuilding targets into {out}")
        report = rebuild_targets(
            problems,
            out,
            timeout=args.timeout,
            jobs=max(1, args.jobs),
            progress=print_progress,
            steps=steps,
            data_dir=data_dir,
        )
        failed = {s: m for s, m in report.items() if m != "ok"}
        if not args.no_verify and len(failed) < len(report):
            print("verifying: original tests against the rebuilt targets")
            built = [s for s, m in report.items() if m == "ok"]
            checked = verify_targets(
                problems,
                out,
                args.timeout,
                jobs=max(1, args.jobs),
                progress=print_progress,
                steps=built,
                data_dir=data_dir,
            )
            failed.update({s: "verification: " + m for s, m in checked.items() if m != "ok"})
    except (RebuildError, DataError, h5codec.TargetsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    elapsed = time.monotonic() - started
    print(f"{len(report) - len(failed)}/{len(report)} steps ok in {elapsed:.0f} s; wrote {out}")
    for step, message in failed.items():
        print(f"FAILED {step}: {message}", file=sys.stderr)
    return 1 if failed else 0
