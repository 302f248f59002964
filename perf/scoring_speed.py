"""How much the sandbox costs when scoring SciCode: fork server vs fresh interpreter vs no isolation.

Scores the validation oracle run (the ground-truth code of all 50 steps) with both executors and
with the floor (the same scripts executed one after another in one warm process, no isolation),
then times collecting all SciCode items.

    python perf/scoring_speed.py [--data-dir ../shared/data] [--work /tmp/agentbench-speed]
                                      [--synthetic [--count 50]] [--ids 1,3] [--distributed N [--repeat 3]]
                                      [--no-collect] [--overlap-steps 6] [--overlap-seconds 1.5]

The targets of the validation split are rebuilt from the ground truth once into ``--work``.
``--synthetic`` skips SciCode and times a set of numpy/scipy import-heavy scripts instead. ``--ids`` scores only
these validation problems. The test suite runs the script at a tiny size (tests/test_perf_scripts.py) so its code
paths cannot rot; the figures only mean something at the default size on an idle machine.
``--distributed N`` only times the warm validation oracle run end to end with ``-n N`` (a warm-up run, then
``--repeat`` timed runs) against ``max(longest problem, total / N) + start-up`` (docs/distributed.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_agentbench.sandbox.executors import Limits, get_executor  # noqa: E402
from pytest_agentbench.sandbox.integrity import run_failure  # noqa: E402
from pytest_agentbench.sandbox.isolation import probe  # noqa: E402

# Runs every script in one warm interpreter with the same libraries preloaded: the cost of the tests alone.
FLOOR_RUNNER = r"""
import contextlib, io, json, os, sys, time
from pytest_agentbench.sandbox.forkserver import DEFAULT_PRELOAD
for name in DEFAULT_PRELOAD:
    __import__(name)
jobs = json.load(open(sys.argv[1]))
times = []
for job in jobs:
    os.environ.update(job["env"])
    sink = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(io.StringIO()):
        try:
            exec(compile(job["source"], "main.py", "exec", dont_inherit=True), {"__name__": "__main__"})
        except SystemExit:
            pass
        except BaseException:
            pass
    times.append(time.monotonic() - started)
print(json.dumps(times))
"""


def scicode_jobs(data_dir: Path, work: Path, ids: str = "") -> list[dict]:
    """The 50 validation steps (those of the problems ``ids`` names, when given) as the plugin scores them (the
    child computes the operands, this process holds the targets rebuilt from ground truth and compares): child
    source, its plan and its targets per step."""
    from pytest_agentbench.benchmarks.scicode import h5codec, script, split
    from pytest_agentbench.benchmarks.scicode.run import CHANNEL
    from pytest_agentbench.benchmarks.scicode.targets import (
        find_problems_file,
        ground_truth_prefix,
        load_problems,
        rebuild_targets,
    )

    problems = load_problems(find_problems_file(data_dir / "scicode"))
    dev = [p for p in problems if any(s.get("ground_truth_code") for s in p["sub_steps"])]
    if ids:
        dev = [p for p in dev if str(p["problem_id"]) in ids.split(",")]
    suffix = f"-{ids.replace(',', '_')}" if ids else ""  # a selection's targets never pass for the whole split's
    h5 = work / f"validation-targets{suffix}.h5"
    report_path = work / f"validation-targets{suffix}.json"
    if not (h5.is_file() and report_path.is_file()):
        print(f"rebuilding validation targets into {h5} (once) ...", flush=True)
        report = rebuild_targets(dev, h5, timeout=600, jobs=2, data_dir=data_dir / "scicode")
        report_path.write_text(json.dumps(report))
    report = json.loads(report_path.read_text())
    jobs = []
    for problem in dev:
        for index, step in enumerate(problem["sub_steps"]):
            number = str(step["step_number"])
            if report.get(number) != "ok" or not step.get("test_cases"):
                continue
            codes = [code for _, code in ground_truth_prefix(problem, index, data_dir / "scicode")]
            plan = split.split_step(
                step["test_cases"],
                number,
                code_names=split.names_bound_by(problem.get("required_dependencies", ""), *codes),
            )
            source = script.build_child_script(
                plan,
                dependencies=problem.get("required_dependencies", ""),
                previous_code=codes[:-1],
                code=codes[-1],
                channel=CHANNEL,
            )
            jobs.append(
                {
                    "name": number,
                    "source": source,
                    "env": {},
                    "plan": plan,
                    "targets": h5codec.read_step_targets(h5, number),
                    "collect": {CHANNEL: plan.stream_cap()},
                }
            )
    return jobs


def synthetic_jobs(count: int = 50) -> list[dict]:
    body = (
        "import numpy as np, scipy.special, scipy.integrate, scipy.linalg, scipy.sparse, scipy.optimize\n"
        "import sympy\n"
        "x = np.linspace(0, 1, 1000)\n"
        "assert np.allclose(scipy.integrate.simpson(x, x=x), 0.5)\n"
        "print('done ' + __import__('os').environ['TOKEN'])\n"
    )
    return [
        {"name": f"synthetic-{i}", "source": body, "env": {"TOKEN": f"t{i}"}, "token": f"t{i}"} for i in range(count)
    ]


def time_executor(kind: str, jobs: list[dict], limits: Limits) -> tuple[list[float], int]:
    """Per-step wall time of the child's run (what the executor costs) and how many steps passed; the
    parent's comparisons (a bounded fork of this process per step) are checked but not timed."""
    executor = get_executor(kind)
    times, passed = [], 0
    for job in jobs:
        collect = job.get("collect")
        run_limits = (
            limits
            if not collect
            else dataclasses.replace(limits, output_cap=max(limits.output_cap, max(collect.values()) + 1))
        )
        started = time.monotonic()
        result = executor.run(job["source"], limits=run_limits, env=job["env"], collect=collect)
        times.append(time.monotonic() - started)  # the child's run; the comparisons in this process are not timed
        passed += job_passed(job, result, run_limits)
    return times, passed


