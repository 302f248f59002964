"""The commands that are pytest sessions over a run folder: ``resume``, ``run-task`` and ``collect``.

This layer never imports pytest, so each command checks its arguments here and then starts the session as a
program of its own, as a user would: ``resume`` runs ``python -m pytest --bench-resume RUN_DIR`` as a child
and returns its exit code; ``run-task`` and ``collect`` replace this process (``os.execv``) with
``python -m pytest_agentbench.pytest_plugin`` (``pytest_plugin/__main__.py``), which runs the session with the
plugin object it needs (``TaskPackager``, ``PackageCollector``). Replacing the process rather than waiting on a
child keeps what a Slurm job sees: one process, the job's own PID, and SIGTERM (scancel, a time limit)
delivered once to the session that tears the task down; a waiting parent would either leave the child running
or, forwarding the signal, make it arrive twice.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

from ..report.resume import SETTINGS_FILE, stored_cwd

# The module that runs the sessions of ``run-task`` and ``collect``: named, never imported, from here.
SESSION_MODULE = "pytest_agentbench.pytest_plugin"


def resume(args: list[str]) -> int:
    """``pytest --bench-resume RUN_DIR [ARGS]``, started in the folder the run was started from."""
    if not args or args[0].startswith("-"):
        print("usage: python -m pytest_agentbench resume RUN_DIR [PYTEST ARGS]", file=sys.stderr)
        return 2
    folder = Path(args[0]).expanduser().resolve()
    return subprocess.call(
        [sys.executable, "-m", "pytest", f"--bench-resume={folder}", *args[1:]], cwd=stored_cwd(folder)
    )


def run_task(argv: list[str]) -> int:
    """``run-task RUN_DIR TASK`` (or ``run-task RUN_DIR --list FILE --index N``: the N-th line of FILE, as a
    job array element names its task): run one task and write its package; exit 0 when the package is written."""
    usage = "usage: python -m pytest_agentbench run-task RUN_DIR TASK [PYTEST ARGS]"
    if len(argv) < 2:
        print(usage, file=sys.stderr)
        return 2
    run_dir = Path(argv[0]).expanduser().resolve()
    rest = argv[1:]
    if rest[0] == "--list":
        if len(rest) < 4 or rest[2] != "--index":
            print(usage, file=sys.stderr)
            return 2
        lines = Path(rest[1]).read_text(encoding="utf-8").splitlines()
        unit, rest = lines[int(rest[3])], rest[4:]
    else:
        unit, rest = rest[0], rest[1:]
    if not (run_dir / SETTINGS_FILE).is_file():
        print(f"run-task: {run_dir} has no {SETTINGS_FILE}: not a run folder", file=sys.stderr)
        return 2
    become_session("run-task", str(run_dir), unit, *rest)


def collect(argv: list[str]) -> int:
    """``collect RUN_DIR``: take in every package waiting in the run's spool, write the summaries, and remove
    the run's API key file. Exit as a run's (its gates)."""
    if len(argv) < 1 or argv[0].startswith("-"):
        print("usage: python -m pytest_agentbench collect RUN_DIR [PYTEST ARGS]", file=sys.stderr)
        return 2
    run_dir = Path(argv[0]).expanduser().resolve()
    if not (run_dir / SETTINGS_FILE).is_file():
        print(f"collect: {run_dir} has no {SETTINGS_FILE}: not a run folder", file=sys.stderr)
        return 2
    become_session("collect", str(run_dir), *argv[1:])


def options(argv: list[str]) -> int:
    """``options [--markdown]``: every setting, described from the declarations the plugin registers (which live
    on the plugin's side of the layers: this process becomes the plugin's listing)."""
    if [a for a in argv if a != "--markdown"]:
        print("usage: python -m pytest_agentbench options [--markdown]", file=sys.stderr)
        return 2
    become_session("options", *argv)


def become_session(*args: str) -> NoReturn:
    """This process becomes the session's (see the module's docstring for why it is not a child)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", SESSION_MODULE, *args])
