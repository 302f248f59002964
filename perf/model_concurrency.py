"""Model calls in flight: how close a latency-bound SciCode run gets to its chains' bound.

Starts the tests' scripted OpenAI-compatible server (``tests/helpers/fake_openai.py``, 127.0.0.1) answering every
step with its ground truth after a fixed latency, and runs SciCode's validation problems in naive mode against
it (response cache off, so every step is a call) for ``-n 1/2/4``, each with ``--bench-max-connections=N`` (one
chain per worker: what a worker did before chains were generated concurrently) and with the default (16).
For each run it prints:

* wall: the pytest process from start to exit;
* over bound: wall minus the chains' bound (the longest chain of calls times the latency);
* start-up: from start to the first model request (collection, workers, fork servers, self-test, targets);
* calls spread: first request to last reply;
* after the last reply: wall minus the end of the last reply (scoring what came last, reports, exit): no schedule
  shortens the scoring of the longest chain's last step, which can only start once its answer is in;
* peak memory: the largest sum over the run's processes of PSS (RSS where /proc has no smaps_rollup);
* in flight: the peak of model requests in flight, and their count sampled every ``--sample`` seconds.

    python perf/model_concurrency.py [--latency 2] [--ids 1,3,4,19,29,38,44,70,78] [--workers 1,2,4]
                                     [--connections 16] [--cache /tmp/agentbench-perf-cache]

The targets are rebuilt once into ``--cache`` by an untimed oracle run first. The figures depend on the
machine's load: run it on an idle machine for numbers to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers.fake_openai import FakeOpenAI  # noqa: E402  (the tests' scripted server)

DATA = Path(os.environ.get("AGENTBENCH_DATA_DIR", ROOT.parent / "shared" / "data"))
NEXT_STEP = "NEXT STEP - PROBLEM STEP AND FUNCTION HEADER"
PREFILLED = {"13.6", "62.1", "76.3"}
SCICODE_RUN = [
    sys.executable,
    "-m",
    "pytest",
    "-p",
    "no:cacheprovider",
    "-q",
    "--bench=scicode",
    "--bench-split=validation",
]  # the runs' command, without the selection and the model


def problems() -> dict[str, dict[str, Any]]:
    out = {}
    for line in (DATA / "scicode" / "problems_dev.jsonl").read_text().splitlines():
        problem = json.loads(line)
        out[str(problem["problem_id"])] = problem
    return out


def answer_of(steps: list[dict[str, Any]]):
    """The scripted model: the ground truth of the step whose header follows the prompt's NEXT STEP heading."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        prompt = next(m["content"] for m in body["messages"] if m.get("role") == "user")
        asked = prompt.split(NEXT_STEP, 1)[1]
        step = next(s for s in steps if s["function_header"].strip() in asked)
        return {"text": f"```python\n{step['ground_truth_code']}\n```\n"}

    return answer


def chain_lengths(chosen: list[dict[str, Any]]) -> dict[str, int]:
    return {str(p["problem_id"]): sum(1 for s in p["sub_steps"] if s["step_number"] not in PREFILLED) for p in chosen}