def job_passed(job: dict, result, limits: Limits) -> bool:
    if "plan" not in job:  # a synthetic script: it prints its token last
        return run_failure(result) is None and result.stdout.strip().endswith(f"done {job['token']}")
    from pytest_agentbench.benchmarks.scicode import verdict
    from pytest_agentbench.benchmarks.scicode.run import CHANNEL, split_verdict

    stream = result.files.get(CHANNEL, b"")
    outcome = verdict.evaluate(job["plan"], stream, job["targets"], limits=limits)
    return split_verdict(result, outcome, len(stream))["status"] == "pass"


def time_floor(jobs: list[dict], work: Path) -> list[float]:
    jobs_file = work / "floor-jobs.json"
    jobs_file.write_text(json.dumps([{k: job[k] for k in ("name", "source", "env")} for job in jobs]))
    out = subprocess.run(
        [sys.executable, "-c", FLOOR_RUNNER, str(jobs_file)],
        capture_output=True,
        text=True,
        cwd=work,
        env=dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT)),
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def time_collection(data_dir: Path, work: Path, repeat: int = 3) -> float | None:
    """Wall time of ``pytest --bench=scicode --collect-only`` (all 341 items) in an empty project, and
    of the same pytest collecting nothing there: the difference is what the plugin adds."""
    project = work / "empty-project"
    project.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, AGENTBENCH_DATA_DIR=str(data_dir))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's pytest caches its rewritten plugin modules

    def best(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
        times, done = [], None
        for _ in range(repeat):
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
            )
            times.append(time.monotonic() - started)
        return min(times), done

    bare, _ = best([])
    seconds, done = best(["--bench=scicode"])
    if done.returncode != 0:
        print(f"collection failed (exit {done.returncode}): {done.stdout[-500:]}{done.stderr[-500:]}")
        return None
    items = sum(1 for line in done.stdout.splitlines() if "::" in line)
    print(
        f"collect-only: {items} SciCode items in {seconds:.2f} s wall; pytest alone (same plugins, nothing "
        f"to collect) {bare:.2f} s; what --bench=scicode adds {seconds - bare:.2f} s (best of {repeat})"
    )
    return seconds - bare


OVERLAP_CONFTEST = """
import time, pytest

class SlowModel:
    # answers each step with its ground truth after a fixed latency, like a remote model
    name = "slow"
    is_oracle = False
    def answer_step(self, problem, index, previous_code):
        time.sleep(LATENCY)
        return problem["sub_steps"][index]["ground_truth_code"]

@pytest.fixture(scope="session")
def bench_model():
    return SlowModel()
"""


