"""Walking and removing folders someone else wrote (an agent's workspace), with bounds and without recursion.

A tree an agent made can be nested thousands of folders deep, hold millions of entries or a sparse file of
terabytes. A recursive walk (``os.walk`` and ``shutil.rmtree`` before Python 3.12/3.13) raises RecursionError on
the deep one, which is not an ``OSError``: it escaped every ``ignore_errors`` and turned the agent's doing into
the controller's error. Here a walk keeps its own stack and stops at the first bound passed (``TreeBounds``),
saying which in ``TreePastBound``; ``remove_tree`` removes a tree of any depth, through folder descriptors (no
path ever grows past PATH_MAX), and never raises.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_MAX_DEPTH = 256  # folders below the root; a capsule's own tree is a few dozen deep at most
DEFAULT_MAX_ENTRIES = 1_000_000  # entries of every kind, the root's own not counted
DEFAULT_MAX_PATH = 3072  # characters of a path below the root: with the root's own, within PATH_MAX (4096 bytes)


@dataclass(frozen=True)
class TreeBounds:
    """How far a walk goes: ``depth`` folders below the root, ``entries`` entries in all, ``path`` characters of
    a path below the root (past PATH_MAX no path-based call reaches an entry at all)."""

    depth: int = DEFAULT_MAX_DEPTH
    entries: int = DEFAULT_MAX_ENTRIES
    path: int = DEFAULT_MAX_PATH


DEFAULT_BOUNDS = TreeBounds()


class TreePastBound(Exception):
    """A walk stopped at a bound; the message names the bound and where the walk was."""

    def __init__(self, bound: str, limit: int, where: str) -> None:
        self.bound = bound
        self.limit = limit
        self.where = where
        shown = where if len(where) <= 120 else f"{where[:60]}...{where[-40:]}"
        super().__init__(f"the tree passes the bound of {limit} {bound} (at {shown!r}); the walk stopped there")


def walk_tree(root: Path, bounds: TreeBounds = DEFAULT_BOUNDS) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry below ``root`` as (path relative to ``root``, lstat), never following a link: a folder's own
    entries (sorted by name) before its subfolders', depth first. Unreadable folders and entries that vanish are
    passed over. Raises ``TreePastBound`` when the next entry would pass ``bounds``."""
    root = Path(root)
    seen = 0
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        rel, depth = stack.pop()
        subfolders: list[str] = []
        for name in _sorted_names(root / rel if rel else root, bounds.entries - seen + 1):
            path = f"{rel}/{name}" if rel else name
            seen += 1
            if seen > bounds.entries:
                raise TreePastBound("entries", bounds.entries, path)
            if len(path) > bounds.path:
                raise TreePastBound("characters of path", bounds.path, path)
            try:
                info = os.lstat(root / path)
            except OSError:
                continue  # vanished meanwhile
            yield path, info
            if stat.S_ISDIR(info.st_mode):
                if depth + 1 >= bounds.depth:
                    raise TreePastBound("nested folders", bounds.depth, path)
                subfolders.append(path)
        stack.extend((path, depth + 1) for path in reversed(subfolders))


def _sorted_names(folder: Path, most: int) -> list[str]:
    """The names in ``folder``, sorted, reading at most ``most`` of them (a folder of millions is not listed
    whole only to be refused)."""
    names: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) >= most:
                    break
    except OSError:
        return []
    return sorted(names)


def remove_tree(path: Path | str) -> bool:
    """Remove ``path`` (a folder with everything in it, a file or a link; a link is removed, never followed) at
    any depth, making folders the owner locked (mode 000) writable on the way. Never raises; True when
    ``path`` is gone afterwards."""
    path = os.fspath(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        _quietly(os.unlink, path)
        return not os.path.lexists(path)
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    _empty_folder(top)
    _quietly(os.rmdir, path)
    return not os.path.lexists(path)


def _empty_folder(top: int) -> None:
    """Remove everything inside the folder open as ``top`` (closed on return), one descriptor per level held.
    A name that cannot be removed is passed over (once a folder: after it was emptied as far as it goes)."""
    stack: list[_Level] = [_Level(top)]
    try:
        while stack:
            level = stack[-1]
            child = _next_child(level)
            if child is None:
                stack.pop()
                os.close(level.fd)
                continue
            name, is_dir = child
            if not is_dir:
                if not _quietly(os.unlink, name, dir_fd=level.fd):
                    level.stuck.add(name)
                continue
            _quietly(os.chmod, name, 0o700, dir_fd=level.fd)  # a folder the agent locked (it is not a link)
            if _quietly(os.rmdir, name, dir_fd=level.fd):
                continue
            if name in level.entered:  # emptied as far as it goes, and still not removable
                level.stuck.add(name)
                continue
            level.entered.add(name)
            try:
                stack.append(_Level(os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=level.fd)))
            except OSError:
                level.stuck.add(name)
    finally:
        for level in stack:
            os.close(level.fd)


@dataclass
class _Level:
    """One open folder of a removal: its descriptor, the names it keeps, the subfolders already entered."""

    fd: int
    stuck: set[str] = field(default_factory=set)
    entered: set[str] = field(default_factory=set)
    pending: list[tuple[str, bool]] = field(default_factory=list)


def _next_child(level: _Level) -> tuple[str, bool] | None:
    """A name still inside the folder to remove (and whether it is a folder), None when only names that cannot
    be removed are left. Names are read a batch at a time (one listing per name would be quadratic)."""
    if not level.pending:
        level.pending = _listing(level)
    return level.pending.pop() if level.pending else None


def _listing(level: _Level, batch: int = 4096) -> list[tuple[str, bool]]:
    found: list[tuple[str, bool]] = []
    try:
        with os.scandir(level.fd) as entries:
            for entry in entries:
                if entry.name in level.stuck:
                    continue
                try:
                    found.append((entry.name, entry.is_dir(follow_symlinks=False)))
                except OSError:
                    found.append((entry.name, False))
                if len(found) >= batch:
                    break
    except OSError:
        pass
    return found


def _quietly(call: Callable[..., object], *args: object, **kwargs: object) -> bool:
    """``call(*args, **kwargs)``; False when it raised an OSError."""
    try:
        call(*args, **kwargs)
    except OSError:
        return False
    return True


@contextmanager
def scratch_folder(prefix: str, dir: Path | str | None = None) -> Iterator[Path]:  # noqa: A002 (tempfile's name)
    """A fresh temporary folder, removed with ``remove_tree`` on the way out whatever it holds by then
    (``tempfile.TemporaryDirectory`` removes with a recursive ``shutil.rmtree`` on this Python)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=dir))
    try:
        yield folder
    finally:
        remove_tree(folder)
