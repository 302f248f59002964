"""``python -m pytest_agentbench.pytest_plugin run-task RUN_DIR TASK [ARGS]`` and ``... collect RUN_DIR [ARGS]``:
the pytest sessions of the ``run-task`` and ``collect`` commands; ``... options [--markdown]``: every setting
(``listing.py``). Not a command of its own: ``cli/tasks.py``
checks the arguments and then replaces its process with this one (the command line never imports pytest)."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if argv[0] == "options":
        from .listing import main as listing  # why: the listing needs no session machinery

        return listing(argv[1:])
    from .slurm.taskpackage import collect_session, run_task_session  # why: only the sessions need them

    command, run_dir, rest = argv[0], Path(argv[1]), argv[2:]
    if command == "run-task":
        return run_task_session(run_dir, rest[0], rest[1:])
    return collect_session(run_dir, rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