def tree_memory(root: int) -> int:
    """Bytes: the sum of PSS (else RSS) over ``root`` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        total += process_memory(pid)
    return total


def process_memory(pid: int) -> int:
    for name, key in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        try:
            for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
        except OSError:
            continue
    return 0


def warm_targets(ids: str, cache: str) -> None:
    """Rebuild the targets of the validation problems ``ids`` into ``cache`` once (an oracle run, untimed), so
    that the timed runs read them from a warm cache."""
    warm = subprocess.run(
        [
            *SCICODE_RUN,
            f"--bench-ids={ids}",
            "--model=oracle",
            f"--bench-cache-dir={cache}",
        ],
        cwd=tempfile.mkdtemp(prefix="agentbench-perf-warm-"),
        env={**os.environ, "AGENTBENCH_DATA_DIR": str(DATA), "AGENTBENCH_OFFLINE": "1"},
        capture_output=True,
    )
    if warm.returncode != 0:
        raise SystemExit(f"the oracle warm-up failed:\n{warm.stdout.decode()[-3000:]}")


def run_once(args: argparse.Namespace, workers: int, connections: int, steps: list[dict[str, Any]]) -> dict[str, Any]:
    with FakeOpenAI() as server, tempfile.TemporaryDirectory(prefix="agentbench-perf-") as work:
        server.delay = args.latency
        for _ in range(400):
            server.reply_with(answer_of(steps))
        Path(work, "pytest.ini").write_text("[pytest]\n")
        command = [
            *SCICODE_RUN,
            f"--bench-ids={args.ids}",
            "--bench-mode=naive",
            "--model=gt-player",
            f"--model-base-url={server.base_url}",
            "--model-api-key=perf",
            "--bench-set=model_preflight=off",
            "--bench-cache=off",
            f"--bench-cache-dir={args.cache}",
            f"--bench-max-connections={connections}",
            *(["-n", str(workers)] if workers else []),
        ]
        env = {**os.environ, "AGENTBENCH_DATA_DIR": str(DATA), "AGENTBENCH_OFFLINE": "1"}
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        peak = [0]

        def watch() -> None:
            while process.poll() is None:
                peak[0] = max(peak[0], tree_memory(process.pid))
                time.sleep(0.25)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        output = process.communicate()[0].decode(errors="replace")
        wall = time.monotonic() - started
        watcher.join()
        if process.returncode != 0:
            raise SystemExit(f"the run failed (exit {process.returncode}):\n{output[-3000:]}")
        arrivals = sorted(r["at"] for r in server.requests)
    spans = [(at, at + args.latency) for at in arrivals]
    return {
        "wall": wall,
        "start_up": arrivals[0] - started if arrivals else None,
        "spread": spans[-1][1] - spans[0][0] if spans else 0.0,
        "after_last": wall - (spans[-1][1] - started) if spans else None,
        "calls": len(spans),
        "peak_memory": peak[0],
        "peak_in_flight": max((sum(1 for a, b in spans if a <= t < b) for t, _ in spans), default=0),
        "in_flight": sampled(spans, args.sample),
    }


def sampled(spans: list[tuple[float, float]], every: float) -> list[int]:
    if not spans:
        return []
    t, end, out = spans[0][0], spans[-1][1], []
    while t < end:
        out.append(sum(1 for a, b in spans if a <= t < b))
        t += every
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=2.0, help="seconds the server takes per reply")
    parser.add_argument("--ids", default="1,3,4,19,29,38,44,70,78", help="validation problems (--bench-ids)")
    parser.add_argument("--workers", default="1,2,4", help="-n values (0: no xdist)")
    parser.add_argument("--connections", type=int, default=16, help="--bench-max-connections of the runs with it")
    parser.add_argument("--sample", type=float, default=2.0, help="seconds between in-flight samples shown")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "agentbench-perf-cache"))
    args = parser.parse_args(argv)
    every = problems()
    chosen = [every[i] for i in args.ids.split(",")]
    steps = [s for p in chosen for s in p["sub_steps"]]
    lengths = chain_lengths(chosen)
    bound = max(lengths.values()) * args.latency
    print(f"{len(chosen)} problems, {sum(lengths.values())} calls, longest chain {max(lengths.values())} steps")
    print(f"latency {args.latency:g} s: the chains' bound is {bound:.0f} s of calls; {os.cpu_count()} cores")
    warm_targets(args.ids, args.cache)
    print(
        "| -n | --bench-max-connections | wall | over bound | start-up | calls spread | after the last reply "
        "| peak memory | in flight |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for workers in (int(w) for w in args.workers.split(",")):
        for connections in sorted({max(1, workers), args.connections}):
            r = run_once(args, workers, connections, steps)
            print(
                f"| {workers} | {connections} | {r['wall']:.0f} s | {r['wall'] - bound:+.0f} s | "
                f"{r['start_up']:.0f} s | {r['spread']:.0f} s | {r['after_last']:.0f} s | "
                f"{r['peak_memory'] / 2**30:.2f} GB | "
                f"peak {r['peak_in_flight']}: {' '.join(map(str, r['in_flight']))} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
