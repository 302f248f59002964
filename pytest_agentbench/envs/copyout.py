"""Bringing a workspace home with a cap: what an agent leaves behind is untrusted, and may be huge.

A workspace copied back (``Environment.copy_out``) holds at most ``cap`` bytes of regular files, counted
by apparent size (a sparse file counts as its length, so the copy cannot grow past the cap when it is
written out in full); special files (FIFOs, sockets, devices) are never copied; a symbolic link is kept
only as a link that stays inside the tree (never followed, never a loop). Everything left out is named in
the item's record (``CopyOut.to_record``) and the run goes on. The walk is bounded (``core.trees``: depth,
entries, path length): a tree past a bound is copied up to there, and ``past_bound`` says which bound it
passed (its item fails: the agent made that tree). Regular files are taken in a top-down walk, a folder's own
files before its subfolders, so the files at the workspace root (a CORE-Bench ``report.json``) come first.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.trees import DEFAULT_BOUNDS, TreeBounds, TreePastBound, walk_tree

MAX_NAMED = 50  # entries left out named in a record; the rest are counted


@dataclass
class CopyOut:
    """What one ``copy_out`` brought home: ``bytes`` of ``files`` regular files within ``cap``, and what it left
    out (``skipped``: path relative to the workspace, why, and the apparent size where there is one)."""

    cap: int
    bytes: int = 0
    files: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    stopped: str | None = None  # why the copy ended before the end of the tree (the rest is not there)
    bounds: TreeBounds = DEFAULT_BOUNDS  # how deep and wide a walk of the tree goes
    past_bound: str | None = None  # the tree passed a bound of the walk: the agent's doing, its item fails

    def admit(self, size: int) -> bool:
        """Count a regular file of apparent ``size`` bytes in, when it fits in what is left of the cap."""
        if self.bytes + size > self.cap:
            return False
        self.bytes += size
        self.files += 1
        return True

    def skip(self, path: str, why: str, size: int | None = None) -> None:
        entry: dict[str, Any] = {"path": path, "why": why}
        if size is not None:
            entry["size"] = size
        self.skipped.append(entry)

    def over_cap(self, path: str, size: int) -> None:
        self.skip(path, f"{size} bytes would pass the copy cap of {self.cap} bytes ({self.bytes} already copied)", size)

    @property
    def complete(self) -> bool:
        return not self.skipped and self.stopped is None

    def to_record(self) -> dict[str, Any]:
        """The record's ``copy_out`` field: the cap, the bytes and files kept, what was left out."""
        out: dict[str, Any] = {
            "cap": self.cap,
            "bytes": self.bytes,
            "files": self.files,
            "skipped": self.skipped[:MAX_NAMED],
        }
        if len(self.skipped) > MAX_NAMED:
            out["skipped_more"] = len(self.skipped) - MAX_NAMED
        if self.stopped:
            out["stopped"] = self.stopped
        if self.past_bound:
            out["past_bound"] = self.past_bound
        return out


def special_kind(mode: int) -> str | None:
    """The name of a file type that is never copied (None for folders, regular files and links)."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return None


def link_problem(link: Path, root: Path) -> str | None:
    """Why the symbolic link ``link`` inside ``root`` may not be kept: a loop, or leading outside the tree."""
    try:
        os.stat(link)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
        # dangling: judged by where it would lead
    target = Path(os.path.realpath(link))
    if not target.is_relative_to(root.resolve()):
        return "a symbolic link leading outside the workspace"
    return None


def _walk(root: Path, record: CopyOut) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry below ``root`` (lstat, never following a link): a folder's own entries before its subfolders'.
    At a bound of ``record`` the walk ends, saying so in ``record.stopped`` and ``record.past_bound``."""
    try:
        yield from walk_tree(root, record.bounds)
    except TreePastBound as exc:
        record.past_bound = record.stopped = f"the workspace is not walked to its end: {exc}"


def _unwanted(root: Path, path: str, info: os.stat_result, record: CopyOut) -> bool:
    """Record why the entry is left out, if it is; True when it is."""
    kind = special_kind(info.st_mode)
    if kind is not None:
        record.skip(path, f"{kind}: special files are not copied")
        return True
    if stat.S_ISLNK(info.st_mode):
        problem = link_problem(root / path, root)
        if problem:
            record.skip(path, f"{problem}: not copied")
            return True
        return False
    if stat.S_ISREG(info.st_mode) and not record.admit(info.st_size):
        record.over_cap(path, info.st_size)
        return True
    return False


def copy_tree(src: Path, dest: Path, cap: int, bounds: TreeBounds = DEFAULT_BOUNDS) -> CopyOut:
    """Copy ``src`` into ``dest`` within ``cap`` bytes and ``bounds`` (see the module's rules); never raises for an
    entry."""
    src, dest = Path(src), Path(dest)
    record = CopyOut(cap, bounds=bounds)
    dest.mkdir(parents=True, exist_ok=True)
    for path, info in _walk(src, record):
        if _unwanted(src, path, info, record):
            continue
        target = dest / path
        try:
            if stat.S_ISDIR(info.st_mode):
                target.mkdir(exist_ok=True)
            elif stat.S_ISLNK(info.st_mode):
                if target.is_symlink() or target.exists():
                    target.unlink()
                os.symlink(os.readlink(src / path), target)
            else:
                _copy_regular(src / path, target)
        except OSError as exc:
            record.skip(path, f"cannot be copied: {exc}")
    return record


def _copy_regular(source: Path, target: Path) -> None:
    """The file's bytes, read without following a link (one swapped in since the walk is refused)."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{source.name} is no longer a regular file")
        if target.is_symlink():
            target.unlink()
        with open(target, "wb") as out:
            shutil.copyfileobj(fh, out)
        os.chmod(target, stat.S_IMODE(os.fstat(fd).st_mode) & 0o777)  # executables stay so; no set-id bits


def prune_tree(root: Path, cap: int, bounds: TreeBounds = DEFAULT_BOUNDS) -> CopyOut:
    """Make the tree at ``root`` itself follow the copy rules, removing what a copy would leave out: for an
    environment that works in the workspace folder, where nothing is copied."""
    root = Path(root)
    record = CopyOut(cap, bounds=bounds)
    # judged all before any is removed: removing one link of a loop would make the other a plain dangling link
    doomed = [path for path, info in _walk(root, record) if _unwanted(root, path, info, record)]
    for path, entry in zip(doomed, record.skipped):
        try:
            (root / path).unlink()
        except OSError as exc:
            entry["why"] += f" (and could not be removed: {exc})"
    return record


def check_links(root: Path, record: CopyOut) -> None:
    """Remove the symbolic links under ``root`` that loop or lead outside it, naming them in ``record`` (after an
    extraction, when every link's target is in place)."""
    root = Path(root)
    bad = []
    for path, info in _walk(root, record):
        problem = link_problem(root / path, root) if stat.S_ISLNK(info.st_mode) else None
        if problem:
            record.skip(path, f"{problem}: not copied")
            bad.append(path)
    for path in bad:  # after judging them all (a loop's second link)
        (root / path).unlink(missing_ok=True)
