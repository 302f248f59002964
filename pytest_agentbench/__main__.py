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
                    items, McNemar test and bootstrap intervals
  resume RUN_DIR    continue an interrupted run with its own settings and selection (its settings.json);
                    further arguments go to pytest (e.g. -n 4)

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
    elif command == "compare":
        from .report.compare import main as run  # why: load only the command that runs (numpy, scipy)
    else:
        print(f"unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return run(rest)


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
