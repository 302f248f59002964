"""What a run records about itself, so a run describes itself: when it ran, on what, and how it was started.

``run_info`` is stored as ``summary["run"]`` (summary.json) and shown in summary.md: start and end time
(UTC), duration, the plugin's version, Python/numpy/scipy versions, the git commit of the working
directory (when it is a git checkout), the host's cores and the exact command line.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from .options import SET_OPTION, all_options

PACKAGE = "pytest-agentbench"


def version_of(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def git_commit(folder: Path) -> str | None:
    """The commit checked out in ``folder`` (``+dirty`` with uncommitted changes), or None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


REDACTED = "***"


def command_line(args: Sequence[str]) -> str:
    """The command that started this session: the interpreter's own argv when it ran pytest with these
    arguments, else ``pytest ARGS`` (pytest started in-process). Secret option values are replaced."""
    orig = list(getattr(sys, "orig_argv", []) or [])
    if orig and list(args) == orig[len(orig) - len(args) :] and len(orig) > len(args):
        return shlex.join(redact(orig, option_flags()))
    return shlex.join(["pytest", *redact(args, option_flags())])


def session_command(verb: str, run_dir: Path | str) -> str:
    """``python -m pytest_agentbench VERB RUN_DIR``, shell-quoted with absolute paths: the ``resume`` and
    ``collect`` commands run in the folder the run was started from, so the line works pasted in any folder."""
    return shlex.join([sys.executable, "-m", "pytest_agentbench", verb, os.path.abspath(run_dir)])


def option_flags() -> tuple[frozenset[str], frozenset[str]]:
    """(flags of secret options, every other flag) of every registered benchmark's option set."""
    options = all_options()
    others = frozenset({*(o.flag for o in options if not o.secret and o.shown), SET_OPTION.flag})
    return (frozenset(o.flag for o in options if o.secret), others)


def redact(argv: Sequence[str], flags: tuple[frozenset[str], frozenset[str]]) -> list[str]:
    """``argv`` with the value of every secret flag replaced, in the ``--flag=V`` and ``--flag V`` forms and
    for any prefix of the flag that is not another flag's name (argparse-style abbreviations)."""
    secret, others = flags

    def names_secret(word: str) -> bool:
        return (
            word.startswith("--") and word not in others and any(f.startswith(word) for f in secret) and len(word) > 2
        )

    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, _ = word.partition("=")
        if names_secret(name):
            out.append(f"{name}={REDACTED}" if eq else word)
            hide_next = not eq
            continue
        out.append(word)
    return out


def utc(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def run_info(started: datetime, ended: datetime, args: Sequence[str], folder: Path) -> dict[str, Any]:
    return {
        "started": utc(started),
        "ended": utc(ended),
        "duration_s": round((ended - started).total_seconds(), 1),
        "plugin_version": version_of(PACKAGE),
        "python": platform.python_version(),
        "numpy": version_of("numpy"),
        "scipy": version_of("scipy"),
        "git_commit": git_commit(folder),
        "host_cores": os.cpu_count(),
        "command": command_line(args),
        "cwd": str(folder),
    }
