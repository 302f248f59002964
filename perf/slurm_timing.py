"""How long ``--bench-backend=slurm`` takes to submit every SciCode item and ``collect`` to take them in.

Submits the whole default split (80 problems, 341 items) as held jobs (``--hold``: nothing runs, the jobs are
cancelled afterwards), then writes one synthetic package per task (every item's record, no files) into the
run's spool and times ``python -m pytest_agentbench collect RUN_DIR``. Needs a Slurm cluster (.ci/slurm-setup).

    python perf/slurm_timing.py [--data-dir ../shared/data] [--work /tmp/agentbench-slurm-timing] [--ids 1,2]

Prints: the submission as the plugin times it (grouping, requests, sbatch calls; the shared-folder check job
before it is not included), the whole detached command, and the whole collect command with the part of it
that takes packages in.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_agentbench.backends.slurm import commands as slurm  # noqa: E402
from pytest_agentbench.backends.slurm import spool  # noqa: E402


def run(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    return time.monotonic() - started, done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data-dir", default=os.environ.get("AGENTBENCH_DATA_DIR") or str(ROOT.parent / "shared" / "data")
    )
    parser.add_argument("--work", default="/tmp/agentbench-slurm-timing")
    parser.add_argument("--ids", default="", help="only these problems (--bench-ids; default: the whole split)")
    args = parser.parse_args(argv)
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "pytest.ini").write_text("[pytest]\n")
    env = {
        **os.environ,
        "AGENTBENCH_DATA_DIR": args.data_dir,
        "AGENTBENCH_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    common = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--bench=scicode",
        "--model=timing-model",
        "--model-base-url=http://127.0.0.1:9/v1",
        "--bench-set=model_preflight=off",
        "--bench-run-id=timing",
        f"--bench-cache-dir={work / 'cache'}",
        *([f"--bench-ids={args.ids}"] if args.ids else []),
    ]
    listed = subprocess.run([*common, "--collect-only", "-q"], cwd=work, env=env, capture_output=True, text=True)
    nodeids = [line.strip() for line in listed.stdout.splitlines() if "::" in line]
    wall, done = run(
        [*common, "--bench-backend=slurm", "--bench-set=detach=true", "--bench-set=slurm_args=--hold"], work, env
    )
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-2000:])
        return 1
    run_dir = work / "reports" / "scicode" / "timing-model" / "timing"
    arrays = slurm.load_jobs(spool.spool_dir(run_dir))
    jobs = [a["job"] for a in arrays] + re.findall(r"collect job (\d+)", done.stdout)
    subprocess.run(["scancel", *jobs], check=False)
    units = [u for a in arrays for u in a["units"]]
    submitted = re.search(r"submitted (\d+) task\(s\).* in ([0-9.]+) s", done.stdout)
    print(f"items: {len(nodeids)}, tasks: {len(units)}, arrays: {len(arrays)}")
    if submitted:
        print(f"submission (plugin's timing, {submitted.group(1)} tasks): {float(submitted.group(2)):.2f} s")
    print(f"whole detached pytest command (start-up, collection, check job, submission): {wall:.2f} s")

    by_task: dict[str, list[str]] = {}
    for nodeid in nodeids:
        task = nodeid.split("::")[0].split("/")[-1]
        by_task.setdefault(task, []).append(nodeid)
    for task, ids in by_task.items():
        items = []
        for nodeid in ids:
            sample = nodeid.split("::")[-1]
            record = {
                "benchmark": "scicode",
                "task": task,
                "id": sample,
                "split": "test",
                "scored": True,
                "model": "timing-model",
                "status": "fail",
                "message": "synthetic",
                "duration": 0.01,
                "worker": "slurm 0_0",
                "host": "node",
            }
            items.append(
                {
                    "nodeid": nodeid,
                    "record": record,
                    "delivery": {"append": True, "files": [], "cache": [], "bytes": 0},
                    "phases": [
                        {"when": "setup", "outcome": "passed", "longrepr": None, "record": False},
                        {"when": "call", "outcome": "failed", "longrepr": "fail: synthetic", "record": True},
                        {"when": "teardown", "outcome": "passed", "longrepr": None, "record": False},
                    ],
                }
            )
        spool.write_package(run_dir, task, items, {})
    wall, done = run([sys.executable, "-m", "pytest_agentbench", "collect", str(run_dir), "--durations=0"], work, env)
    records = (run_dir / "steps.jsonl").read_text().count("\n") if (run_dir / "steps.jsonl").exists() else 0
    print(
        f"collect: {records} records written, whole command (start-up, collection, take-in, summaries): "
        f"{wall:.2f} s (exit {done.returncode})"
    )
    taken = re.search(r"took in (\d+) package\(s\) \((\d+) item\(s\)\) in ([0-9.]+) s", done.stdout)
    if taken:
        print(
            f"collect's take-in of {taken.group(2)} items ({taken.group(1)} packages; records appended with fsync): "
            f"{float(taken.group(3)):.2f} s"
        )
    took = re.search(r"in ([0-9.]+)s", done.stdout.splitlines()[-1]) if done.stdout else None
    if took:
        print(f"collect session as pytest times it (after start-up): {float(took.group(1)):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
