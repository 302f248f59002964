"""``python -m pytest_agentbench COMMAND``: the tools that live beside the pytest plugin."""
from __future__ import annotations

import sys

USAGE = """usage: python -m pytest_agentbench COMMAND [ARGS]

commands:
  rebuild-targets   rebuild SciCode validation targets from the ground truth into an h5 file
                    (not the official test_data.h5; checks a numerical environment)
  compare           compare two runs (run folders or summary.json files): metric deltas, flipped
                    items, McNemar test and bootstrap intervals

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
    elif command == "compare":
        from .report.compare import main as run  # why: load only the command that runs (numpy, scipy)
    else:
        print(f"unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
