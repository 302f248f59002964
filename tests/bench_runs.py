"""Helpers for reading what a pytester run of a benchmark left behind, and for the runs over hosts (a free
loopback port, waiting for a condition): plain functions, no fixtures."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("AGENTBENCH_DATA_DIR") or REPO.parent / "shared" / "data").resolve()


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def run_dirs(root: Path, bench: str = "scicode") -> list[Path]:
    """The run folders under ``root/reports/<bench>/<model>/``, sorted."""
    return sorted(p for p in (Path(root) / "reports" / bench).glob("*/*") if p.is_dir())


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (a socket server or scripted endpoint binds it next)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def ctrl_c_as_a_terminal_gives_it() -> None:
    """``preexec_fn`` of a pytest run a test stops with SIGINT: SIGINT at its default, so Python turns it into
    KeyboardInterrupt. A suite started in the background by a non-interactive shell (``.ci/run &``) has SIGINT
    ignored, every child inherits that, and Python then leaves it ignored: the Ctrl-C would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
