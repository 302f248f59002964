"""How long listing the fast loop takes: the wall time of ``pytest tests -m "not slow" --collect-only -q``.

Collection is paid at the start of every fast loop and by every xdist worker, so it should stay under 5 s. What
makes it slow is what the test modules, tests/conftest.py and the helpers' plugin modules import at module level;
``--imports N`` lists the N top-level imports that took longest while collecting (``python -X importtime``).

    python perf/collection_time.py [--runs 3] [--imports 15] [--data-dir ../shared/data] [--tests tests]

The first run warms the file cache and pytest's cache of rewritten modules, and is not counted. Wall and CPU
time are printed: on a machine shared with other work, the CPU time is the steadier figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECT = ["-m", "pytest", "-m", "not slow", "--collect-only", "-q", "-p", "no:cacheprovider"]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def collect(env: dict[str, str], tests: str, *python_options: str) -> tuple[float, float, str, str]:
    """One listing: (wall seconds, CPU seconds, stdout, stderr); stops the script if pytest could not list the
    tests."""
    started, cpu = time.monotonic(), children_cpu()
    # -s: importtime writes to the process's stderr, which pytest's capturing would otherwise swallow
    argv = [sys.executable, *python_options, *COLLECT, tests, *(["-s"] if python_options else [])]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    took, used = time.monotonic() - started, children_cpu() - cpu
    if done.returncode != 0:
        sys.exit(f"collection failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return took, used, done.stdout, done.stderr


def slowest_imports(importtime: str, count: int) -> list[tuple[float, str]]:
    """The top-level imports of an ``-X importtime`` log, slowest first: (seconds, module)."""
    found = []
    for line in importtime.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2]
        if name.startswith(" ") and not name.startswith("  "):  # one space: imported by no other module
            found.append((int(parts[1]) / 1e6, name.strip()))
    return sorted(found, reverse=True)[:count]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="timed listings (after one warm-up)")
    parser.add_argument("--imports", type=int, default=15, help="slowest top-level imports to list (0: none)")
    parser.add_argument("--data-dir", default=os.environ.get("AGENTBENCH_DATA_DIR") or str(ROOT.parent / "shared/data"))
    parser.add_argument("--tests", default="tests", help="what to list (a module lists faster: a smoke run)")
    args = parser.parse_args(argv)
    env = {**os.environ, "AGENTBENCH_DATA_DIR": args.data_dir}
    # as on a developer's machine and in CI: pytest keeps its rewritten test modules as .pyc files (a machine
    # with PYTHONDONTWRITEBYTECODE set rewrites every test module and the whole plugin package at each start)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    listing = collect(env, args.tests)[2]
    runs = [collect(env, args.tests)[:2] for _ in range(args.runs)]
    walls, cpus = [wall for wall, _ in runs], [cpu for _, cpu in runs]
    print(f"fast loop: {listing.strip().splitlines()[-1]}")
    print(
        f"collection over {args.runs} runs: wall median {statistics.median(walls):.2f} s (min {min(walls):.2f} s), "
        f"CPU median {statistics.median(cpus):.2f} s (goal: under 5 s)"
    )
    # on a loaded machine the wall time is the CPU time stretched by the other processes
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    if args.imports:
        log = collect(env, args.tests, "-X", "importtime")[3]
        print("\nslowest top-level imports while collecting (cumulative seconds, one run under -X importtime):")
        for seconds, module in slowest_imports(log, args.imports):
            print(f"  {seconds:6.3f}  {module}")


if __name__ == "__main__":
    main()
