"""Small file and text helpers every layer shares: one atomic writer, the run's file sinks (``RunFiles``),
one natural sort key, one trimmer."""

from __future__ import annotations

import os
import threading
from pathlib import Path, PurePosixPath
from typing import Protocol


def write_atomic(path: Path, text: str | bytes, *, durable: bool = False) -> None:
    """Write ``text`` (or bytes) so that a reader sees the old file or the new one, never half of it.

    ``durable``: fsync the new file before it replaces the old one (it survives a crash of the machine)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    data = text.encode("utf-8") if isinstance(text, str) else text
    with open(tmp, "wb") as fh:
        fh.write(data)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)


# ---- the run's files: trajectories, artifacts -------------------------------------------------------
class UnsafePath(ValueError):
    """A relative path of a run file that would leave the run folder (absolute, ``..``, a symlink on the way)."""


def run_relpath(relpath: str) -> str:
    """``relpath`` checked and normalised (``a/b.json``); UnsafePath when it is not a plain relative path."""
    text = str(relpath)
    if not text or "\0" in text or "\\" in text:
        raise UnsafePath(f"run file {text!r}: not a plain relative path")
    path = PurePosixPath(text)
    if path.is_absolute() or text.startswith("/"):
        raise UnsafePath(f"run file {text!r}: an absolute path (only paths inside the run folder are written)")
    if any(part in ("..", "") for part in path.parts) or not path.parts or path.parts == (".",):
        raise UnsafePath(f"run file {text!r}: '..' or an empty name (only paths inside the run folder are written)")
    return path.as_posix()


def write_under(root: Path, relpath: str, data: str | bytes) -> str:
    """Write ``data`` atomically to ``root/relpath`` and return the normalised relpath. The path must stay inside
    ``root`` on disk too: a folder on the way that is a symlink (or anything that resolves outside) is refused."""
    rel = run_relpath(relpath)
    root = Path(root)
    target = root / rel
    real_root = root.resolve()
    for parent in reversed(PurePosixPath(rel).parents[:-1]):  # the folders on the way (not root), outermost first
        if (root / parent).is_symlink():
            raise UnsafePath(f"run file {rel!r}: {parent} is a symlink (only paths inside the run folder are written)")
    target.parent.mkdir(parents=True, exist_ok=True)
    if real_root != target.parent.resolve() and real_root not in target.parent.resolve().parents:
        raise UnsafePath(f"run file {rel!r}: resolves outside the run folder {root}")
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise UnsafePath(f"run file {rel!r}: exists and is not a regular file")
    write_atomic(target, data)
    return rel


class RunFiles(Protocol):
    """Where a benchmark puts the files of its run (trajectories, artifacts): ``write(relpath, data)`` returns the
    relpath a record refers to. Benchmarks write through this only, never into the run folder themselves."""

    def write(self, relpath: str, data: str | bytes) -> str:
        """Store ``data`` as ``relpath`` (relative to the run folder); return the normalised relpath."""


class DirectoryFiles:
    """The run folder itself (the only process, the xdist controller, a notebook): each file written atomically."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def write(self, relpath: str, data: str | bytes) -> str:
        return write_under(self.root, relpath, data)


class CollectedFiles:
    """An xdist worker's sink: files are kept in memory until ``take()`` hands them to the item's report (the
    controller writes them). It has no way to write to disk."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files: dict[str, bytes] = {}

    def write(self, relpath: str, data: str | bytes) -> str:
        rel = run_relpath(relpath)
        with self.lock:
            self.files[rel] = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        return rel

    def take(self) -> dict[str, bytes]:
        """The files written since the last call (and forget them)."""
        with self.lock:
            files, self.files = self.files, {}
        return files


def natural_key(text: object) -> list[int | str]:
    """Sort key that puts 77.3 before 77.10 and capsule-2 before capsule-10."""
    return [int(p) if p.isdigit() else p for p in str(text).replace("-", ".").split(".")]


def trim_parts(head: bytes, tail: bytes, size: int) -> str:
    """Text of a stream of ``size`` bytes of which only ``head`` and ``tail`` were kept."""
    if size <= len(head) + len(tail):
        return (head + tail)[:size].decode("utf-8", "replace")
    dropped = size - len(head) - len(tail)
    return (
        head.decode("utf-8", "replace")
        + f"\n... [{dropped} bytes trimmed of {size}] ...\n"
        + tail.decode("utf-8", "replace")
    )


def trim(data: bytes | str, limit: int) -> str:
    """Keep the head and the tail of a long output (``limit`` bytes in all) and say how much was dropped."""
    raw = data.encode("utf-8", "replace") if isinstance(data, str) else data
    if len(raw) <= limit:
        return raw.decode("utf-8", "replace")
    half = limit // 2
    return trim_parts(raw[:half], raw[len(raw) - half :], len(raw))
