"""Start-up: from the pytest process's start to the first model request, at ``-n 2``.

Runs one SciCode validation problem in naive mode against the tests' scripted OpenAI-compatible server
(``tests/helpers/fake_openai.py``, no latency, response cache off, preflight off) through
``perf/model_concurrency.py``'s ``run_once``, and prints, for each of ``--runs`` runs, the seconds from the
process's start to the first model request the server saw: pytest's start, the plugin's configuration, the xdist
workers' start and collection, the run's opening on a worker (the problem's targets from the warm cache). The
goal is at most 2 s on 2 cores; the figure depends on the machine's load (the median of the runs is printed).

It also prints what the processes imported on the way (a plugin of this script's, loaded through
``$PYTEST_PLUGINS``, lists ``sys.modules``): the controller's modules when its session starts (before its workers
start) and a worker's when its first item is called (its fixtures set up: the model client, the run); how many
are pytest-agentbench's, which heavy libraries are among them and which modules of another benchmark (its option
declarations load in every session).

    python perf/first_request.py [--runs 3] [--workers 2] [--ids 1] [--cache /tmp/agentbench-perf-cache]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import model_concurrency as mc  # noqa: E402  (the sibling script: its scripted server and run)

HEAVY = ("numpy", "scipy", "h5py", "openai", "yaml", "docker", "matplotlib", "sympy")
PROBE = "agentbench_perf_imports"  # the plugin's module name
PROBE_SOURCE = """
import json, os, sys
import pytest

def note(where):
    with open(os.environ["AGENTBENCH_PERF_IMPORTS"], "a") as out:
        out.write(json.dumps({"where": where, "modules": sorted(sys.modules)}) + "\\n")

@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        note("controller at session start")

CALLED = []

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    if not CALLED:
        CALLED.append(item)
        note("worker at its first item")
"""


def with_import_probe(folder: Path) -> Path:
    """The runs load the probe plugin (``PROBE_SOURCE``) from ``folder``; it writes to the file returned."""
    (folder / f"{PROBE}.py").write_text(PROBE_SOURCE, encoding="utf-8")
    found = folder / "imports.jsonl"
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    os.environ["PYTEST_PLUGINS"] = PROBE
    os.environ["AGENTBENCH_PERF_IMPORTS"] = str(found)
    return found


def imports_lines(found: Path, bench: str = "scicode") -> list[str]:
    """One line per place the probe noted (the last run's): modules, the package's, heavy ones, other benchmarks'."""
    lines, notes = [], {}
    for line in found.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        notes[entry["where"]] = entry["modules"]  # the last run's
    for where, modules in notes.items():
        ours = [m for m in modules if m.startswith("pytest_agentbench")]
        heavy = sorted({m.split(".")[0] for m in modules if m.split(".")[0] in HEAVY})
        others = [m for m in ours if m.startswith("pytest_agentbench.benchmarks.") and m.split(".")[2] != bench]
        others = [m for m in others if m.count(".") > 2]  # a benchmark's package itself is only its name
        lines.append(
            f"{where}: {len(modules)} modules, {len(ours)} of pytest_agentbench; heavy: {', '.join(heavy) or 'none'}; "
            f"of another benchmark: {', '.join(m.split('.', 2)[2] for m in others) or 'none'}"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ids", default="1", help="validation problems (--bench-ids)")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "agentbench-perf-cache"))
    args = parser.parse_args()
    args.latency, args.sample = 0.0, 1.0
    every = mc.problems()
    steps = [s for i in args.ids.split(",") for s in every[i]["sub_steps"]]
    mc.warm_targets(args.ids, args.cache)  # untimed: the targets of the selection rebuilt into the cache once
    found = with_import_probe(Path(tempfile.mkdtemp(prefix="agentbench-perf-imports-")))
    figures = []
    for run in range(args.runs):
        result = mc.run_once(args, args.workers, 16, steps)
        figures.append(result["start_up"])
        print(
            f"run {run + 1}: first model request {result['start_up']:.2f} s after start (wall {result['wall']:.1f} s)"
        )
    print(f"-n {args.workers}: start to first model request, median of {args.runs}: {statistics.median(figures):.2f} s")
    for line in imports_lines(found):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
