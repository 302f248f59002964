"""What a ``code_interpreter`` call costs in Docker (``--bench-env=docker``) beyond running its script.

Times ``DockerFactory.run_python`` on a SciCode tool script (the shims, ``import numpy as np``, ``print``),
called back to back and with a pause between calls (a model answers in seconds, so a call's background work
has time to finish), and the same script run with python3 in an already running container, many times in one
exec, before and after each series. The overhead of a call is the difference of the medians. The image must be
on the engine (warm).

    python perf/docker_tool_calls.py [--image agentbench-test:bookworm] [--calls 12] [--pause 1.0]
                                     [--rounds 2] [--root CHECKOUT]

``--root`` imports the package from another checkout (e.g. the main branch before a change), so one script
measures both. Prints the first (cold) call, the medians and the overhead per call.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUNS_IN_ONE_EXEC = 10


def timed_calls(factory: Any, source: str, count: int, pause: float) -> list[float]:
    times = []
    for _ in range(count):
        if pause:
            time.sleep(pause)
        started = time.monotonic()
        result = factory.run_python(source, 60)
        times.append(time.monotonic() - started)
        if result["status"] != "ok":
            raise SystemExit(f"the tool script failed in Docker: {result}")
    return times


def script_alone(factory: Any, source: str, rounds: int) -> list[float]:
    """Seconds per run of ``source`` with python3 inside one running container (no exec, no container)."""
    per_run = []
    with factory.start(Path(tempfile.mkdtemp(prefix="agentbench-perf-")), name="perf") as env:
        env.write_file("main.py", source)
        loop = f"TIMEFORMAT=%R; time (for i in $(seq {RUNS_IN_ONE_EXEC}); do python3 main.py >/dev/null; done)"
        for _ in range(rounds):
            result = env.run(loop, 120)
            per_run.append(float(result.stderr.strip().splitlines()[-1]) / RUNS_IN_ONE_EXEC)
    return per_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="agentbench-test:bookworm", help="a warm image with python3 and numpy")
    parser.add_argument("--calls", type=int, default=12, help="timed calls per series")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between calls in the paused series")
    parser.add_argument("--rounds", type=int, default=2, help="timings of the script alone before and after a series")
    parser.add_argument("--root", default=str(ROOT), help="the checkout whose package is measured")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(args.root).resolve()))
    docker_env = importlib.import_module("pytest_agentbench.envs.docker")
    script = importlib.import_module("pytest_agentbench.benchmarks.scicode.script")
    print(f"package: {Path(docker_env.__file__).resolve().parents[2]}")
    source = script.build_tool_script(dependencies="import numpy as np", previous_code=[], code="print(np.pi)")
    factory = docker_env.DockerFactory(image=args.image, network="none")
    try:
        started = time.monotonic()
        factory.run_python(source, 60)
        cold = time.monotonic() - started
        # the script alone is timed before and after each series: on a busy machine the floor drifts
        series = []
        for name, pause in (("back to back", 0.0), (f"{args.pause:g} s apart", args.pause)):
            before = script_alone(factory, source, args.rounds)
            times = timed_calls(factory, source, args.calls, pause)
            series.append((name, times, statistics.median(before + script_alone(factory, source, args.rounds))))
    finally:
        factory.close()
    print(f"first call (cold): {cold:.3f} s")
    for name, times, floor in series:
        median = statistics.median(times)
        print(
            f"calls {name}: {median:.3f} s median, {min(times):.3f}-{max(times):.3f} (n={len(times)}); "
            f"script alone in a running container {floor:.3f} s; overhead {median - floor:.3f} s per call"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
