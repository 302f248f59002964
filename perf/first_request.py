"""Start-up: from the pytest process's start to the first model request, at ``-n 2``.

Runs one SciCode validation problem in naive mode against the tests' scripted OpenAI-compatible server
(``tests/helpers/fake_openai.py``, no latency, response cache off, preflight off) through
``perf/model_concurrency.py``'s ``run_once``, and prints, for each of ``--runs`` runs, the seconds from the
process's start to the first model request the server saw: pytest's start, the plugin's configuration, the xdist
workers' start and collection, the run's opening on a worker (fork server, self-test, the problem's targets from
the warm cache). The goal is at most 2 s on 2 cores; the figure depends on the machine's load (the median of the
runs is printed).

    python perf/first_request.py [--runs 3] [--workers 2] [--ids 1] [--cache /tmp/agentbench-perf-cache]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import model_concurrency as mc  # noqa: E402  (the sibling script: its scripted server and run)


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
    figures = []
    for run in range(args.runs):
        result = mc.run_once(args, args.workers, 16, steps)
        figures.append(result["start_up"])
        print(
            f"run {run + 1}: first model request {result['start_up']:.2f} s after start (wall {result['wall']:.1f} s)"
        )
    print(f"-n {args.workers}: start to first model request, median of {args.runs}: {statistics.median(figures):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
