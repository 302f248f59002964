"""What a machine offers a run: its name, cores, GPUs and the exact build of the installed package.

Plain functions, read where they run: on a remote xdist worker's host they describe that host, never the
controller. GPUs are what ``nvidia-smi -L`` lists (the project's tests put a fake one on a worker's PATH).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def hostname() -> str:
    return socket.gethostname()


def cores() -> int:
    """Cores this process may use (the affinity mask, as a container's limit shows it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def gpus() -> list[str]:
    """The GPUs of this machine: the ``GPU ...`` lines of ``nvidia-smi -L`` (none without it)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("GPU")]


def package_build(root: Path = PACKAGE_ROOT) -> str:
    """A short digest of the installed package's Python sources: two installs of one version built from
    different code (an editable checkout with local changes, a stale copy) have different builds."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]
