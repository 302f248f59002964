"""``python -m pytest_agentbench COMMAND``: the tools that live beside the pytest plugin."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

USAGE = """usage: python -m pytest_agentbench COMMAND [ARGS]

commands:
  rebuild-targets   rebuild SciCode validation targets from the ground truth into an h5 file
                    (not the official test_data.h5; checks a numerical environment)
  fetch-capsules    download and unpack CORE-Bench capsules ahead of a run, with progress
                    (local capsules get their `gpu` marker at collection)
  compare           compare two runs (run folders or summary.json files): metric deltas, flipped
                    items, McNemar test and bootstrap intervals; --html OUT writes the page
  init [FILE]       write a commented example run file (default agentbench.yaml) for --bench-config
  resume RUN_DIR    continue an interrupted run with its own settings and selection (its settings.json);
                    further arguments go to pytest (e.g. -n 4)
  run-task RUN_DIR TASK
                    run one task of a run (a SciCode problem, a CORE-Bench capsule; TASK@N for attempt N)
                    with the run's settings and write its package into RUN_DIR/spool (a Slurm job does this)
  collect RUN_DIR   take in every package waiting in RUN_DIR/spool, write the run's records and summaries,
                    and remove the run's API key file

Run a benchmark with pytest itself, e.g.:
  pytest --bench=scicode --bench-split=validation --model=oracle -n 2
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "rebuild-targets":
        from .benchmarks.scicode.targets import main as run  # why: load only the command that runs
    elif command == "fetch-capsules":
        from .benchmarks.corebench.fetch import main as run  # why: load only the command that runs
    elif command == "resume":
        return resume(rest)
    elif command in ("run-task", "collect"):
        from .pytest_plugin import taskpackage  # why: load only the command that runs

        return taskpackage.run_task(rest) if command == "run-task" else taskpackage.collect(rest)
    elif command == "init":
        return init(rest)
    elif command == "compare":
        from .report.comparison.runs import main as run  # why: load only the command that runs (numpy, scipy)
    else:
        print(f"unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return run(rest)


RUN_FILE_EXAMPLE = """\
# A pytest-agentbench run file: `pytest --bench-config=agentbench.yaml` (or ini key agentbench_config).
# Keys are the options' names as `pytest --help` lists them, without --bench- and with underscores
# (--bench-timeout -> timeout). The command line and the environment win over this file; this file wins
# over the ini file. Values that came from here are named `file agentbench.yaml:LINE` in errors and in
# each run's settings.json.

bench:
  bench: scicode              # the benchmark (--bench)
  split: validation           # --bench-split
  # ids: [77, "12.3"]         # --bench-ids
  mode: tool_use              # --bench-mode: tool_use or naive
  timeout: 1800               # seconds per step, as upstream (--bench-timeout)
  # attempts: 3               # --bench-attempts
  # report_dir: reports       # --bench-report-dir (relative to this file)

models:
  - name: gpt-4o                          # --model
    base_url: https://api.openai.com/v1   # --model-base-url
    api_key_env: OPENAI_API_KEY           # the variable that holds the key; never the key itself
    params: {temperature: 0}              # --model-params
    # price: {prompt_per_mtok: 2.5, completion_per_mtok: 10}   # USD per million tokens (--model-price)

gates:
  fail_under: ["main=40%"]    # --bench-fail-under
  # baseline: reports/scicode/gpt-4o/last-good   # --bench-baseline
  # max_drop: ["main=50%"]    # --bench-max-drop

pytest:
  n: 2                        # pytest-xdist workers (-n)
  # k: "not 51"               # -k
  # m: validation             # -m
  # deselect: ["scicode/10::10.11"]
"""


def write_example(path: Path) -> Path:
    """``python -m pytest_agentbench init``: a commented example; never overwrites a file."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; remove it or name another file")
    path.write_text(RUN_FILE_EXAMPLE, encoding="utf-8")
    return path


def init(args: list[str]) -> int:
    """Write a commented example run file; never overwrites one."""
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: python -m pytest_agentbench init [FILE]", file=sys.stderr)
        return 2
    try:
        path = write_example(Path(args[0] if args else "agentbench.yaml"))
    except (FileExistsError, OSError) as exc:
        print(f"init: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}: edit it, then run pytest --bench-config={path}")
    return 0


def resume(args: list[str]) -> int:
    """``pytest --bench-resume RUN_DIR [ARGS]``, started in the folder the run was started from."""
    if not args or args[0].startswith("-"):
        print("usage: python -m pytest_agentbench resume RUN_DIR [PYTEST ARGS]", file=sys.stderr)
        return 2
    folder = Path(args[0]).expanduser().resolve()
    cwd = None
    try:
        cwd = json.loads((folder / "settings.json").read_text(encoding="utf-8")).get("_run", {}).get("cwd")
    except (OSError, ValueError, AttributeError):
        pass
    cwd = cwd if cwd and Path(cwd).is_dir() else None
    return subprocess.call([sys.executable, "-m", "pytest", f"--bench-resume={folder}", *args[1:]], cwd=cwd)


if __name__ == "__main__":
    sys.exit(main())
