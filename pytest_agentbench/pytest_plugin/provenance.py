"""What a run records about itself (issue 13: self-describing runs): when it ran, on what, and how it was started.

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
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

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
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=folder,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def command_line(args: Sequence[str]) -> str:
    """The command that started this session: the interpreter's own argv when it ran pytest with these
    arguments, else ``pytest ARGS`` (pytest started in-process)."""
    orig = list(getattr(sys, "orig_argv", []) or [])
    if orig and list(args) == orig[len(orig) - len(args):] and len(orig) > len(args):
        return shlex.join(orig)
    return shlex.join(["pytest", *args])


def utc(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def run_info(started: datetime, ended: datetime, args: Sequence[str], folder: Path) -> dict[str, Any]:
    return {
        "started": utc(started), "ended": utc(ended),
        "duration_s": round((ended - started).total_seconds(), 1),
        "plugin_version": version_of(PACKAGE),
        "python": platform.python_version(), "numpy": version_of("numpy"), "scipy": version_of("scipy"),
        "git_commit": git_commit(folder),
        "host_cores": os.cpu_count(),
        "command": command_line(args),
        "cwd": str(folder),
    }
