"""The command line: ``python -m pytest_agentbench COMMAND`` and the ``agentbench`` script.

A top layer beside ``pytest_plugin``: it may use every layer below but never imports pytest or the plugin
(tests/test_architecture.py). The commands that need a pytest session (``resume``, ``run-task``,
``collect``) start one as a program of its own (``tasks.py`` says how), as a user would. Each command's
module is imported only when that command runs, so ``compare`` does not pay for h5py nor ``init`` for scipy.
docs/cli.md lists the commands, their arguments and exit codes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

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
  options [--markdown]
                    every setting: how to set it (flag or --bench-set NAME=VALUE, ini key, environment,
                    run file), its default and its help

Run a benchmark with pytest itself, e.g.:
  pytest --bench=scicode --bench-split=validation --model=oracle -n 2
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    run = command(argv[0])
    if run is None:
        print(f"unknown command {argv[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return run(argv[1:])


def command(name: str) -> Callable[[list[str]], int] | None:
    """The function of a command (its arguments in, its exit code out), or None for an unknown name."""
    if name == "rebuild-targets":
        from .targets import main as rebuild  # why: load only the command that runs (h5py)

        return rebuild
    if name == "fetch-capsules":
        from .capsules import main as fetch  # why: load only the command that runs

        return fetch
    if name == "compare":
        from .compare import main as compare  # why: load only the command that runs (numpy, scipy)

        return compare
    if name == "init":
        from .runfile import main as init  # why: load only the command that runs

        return init
    if name in ("resume", "run-task", "collect", "options"):
        from . import tasks  # why: load only the command that runs

        return {"resume": tasks.resume, "run-task": tasks.run_task, "collect": tasks.collect, "options": tasks.options}[
            name
        ]
    return None