def time_overlap(work: Path, steps: int = 6, latency: float = 1.5, test_seconds: float = 1.5) -> bool:
    """One problem whose model call takes ``latency`` and whose tests take ``test_seconds`` per step,
    run with and without generating step k+1 while step k is scored."""
    from pytest_agentbench.benchmarks.scicode.h5codec import write_step_targets

    root = work / "overlap"
    data = root / "data" / "scicode"
    data.mkdir(parents=True, exist_ok=True)
    sub_steps = [
        {
            "step_number": f"1.{k}",
            "step_description_prompt": "",
            "step_background": "",
            "function_header": f"def f{k}():",
            "return_line": "",
            "ground_truth_code": f"def f{k}():\n    return {k}",
            "test_cases": [f"import time\ntime.sleep({test_seconds})\nassert np.allclose(f{k}(), target)"],
        }
        for k in range(1, steps + 1)
    ]
    problem = {
        "problem_id": "1",
        "problem_name": "overlap",
        "required_dependencies": "import numpy as np",
        "sub_steps": sub_steps,
        "problem_description_main": "",
        "problem_io": "",
        "problem_background_main": "",
    }
    (data / "problems_dev.jsonl").write_text(json.dumps(problem) + "\n")
    for name in ("13.6.txt", "62.1.txt", "76.3.txt"):
        (data / name).write_text("pass\n")
    h5 = root / "targets.h5"
    h5.unlink(missing_ok=True)
    for k in range(1, steps + 1):
        write_step_targets(h5, f"1.{k}", [k])
    (root / "conftest.py").write_text(OVERLAP_CONFTEST.replace("LATENCY", repr(latency)))
    (root / "pytest.ini").write_text("[pytest]\n")
    times = {}
    for flag in ("--bench-set=overlap=true", "--bench-set=overlap=false"):
        started = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--bench=scicode",
                "--bench-split=validation",
                "--model=slow",
                f"--bench-data-dir={root / 'data'}",
                f"--bench-set=h5={h5}",
                "--bench-set=allow_custom_data=true",
                flag,
                "-q",
                "-p",
                "no:cacheprovider",
            ],
            cwd=root,
            capture_output=True,
            text=True,
        )
        times[flag] = time.monotonic() - started
        if done.returncode != 0:
            print(f"overlap run {flag} failed: {done.stdout[-800:]}")
            return False
    print(
        f"overlap: {steps} steps, model {latency:g} s per call, tests {test_seconds:g} s per step: "
        f"with overlap {times['--bench-set=overlap=true']:.1f} s, without {times['--bench-set=overlap=false']:.1f} s "
        f"(model time alone {steps * latency:.1f} s; both include pytest start-up)"
    )
    return True


TIMING_CONFTEST = """
import json, os, time

TIMES = {"start": {}, "finish": {}}

def pytest_runtest_logstart(nodeid, location):
    TIMES["start"].setdefault(nodeid, time.time())

def pytest_runtest_logfinish(nodeid, location):
    TIMES["finish"][nodeid] = time.time()

def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):  # the controller sees every item start and finish
        with open(os.environ["AGENTBENCH_SPEED_TIMES"], "w") as f:
            json.dump(TIMES, f)
"""


def time_distributed(data_dir: Path, work: Path, workers: int, repeat: int = 3, ids: str = "") -> float | None:
    """The warm validation oracle with ``-n workers``, end to end, against the bound
    ``max(longest problem, total / workers) + start-up``: the longest problem and the total are the sums of
    the records' durations per problem of the same run; start-up is what lies outside the scoring window
    (pytest and worker start-up before the first item starts, and the reports after the last one ends).
    Prints each run and returns the median ratio wall / bound."""
    project = work / "distributed"
    project.mkdir(parents=True, exist_ok=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "conftest.py").write_text(TIMING_CONFTEST)
    times_file = project / "times.json"
    env = dict(
        os.environ,
        AGENTBENCH_DATA_DIR=str(data_dir),
        AGENTBENCH_SPEED_TIMES=str(times_file),
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    ratios = []
    for attempt in range(repeat + 1):  # the first run warms the cache (targets, durations.json)
        run_id = f"speed-{os.getpid()}-{attempt}"  # own folder per invocation: a reused --work keeps old records
        started = time.time()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--bench=scicode",
                "--bench-split=validation",
                "--model=oracle",
                "-n",
                str(workers),
                "-q",
                "-p",
                "no:cacheprovider",
                f"--bench-cache-dir={work / 'cache'}",
                f"--bench-report-dir={work / 'reports'}",
                f"--bench-run-id={run_id}",
                *([f"--bench-ids={ids}"] if ids else []),
            ],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.time() - started
        if done.returncode != 0:
            print(f"distributed run failed (exit {done.returncode}): {done.stdout[-800:]}{done.stderr[-400:]}")
            return None
        if attempt == 0:
            print(f"-n {workers} warm-up run: {wall:.1f} s")
            continue
        records = [
            json.loads(line)
            for line in (work / "reports" / "scicode" / "oracle" / run_id / "steps.jsonl").read_text().splitlines()
            if line
        ]
        per_task: dict[str, float] = {}
        for record in records:
            per_task[record["task"]] = per_task.get(record["task"], 0.0) + float(record.get("duration") or 0.0)
        longest, total = max(per_task.values()), sum(per_task.values())
        times = json.loads(times_file.read_text())
        startup = min(times["start"].values()) - started + (started + wall - max(times["finish"].values()))
        bound = max(longest, total / workers) + startup
        ratios.append(wall / bound)
        heaviest = sorted(per_task, key=lambda t: -per_task[t])[:2]
        print(
            f"-n {workers} run {attempt}: {wall:.1f} s end to end; problems sum {total:.1f} s, longest "
            f"{longest:.1f} s (heaviest {', '.join(heaviest)}); start-up + wind-down {startup:.1f} s; bound "
            f"{bound:.1f} s; ratio {wall / bound:.2f}"
        )
    median = statistics.median(ratios)
    print(f"-n {workers}: median ratio end-to-end / bound {median:.2f} over {repeat} runs (target <= 1.15)")
    return median


