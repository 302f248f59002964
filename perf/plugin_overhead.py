"""What the plugin costs a pytest run that does not use it: a project with one trivial test, run without --bench.

Users install pytest-agentbench beside their own tests; every pytest run of theirs loads the plugin. This script
runs that project in pairs, with the plugin and with ``-p no:agentbench``, and prints the median wall and CPU
time of each and the difference (the goal: at most 0.15 s on 2 cores; pytest-xdist's own plugin is the physical
reference, printed the same way with ``-p no:xdist``), the plugin's import time (``python -X importtime``), and
the modules the session imported beyond pytest's: how many of the package, and whether any heavy library
(numpy, scipy, h5py, openai, yaml, docker) or benchmark runtime is among them.

    python perf/plugin_overhead.py [--pairs 7]

The pairs alternate, so a machine busy with other work slows both sides alike; the CPU time is the steadier
figure on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("numpy", "scipy", "h5py", "openai", "yaml", "docker")
RUN = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_x.py"]
MODULES = "import json, sys, pytest; pytest.main({args!r}); print(json.dumps(sorted(sys.modules)))"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(project: Path, *extra: str) -> tuple[float, float]:
    """One pytest run of the project: (wall seconds, CPU seconds)."""
    started, cpu = time.monotonic(), children_cpu()
    done = subprocess.run([sys.executable, *RUN, *extra], cwd=project, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        sys.exit(f"pytest failed ({' '.join(extra) or 'with the plugin'}):\n{done.stdout}{done.stderr}")
    return time.monotonic() - started, children_cpu() - cpu


def modules(project: Path, *extra: str) -> list[str]:
    args = [*RUN[2:], *extra]
    done = subprocess.run(
        [sys.executable, "-c", MODULES.format(args=args)], cwd=project, capture_output=True, text=True, timeout=300
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def import_time(project: Path) -> float:
    """Seconds ``import pytest_agentbench.pytest_plugin`` takes after pytest is imported (cumulative)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import pytest, pytest_agentbench.pytest_plugin"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    for line in done.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == "pytest_agentbench.pytest_plugin":
            return int(parts[1]) / 1e6
    return float("nan")


def pairs(project: Path, count: int, off: str) -> tuple[list[float], list[float], list[float], list[float]]:
    """``count`` alternating runs with everything and with ``-p no:<off>``: walls and CPU times of both."""
    walls_on, walls_off, cpus_on, cpus_off = [], [], [], []
    timed(project)  # warms the file cache, not counted
    for _ in range(count):
        wall, cpu = timed(project)
        walls_on.append(wall)
        cpus_on.append(cpu)
        wall, cpu = timed(project, "-p", f"no:{off}")
        walls_off.append(wall)
        cpus_off.append(cpu)
    return walls_on, walls_off, cpus_on, cpus_off


def report(name: str, project: Path, count: int) -> None:
    walls_on, walls_off, cpus_on, cpus_off = pairs(project, count, name)
    wall = statistics.median(a - b for a, b in zip(walls_on, walls_off))
    cpu = statistics.median(a - b for a, b in zip(cpus_on, cpus_off))
    print(
        f"{name:>10}: wall {statistics.median(walls_on):.2f} s with, {statistics.median(walls_off):.2f} s "
        f"with -p no:{name}: +{wall:.3f} s (median of {count} pairs); CPU +{cpu:.3f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentbench-overhead-") as folder:
        project = Path(folder)
        (project / "test_x.py").write_text("def test_x():\n    assert True\n", encoding="utf-8")
        report("agentbench", project, args.pairs)
        report("xdist", project, args.pairs)
        print(f"import of the plugin module: {import_time(project):.3f} s (cumulative, python -X importtime)")
        with_plugin = modules(project)
        without = set(modules(project, "-p", "no:agentbench"))
        added = [m for m in with_plugin if m not in without]
        ours = [m for m in added if m.startswith("pytest_agentbench")]
        heavy = [m for m in added if m.split(".")[0] in HEAVY]
        runtime = [m for m in ours if m.endswith((".bench", ".run", ".session", ".base"))]
        print(f"modules imported beyond -p no:agentbench: {len(added)} ({len(ours)} of pytest_agentbench)")
        print(f"heavy libraries: {', '.join(sorted({m.split('.')[0] for m in heavy})) or 'none'}")
        print(f"benchmark runtime or run plugin modules: {', '.join(runtime) or 'none'}")


if __name__ == "__main__":
    os.environ.pop("PYTEST_ADDOPTS", None)  # the project's own run, not the caller's flags
    main()
