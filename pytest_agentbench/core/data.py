"""Data-directory discovery and pinned downloads checked by sha256.

Upstream files are never shipped with the package: on a user's machine they are fetched from
pinned URLs into the data directory; a directory staged by hand (or read-only) works the same.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .io import write_atomic
from .retrywait import pause_before_retry
from .run_options import user_cache_dir

DATA_DIR_ENV = "AGENTBENCH_DATA_DIR"
OFFLINE_ENV = "AGENTBENCH_OFFLINE"  # "1": never download, say where to put the file instead
SECRET_ENV = "AGENTBENCH_SECRET_FILE"  # where the key that signs stamps lives, when not in the cache folder
SECRET_NAME = "secret"  # the key file in the cache folder
CHUNK = 1 << 20
_SECRET: dict[str, bytes | None] = {}


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


def digests_of(path: Path) -> tuple[str, str]:
    """(md5, sha256) of ``path`` in one pass: a manifest that pins md5 (SciCode-Verified's) is checked with the
    first, and the file's content is then trusted by the second (what the run re-checks before every use)."""
    md5, sha = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            md5.update(chunk)
            sha.update(chunk)
    return md5.hexdigest(), sha.hexdigest()


def checked_md5(path: Path, md5: str, stamp_dir: Path | None = None) -> tuple[str, str] | None:
    """The file's (md5, sha256) when its md5 is ``md5``, else None. A success is remembered like ``verify``'s:
    in a stamp named after the file's fingerprint, signed with the machine secret, holding the sha256 (so a
    large file is hashed once, and a stamp anyone else wrote, or one left from before a change, is ignored)."""
    stamp, message = None, ""
    if stamp_dir is not None:
        message = "|".join(str(part) for part in fingerprint(path)) + "|md5:" + md5
        key = hashlib.sha256(message.encode()).hexdigest()[:24]
        stamp = Path(stamp_dir) / "verified" / f"{path.name}.md5.{key}"
        try:
            if stamp.is_file() and not stamp.is_symlink():
                sha, _, held = stamp.read_text()[:300].partition("\n")
                if signed(message + "|" + sha, held, stamp_dir):
                    return md5, sha
        except OSError:
            pass
    actual, sha = digests_of(path)
    if actual != md5:
        return None
    mac = sign(message + "|" + sha, stamp_dir) if stamp is not None else None
    if stamp is not None and mac is not None:
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(stamp, f"{sha}\n{mac}")
        except OSError:
            pass  # a read-only cache only costs a re-hash next time
    return actual, sha


def candidates(root: Path, f: DataFile) -> list[Path]:
    return [root / f.subdir / f.name, root / f.name]


def find(root: Path, f: DataFile) -> Path | None:
    for path in candidates(root, f):
        if path.is_file():
            return path
    return None


def secret_path(cache_dir: Path | None = None) -> Path:
    """The key file that signs what ``cache_dir`` remembers: ``$AGENTBENCH_SECRET_FILE``, else ``secret`` in
    that cache folder (the per-user one, ``$XDG_CACHE_HOME/pytest-agentbench`` or
    ``~/.cache/pytest-agentbench``, when none is given). The key lives with the entries it signs, so they
    verify wherever the folder is kept (a second run, a CI job that restores the cache in a fresh home); the
    cache folder is private to the controller: the children that run model code never see it."""
    explicit = os.environ.get(SECRET_ENV)
    if explicit:
        return Path(explicit).expanduser()
    folder = Path(cache_dir) if cache_dir is not None else user_cache_dir(os.environ)
    return folder / SECRET_NAME


def machine_secret(cache_dir: Path | None = None) -> bytes | None:
    """The key that signs checksum stamps and rebuilt-target manifests of ``cache_dir`` (created once, mode
    0600); None when it can be neither read nor created, or is not this user's alone (then nothing is
    remembered: files are re-hashed, targets rebuilt)."""
    path = secret_path(cache_dir)
    key = os.path.abspath(path)
    if key not in _SECRET:
        _SECRET[key] = _load_or_create_secret(path)
    return _SECRET[key]


def _load_or_create_secret(path: Path) -> bytes | None:
    for _ in range(2):
        try:
            return _read_own_secret(path)
        except FileNotFoundError:
            pass
        except OSError:
            return None
        try:
            _publish_new_secret(path)
        except OSError:
            return None
    return None


def _read_own_secret(path: Path) -> bytes | None:
    """The key when the file is a regular file of this user that nobody else can read or write (a key planted in
    a shared cache folder by someone else, or one others can read, signs nothing)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None
        data = fh.read(1024)
    return data if len(data) >= 32 else None


def _publish_new_secret(path: Path) -> None:
    """Write a new key beside ``path`` and link it there only when no key is there yet: a process that reads the
    key never sees it half-written, and of two processes creating it at once, both use the first one's."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(draft, path)
        except FileExistsError:
            pass  # another process published first: read theirs
    finally:
        draft.unlink(missing_ok=True)


def sign(message: str, cache_dir: Path | None = None) -> str | None:
    """HMAC-SHA256 of ``message`` under the key of ``cache_dir`` (None without a key)."""
    secret = machine_secret(cache_dir)
    if secret is None:
        return None
    return hmac.new(secret, message.encode(), hashlib.sha256).hexdigest()


def signed(message: str, mac: object, cache_dir: Path | None = None) -> bool:
    """Whether ``mac`` is the signature of ``message`` under the key of ``cache_dir`` (constant-time compare)."""
    expected = sign(message, cache_dir)
    return expected is not None and isinstance(mac, str) and hmac.compare_digest(expected, mac)


def fingerprint(path: Path) -> tuple[str, int, int, int, int, int]:
    """What changes whenever a file is rewritten, replaced or touched: its resolved path, device, inode,
    size, mtime and ctime (a writer can set the mtime back with utime, but not the ctime)."""
    info = path.stat()
    return (str(path.resolve()), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def verify(path: Path, f: DataFile, stamp_dir: Path | None = None) -> Path:
    """Check ``path`` against the pinned sha256; large files remember a success in a stamp.

    The stamp is named after the file's fingerprint (path, inode, size, mtime, ctime) and holds an
    HMAC of that fingerprint and the sha256 under the machine secret, which no child can read: a
    stamp written by anyone else, or left from before the file changed, is ignored and the file is
    re-hashed."""
    if f.sha256 is None:
        return path
    stamp = None
    message = ""
    if stamp_dir is not None:
        message = "|".join(str(part) for part in fingerprint(path)) + "|" + f.sha256
        key = hashlib.sha256(message.encode()).hexdigest()[:24]
        stamp = Path(stamp_dir) / "verified" / f"{f.name}.{key}"
        try:
            if stamp.is_file() and not stamp.is_symlink() and signed(message, stamp.read_text()[:200], stamp_dir):
                return path
        except OSError:
            pass
    actual = sha256_of(path)
    if actual != f.sha256:
        raise DataError(
            f"checksum mismatch for {path}: expected sha256 {f.sha256}, got {actual}. "
            f"The file is corrupt or not the pinned upstream version; delete it to re-download it from {f.url}, "
            f"or replace it with the official file, or pass --bench-set=allow_custom_data=true to use it anyway "
            f"(the report then says the data is custom)."
        )
    mac = sign(message, stamp_dir) if stamp is not None else None
    if stamp is not None and mac is not None:
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(stamp, mac)  # a rename: never writes through a planted link
        except OSError:
            pass  # a read-only cache only costs a re-hash next time
    return path


def offline() -> bool:
    """Whether downloads are off ($AGENTBENCH_OFFLINE)."""
    return os.environ.get(OFFLINE_ENV, "") in ("1", "true", "yes")


def find_or_fetch(
    root: Path, f: DataFile, *, stamp_dir: Path | None = None, allow_download: bool | None = None
) -> Path:
    """The verified local copy of ``f``; downloaded into ``<root>/<subdir>/`` when absent."""
    if allow_download is None:
        allow_download = not offline()
    found = find(root, f)
    if found is not None:
        return verify(found, f, stamp_dir)
    dest = root / f.subdir / f.name
    where = " or ".join(str(p) for p in candidates(root, f))
    if not allow_download:
        raise DataError(
            f"{f.name} not found (looked in {where}) and downloads are off (${OFFLINE_ENV}); "
            f"download it from {f.url}{pinned_text(f)} and put it at {dest}"
        )
    try:
        return download(f.url, dest, f.sha256)
    except DataError as exc:
        raise DataError(
            f"{f.name} not found (looked in {where}) and could not be downloaded from {f.url}: {exc}. "
            f"Download it by hand and put it at {dest}, or point --bench-data-dir / ${DATA_DIR_ENV} "
            f"at a folder that has it."
        ) from exc


def pinned_text(f: DataFile) -> str:
    """`` (sha256 ...)`` of a pinned file, for the messages that say what to download."""
    return f" (sha256 {f.sha256})" if f.sha256 else ""


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
    import urllib.request  # why: only a download needs the HTTP client; the plugin loads this module in every run

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


def download(
    url: str, dest: Path, sha256: str | None = None, *, retries: int = 3, backoff: float = 1.0, timeout: float = 60
) -> Path:
    """Fetch ``url`` to ``dest`` atomically: into ``dest.part`` (resumed across attempts), verified,
    then renamed, so an interrupted download never leaves a file that looks complete."""
    dest = Path(dest)
    made = missing_folders(dest.parent)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        return _download(url, dest, part, sha256, retries=retries, backoff=backoff, timeout=timeout)
    except BaseException:
        remove_empty(part, made)  # a failed download leaves no empty file or folder behind
        raise


def missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, deepest first."""
    out = []
    folder = Path(folder).absolute()
    while not folder.exists() and folder != folder.parent:
        out.append(folder)
        folder = folder.parent
    return out


def remove_empty(part: Path, folders: list[Path]) -> None:
    """Remove an empty partial download, then each of ``folders`` that is empty (deepest first)."""
    try:
        if part.is_file() and part.stat().st_size == 0:
            part.unlink()
        for folder in folders:
            folder.rmdir()
    except OSError:
        pass  # not empty (a partial download kept for resuming): leave it


def _download(
    url: str, dest: Path, part: Path, sha256: str | None, *, retries: int, backoff: float, timeout: float
) -> Path:
    import urllib.error  # why: only a download needs the HTTP client; the plugin loads this module in every run

    last: Exception | None = None
    for attempt in range(retries + 1):
        if attempt:
            pause_before_retry(backoff * 2 ** (attempt - 1))
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
