"""Data-directory discovery and pinned downloads checked by sha256.

Upstream files are never shipped with the package: on a user's machine they are fetched from
pinned URLs into the data directory; a directory staged by hand (or read-only) works the same.
"""
from __future__ import annotations

import hashlib
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

DATA_DIR_ENV = "AGENTBENCH_DATA_DIR"
OFFLINE_ENV = "AGENTBENCH_OFFLINE"  # "1": never download, say where to put the file instead
CHUNK = 1 << 20


class DataError(Exception):
    """A data file is missing, corrupt or cannot be fetched; the message says how to fix it."""


@dataclass(frozen=True)
class DataFile:
    name: str
    url: str
    sha256: str | None
    subdir: str


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def candidates(root: Path, f: DataFile) -> list[Path]:
    return [root / f.subdir / f.name, root / f.name]


def find(root: Path, f: DataFile) -> Path | None:
    for path in candidates(root, f):
        if path.is_file():
            return path
    return None


def verify(path: Path, f: DataFile, stamp_dir: Path | None = None) -> Path:
    """Check ``path`` against the pinned sha256; large files remember a success by size and mtime."""
    if f.sha256 is None:
        return path
    stat = path.stat()
    stamp = None
    if stamp_dir is not None:
        key = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:24]
        stamp = stamp_dir / "verified" / f"{f.name}.{key}"
        if stamp.is_file() and stamp.read_text() == f.sha256:
            return path
    actual = sha256_of(path)
    if actual != f.sha256:
        raise DataError(
            f"checksum mismatch for {path}: expected sha256 {f.sha256}, got {actual}. "
            f"The file is corrupt or not the pinned upstream version; delete it to re-download it from {f.url}, "
            f"or replace it with the official file."
        )
    if stamp is not None:
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(f.sha256)
        except OSError:
            pass  # a read-only cache only costs a re-hash next time
    return path


def find_or_fetch(root: Path, f: DataFile, *, stamp_dir: Path | None = None,
                  allow_download: bool | None = None) -> Path:
    """The verified local copy of ``f``; downloaded into ``<root>/<subdir>/`` when absent."""
    if allow_download is None:
        allow_download = os.environ.get(OFFLINE_ENV, "") not in ("1", "true", "yes")
    found = find(root, f)
    if found is not None:
        return verify(found, f, stamp_dir)
    dest = root / f.subdir / f.name
    where = " or ".join(str(p) for p in candidates(root, f))
    if not allow_download:
        raise DataError(f"{f.name} not found (looked in {where}) and downloads are off (${OFFLINE_ENV}); "
                        f"download it from {f.url} and put it at {dest}")
    try:
        return download(f.url, dest, f.sha256)
    except DataError as exc:
        raise DataError(
            f"{f.name} not found (looked in {where}) and could not be downloaded from {f.url}: {exc}. "
            f"Download it by hand and put it at {dest}, or point --bench-data-dir / ${DATA_DIR_ENV} "
            f"at a folder that has it."
        ) from exc


def _progress(name: str, done: int, total: int | None, started: float) -> None:
    if not sys.stderr.isatty():
        return
    rate = done / max(time.monotonic() - started, 1e-6) / 1e6
    if total:
        width = 30
        filled = int(width * done / total)
        bar = "#" * filled + "-" * (width - filled)
        sys.stderr.write(f"\r{name} [{bar}] {done / 1e6:.1f}/{total / 1e6:.1f} MB {rate:.1f} MB/s")
    else:
        sys.stderr.write(f"\r{name} {done / 1e6:.1f} MB {rate:.1f} MB/s")
    sys.stderr.flush()


def _fetch_once(url: str, part: Path, timeout: float) -> None:
    """Append the rest of ``url`` to ``part``, resuming with a Range request when it exists."""
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "pytest-agentbench"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        if have and response.status != 206:
            have = 0  # the server ignored the Range header: start over
        length = response.headers.get("Content-Length")
        total = have + int(length) if length else None
        started = time.monotonic()
        done = have
        with open(part, "ab" if have else "wb") as out:
            for chunk in iter(lambda: response.read(CHUNK), b""):
                out.write(chunk)
                done += len(chunk)
                _progress(part.name[: -len(".part")], done, total, started)
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        if total is not None and done != total:
            raise DataError(f"connection closed after {done} of {total} bytes")


def download(url: str, dest: Path, sha256: str | None = None, *, retries: int = 3, backoff: float = 1.0,
             timeout: float = 60) -> Path:
    """Fetch ``url`` to ``dest`` atomically: into ``dest.part`` (resumed across attempts), verified,
    then renamed, so an interrupted download never leaves a file that looks complete."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    last: Exception | None = None
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        try:
            _fetch_once(url, part, timeout)
            break
        except urllib.error.HTTPError as exc:
            last = exc
            if exc.code == 416:  # range past the end: the part file is stale
                part.unlink(missing_ok=True)
            elif exc.code < 500 and exc.code not in (408, 429):
                raise DataError(f"HTTP {exc.code} for {url}") from exc
        except (urllib.error.URLError, OSError, DataError) as exc:
            last = exc
    else:
        raise DataError(f"download of {url} failed after {retries + 1} attempts: {last}")
    if sha256 is not None:
        actual = sha256_of(part)
        if actual != sha256:
            part.unlink(missing_ok=True)
            raise DataError(f"checksum mismatch for {url}: expected sha256 {sha256}, got {actual}")
    os.replace(part, dest)
    return dest
