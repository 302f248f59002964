"""The folder of one run: the script and its files go in, its output files come out as an ExecResult."""

from __future__ import annotations

import os
import signal
import stat
import time
from collections.abc import Mapping
from pathlib import Path

from ..core.io import trim_parts
from ..core.text import decode
from .limits import Limits
from .result import ExecResult

SCRIPT_NAME = "main.py"
# written to stderr when the process running a script died with it (the script killed its parent)
EXECUTOR_DIED = "AGENTBENCH-EXECUTOR-DIED"


def prepare_workdir(
    work: Path, source: str, files: Mapping[str, bytes | str] | None, collect: Mapping[str, int] | None = None
) -> Path:
    """Write ``source`` as ``main.py`` and ``files`` (relative names, staying inside ``work``), and
    create the empty files named in ``collect`` (plain names), which the run may write and hands back."""
    script = work / SCRIPT_NAME
    script.write_text(source)
    for name in collect or {}:
        if not name or "/" in name or name in (".", "..", SCRIPT_NAME, ".stdout", ".stderr") or name in (files or {}):
            raise ValueError(f"collect name {name!r} must be a plain file name of its own (no folder)")
        (work / name).touch()
        os.chmod(work / name, 0o666)  # the child may run as another uid
    for name, content in (files or {}).items():
        target = (work / name).resolve()
        if work.resolve() not in target.parents:
            raise ValueError(f"file name {name!r} for the sandbox must stay inside its directory; use a relative path")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        target.write_bytes(content)
    return script


def read_trimmed(path: Path, limit: int) -> tuple[str, int]:
    """The text of an output file, only its head and tail when longer than ``limit`` bytes, and its size."""
    text, size, _ = read_output(path, limit)
    return text, size


def read_output(path: Path, limit: int) -> tuple[str, int, int]:
    """``read_trimmed`` and how many characters were repaired: a child's output is text from outside, made
    valid UTF-8 where it is read (undecodable bytes become U+FFFD, counted).

    Only the head and the tail are read: a flood may be hundreds of MB."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "", 0, 0
    with open(path, "rb") as fh:
        if size <= limit:
            text, repaired = decode(fh.read())
            return text, size, repaired
        half = limit // 2
        head = fh.read(half)
        fh.seek(size - half)
        tail = fh.read(half)
    return trim_parts(head, tail, size), size, decode(head)[1] + decode(tail)[1]


def read_collected(work: Path, collect: Mapping[str, int] | None) -> dict[str, bytes]:
    """The bytes of each file named in ``collect`` (name -> cap): at most cap + 1 bytes, so a file over
    its cap shows it; never through a link, never blocking on a FIFO; a missing file is empty."""
    out: dict[str, bytes] = {}
    for name, cap in (collect or {}).items():
        try:
            fd = os.open(work / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            out[name] = b""
            continue
        with os.fdopen(fd, "rb") as fh:
            out[name] = fh.read(int(cap) + 1) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    return out


def classify(
    exit_code: int | None, stderr: str, timed_out: bool, *, processes_hit: bool = False, output_hit: bool = False
) -> str | None:
    """Which limit ended a run (one of ``LIMIT_NAMES``), or None."""
    if timed_out:
        return "wall"
    if exit_code == 0:
        return None
    if exit_code in (-signal.SIGXCPU, -signal.SIGKILL) and ("CPU" in stderr or exit_code == -signal.SIGXCPU):
        return "cpu"
    if output_hit:
        return "output"
    if processes_hit:
        return "processes"
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr or "std::bad_alloc" in stderr:
        return "memory"
    if "Resource temporarily unavailable" in stderr and ("fork" in stderr or "BlockingIOError" in stderr):
        return "processes"
    return None


def collect_result(
    work: Path,
    limits: Limits,
    exit_code: int | None,
    started: float,
    *,
    timed_out: bool,
    limit: str | None = None,
    processes_hit: bool = False,
) -> ExecResult:
    """Read the output files of a finished run and build its ExecResult (shared by both executors)."""
    duration = time.monotonic() - started
    stdout, out_size, out_repaired = read_output(work / ".stdout", limits.output)
    stderr, err_size, err_repaired = read_output(work / ".stderr", limits.output)
    stdout, stderr = hide_workdir(stdout, work), hide_workdir(stderr, work)
    output_hit = max(out_size, err_size) >= limits.output_cap
    if limit is None:
        limit = classify(exit_code, stderr, timed_out, processes_hit=processes_hit, output_hit=output_hit)
    return ExecResult(
        exit_code=None if timed_out else exit_code,
        stdout=stdout,
        stderr=stderr,
        duration=duration,
        timed_out=timed_out,
        limit=limit,
        stdout_bytes=out_size,
        stderr_bytes=err_size,
        text_repaired=out_repaired + err_repaired,
    )


def hide_workdir(text: str, work: Path | str) -> str:
    """``text`` with the run's folder shown as ``.``: it is random, and both executors (and reruns)
    must print the same text (``File "./main.py"``)."""
    for form in {str(work), os.path.realpath(work)}:
        text = text.replace(form + "/", "./").replace(form, ".")
    return text