def summary(label: str, times: list[float], floor: list[float], passed: int | None = None) -> None:
    overhead = [t - f for t, f in zip(times, floor)]
    extra = "" if passed is None else f", {passed}/{len(times)} passed"
    print(
        f"{label:>10}: total {sum(times):7.2f} s, per-step median {statistics.median(times) * 1000:7.1f} ms, "
        f"per-step overhead median {statistics.median(overhead) * 1000:7.1f} ms{extra}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir", type=Path, default=Path(os.environ.get("AGENTBENCH_DATA_DIR", ROOT.parent / "shared" / "data"))
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/agentbench-speed"))
    parser.add_argument("--synthetic", action="store_true", help="time import-heavy synthetic scripts only")
    parser.add_argument("--no-collect", action="store_true", help="skip timing --collect-only")
    parser.add_argument(
        "--distributed",
        type=int,
        metavar="N",
        default=0,
        help="only time the warm validation oracle end to end with -n N against its bound",
    )
    parser.add_argument("--ids", default="", help="only these validation problems (--bench-ids)")
    parser.add_argument("--count", type=int, default=50, help="with --synthetic: how many scripts")
    parser.add_argument(
        "--repeat", type=int, default=3, help="timed runs of --distributed (after a warm-up) and of collection"
    )
    parser.add_argument("--overlap-steps", type=int, default=6, help="steps of the overlap problem (0: skip it)")
    parser.add_argument(
        "--overlap-seconds", type=float, default=1.5, help="the overlap problem's model latency and test time per step"
    )
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.distributed:
        ratio = time_distributed(args.data_dir.resolve(), args.work, args.distributed, args.repeat, args.ids)
        return 0 if ratio is not None else 1
    jobs = synthetic_jobs(args.count) if args.synthetic else scicode_jobs(args.data_dir.resolve(), args.work, args.ids)
    limits = Limits(timeout=600)
    print(
        f"{len(jobs)} scripts ({'synthetic' if args.synthetic else 'SciCode validation oracle'}); "
        f"isolation: {probe().describe()}"
    )

    started = time.monotonic()
    get_executor("fork").run("pass")  # the pool's first run starts its server: paid once per worker
    print(f"fork server start-up and a first empty run: {time.monotonic() - started:.2f} s (once per worker)")
    fork, fork_passed = time_executor("fork", jobs, limits)
    sub, sub_passed = time_executor("subprocess", jobs, limits)
    floor = time_floor(jobs, args.work)
    summary("floor", floor, floor)
    summary("fork", fork, floor, fork_passed)
    summary("subprocess", sub, floor, sub_passed)
    if (
        not args.no_collect
        and not args.synthetic
        and time_collection(args.data_dir.resolve(), args.work, args.repeat) is None
    ):
        return 1
    if (
        not args.synthetic
        and args.overlap_steps
        and not time_overlap(args.work, args.overlap_steps, args.overlap_seconds, args.overlap_seconds)
    ):
        return 1
    fork_overhead = statistics.median([t - f for t, f in zip(fork, floor)])
    sub_overhead = statistics.median([t - f for t, f in zip(sub, floor)])
    ratio = sub_overhead / fork_overhead if fork_overhead > 0 else float("inf")
    print(f"overhead ratio (subprocess/fork): {ratio:.1f}x; fork total vs floor: {sum(fork) / sum(floor):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
