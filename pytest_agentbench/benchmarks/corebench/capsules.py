"""Fetching and unpacking CORE-Bench capsules (one tar.gz per task, a few MB to several GB).

Archives come from the upstream host (overridable with ``$AGENTBENCH_CAPSULE_URL`` for mirrors
and tests) into a store folder; they are unpacked once into a cache folder, one entry per tarball content
(keyed by its sha256, so a replaced tarball is unpacked again), and copied from there into a fresh workspace
per item. A capsule staged as an unpacked folder in the store is used as is. Archives are untrusted input: every
member is checked
before anything is written (no absolute paths, no ``..``, links stay inside the capsule, no
device files), and ``tarfile``'s ``data`` filter is applied on top where Python has it.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import NamedTuple

from ...core.data import OFFLINE_ENV, DataError, download, fingerprint, offline, sha256_of, sign, signed
from ...core.io import write_atomic

DEFAULT_CAPSULE_URL = "https://corebench.cs.princeton.edu/capsules"
CAPSULE_URL_ENV = "AGENTBENCH_CAPSULE_URL"
CAPSULE_ID = re.compile(r"capsule-\d+")


class CapsuleError(Exception):
    """A capsule cannot be had or is unsafe; the message says where to put a good copy."""


def capsule_base_url(published: str | None = None) -> str:
    """Where capsules are downloaded from: ``$AGENTBENCH_CAPSULE_URL`` (a mirror), else where the data set publishes
    them (``published``; v1's host when None)."""
    return os.environ.get(CAPSULE_URL_ENV, published or DEFAULT_CAPSULE_URL).rstrip("/")


def capsule_url(capsule_id: str, published: str | None = None) -> str:
    return f"{capsule_base_url(published)}/{capsule_id}.tar.gz"


def check_capsule_id(capsule_id: str) -> str:
    # the id becomes a file name and a URL path: only the official shape is accepted
    if not CAPSULE_ID.fullmatch(capsule_id):
        raise CapsuleError(f"invalid capsule id {capsule_id!r}: expected 'capsule-' followed by digits")
    return capsule_id


def is_writable_dir(path: Path) -> bool:
    """Whether files can be created in ``path`` (created later when missing).

    The nearest existing folder decides. Its mode bits count too, so a data folder marked
    read-only stays untouched even for root, whom ``os.access`` always allows.
    """
    probe = Path(path)
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    if not probe.is_dir():
        return False
    return os.access(probe, os.W_OK | os.X_OK) and bool(probe.stat().st_mode & 0o222)


def archive_store(
    data_dir: Path, cache_dir: Path, capsules_dir: Path | None = None, folder: str = "core_bench/capsules"
) -> Path:
    """Where archives live: ``--bench-capsules-dir``, else ``<data>/<folder>`` (the data set's: v1's
    ``core_bench/capsules``, a v1.1 set's ``core_bench/<set>/capsules``) when writable, else ``<cache>/<folder>``
    (v1: ``<cache>/capsules``)."""
    if capsules_dir is not None:
        return Path(capsules_dir)
    preferred = Path(data_dir) / folder
    if is_writable_dir(preferred):
        return preferred
    fallback = folder.removeprefix("core_bench/")
    return Path(cache_dir) / fallback


# --------------------------------------------------------------------------- safe extraction


def _normalized_parts(name: str) -> list[str]:
    return [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]


def _inside(path: str, top: str) -> bool:
    """Whether a normalized archive path lies in ``top`` (or is ``top``)."""
    return path == top or path.startswith(top + "/")


def member_problem(member: tarfile.TarInfo, top: str) -> str | None:
    """Why ``member`` must not be extracted into capsule folder ``top``, or None when it is fine."""
    name = member.name
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    parts = _normalized_parts(name)
    if ".." in parts:
        return "path contains '..'"
    if not parts:
        return None if member.isdir() else "entry without a name"
    if parts[0] != top:
        return f"outside the single top-level folder {top}/"
    if len(parts) == 1 and not member.isdir():
        return f"the top-level entry {top} is not a folder"
    if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        return "device or special file"
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return "unsupported entry type"
    if member.issym() or member.islnk():
        target = member.linkname
        if target.startswith(("/", "\\")):
            return f"link to absolute path {target!r}"
        base = posixpath.dirname("/".join(parts)) if member.issym() else ""
        resolved = posixpath.normpath(posixpath.join(base, target))
        if resolved.startswith("../") or resolved == ".." or not _inside(resolved, top):
            return f"link {target!r} points outside the capsule"
    return None


def safe_extract(archive: Path, dest: Path, capsule_id: str, name: str | None = None) -> Path:
    """Unpack ``archive`` into ``dest/<name>`` (default ``dest/<capsule_id>``) atomically and return that folder.

    Every member is checked first; one bad member rejects the whole archive, naming it.
    """
    archive, dest = Path(archive), Path(dest)
    final = dest / (name or capsule_id)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        tar = tarfile.open(archive, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise CapsuleError(f"{archive} is not a readable tar archive ({exc})") from exc
    with tar:
        try:
            members = tar.getmembers()
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise CapsuleError(f"{archive} is truncated or corrupt ({exc})") from exc
        top = capsule_id  # the one top-level folder every member must be in
        if not members:
            raise CapsuleError(f"{archive} is an empty archive")
        for member in members:
            problem = member_problem(member, top)
            if problem:
                raise CapsuleError(
                    f"unsafe archive {archive}: member {member.name!r}: {problem}; refusing to extract it"
                )
        staging = Path(tempfile.mkdtemp(prefix=f".{capsule_id}-", dir=dest))
        try:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(staging, members=members, filter="data")
            else:  # Python < 3.11.4: our own checks above are the guard
                tar.extractall(staging, members=members)
            if final.exists():  # another process finished first; its copy is as good as ours
                return final
            os.replace(staging / top, final)
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise CapsuleError(f"extracting {archive} failed ({exc}); delete it so it is downloaded again") from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final


# --------------------------------------------------------------------------- getting a capsule


def _unavailable(capsule_id: str, url: str, store: Path, why: str) -> CapsuleError:
    return CapsuleError(
        f"capsule {capsule_id} is not available: {why}. Download {url} and put it in {store}/ "
        f"(as {capsule_id}.tar.gz), or point --bench-capsules-dir at a folder that has it."
    )


STAGED, CACHED, EXTRACTED = "staged", "cached", "extracted"  # a record's capsule_source


class Capsule(NamedTuple):
    folder: Path  # the unpacked capsule (code/, data/, results/, ...)
    source: str  # staged (the user's unpacked folder), cached (unpacked by an earlier run) or extracted (now)
    sha256: str | None  # of the tarball it was unpacked from (None for a staged folder)


def prepare_capsule(
    capsule_id: str,
    store: Path,
    extract_root: Path,
    *,
    sha256: str | None = None,
    published: str | None = None,
    retries: int = 3,
    backoff: float = 1.0,
    timeout: float = 60,
) -> Capsule:
    """The unpacked capsule and where it came from, fetched and unpacked when needed.

    A folder ``<store>/<id>/`` (upstream's own layout, staged by the user) is used as is. Otherwise the
    tarball ``<store>/<id>.tar.gz`` (downloaded when missing) is unpacked into ``<extract_root>/<id>-<sha>/``,
    keyed by its sha256: a replaced tarball is unpacked again, and the copies of other tarballs of the capsule
    are removed. A failure (download, unsafe or corrupt archive) leaves nothing behind and raises."""
    check_capsule_id(capsule_id)
    store, extract_root = Path(store), Path(extract_root)
    url = capsule_url(capsule_id, published)
    if (store / capsule_id).is_dir():
        return Capsule(store / capsule_id, STAGED, None)
    archive = store / f"{capsule_id}.tar.gz"
    if not archive.is_file() and offline():
        raise _unavailable(capsule_id, url, store, f"it is not in {store} and downloads are off (${OFFLINE_ENV})")
    if not archive.is_file():
        try:
            download(url, archive, sha256, retries=retries, backoff=backoff, timeout=timeout)
        except (DataError, OSError) as exc:
            raise _unavailable(capsule_id, url, store, f"download failed ({exc})") from exc
    digest = archive_sha256(archive, extract_root)
    if sha256 is not None and digest != sha256:
        raise _unavailable(capsule_id, url, store, f"{archive} does not match its sha256 {sha256}; delete it")
    entry = extract_root / entry_name(capsule_id, digest)
    if entry.is_dir():
        return Capsule(entry, CACHED, digest)
    try:
        folder = safe_extract(archive, extract_root, capsule_id, name=entry.name)
    except CapsuleError as exc:
        raise _unavailable(capsule_id, url, store, str(exc)) from exc
    remove_other_copies(extract_root, capsule_id, keep=entry)
    return Capsule(folder, EXTRACTED, digest)


def ensure_capsule(capsule_id: str, store: Path, extract_root: Path, **kwargs) -> Path:
    """The unpacked capsule folder (see :func:`prepare_capsule`)."""
    return prepare_capsule(capsule_id, store, extract_root, **kwargs).folder


def entry_name(capsule_id: str, digest: str) -> str:
    """The folder, under the extraction cache, of the capsule unpacked from the tarball of sha256 ``digest``."""
    return f"{capsule_id}-{digest[:24]}"


def remove_other_copies(extract_root: Path, capsule_id: str, keep: Path) -> None:
    """Copies of the capsule unpacked from other tarballs (and the unkeyed copy of older versions): stale."""
    for path in Path(extract_root).glob(f"{capsule_id}*"):
        if path != keep and path.is_dir() and (path.name == capsule_id or path.name.startswith(capsule_id + "-")):
            shutil.rmtree(path, ignore_errors=True)


def digest_stamp(archive: Path, extract_root: Path) -> Path:
    return Path(extract_root) / f"{archive.name}.sha256"


def archive_sha256(archive: Path, extract_root: Path) -> str:
    """The tarball's sha256, remembered by its fingerprint (path, inode, size, mtime, ctime: a replaced or
    rewritten tarball has another) in a stamp signed with the machine secret, so a tarball of several GB is
    hashed once, not once per run."""
    remembered = stamped_sha256(archive, extract_root)
    if remembered is not None:
        return remembered
    digest = sha256_of(archive)
    message = "|".join(str(part) for part in fingerprint(archive)) + "|" + digest
    mac = sign(message)
    if mac is not None:
        try:
            Path(extract_root).mkdir(parents=True, exist_ok=True)
            write_atomic(digest_stamp(archive, extract_root), json.dumps({"sha256": digest, "mac": mac}))
        except OSError:
            pass  # a read-only cache only costs a re-hash next time
    return digest


def stamped_sha256(archive: Path, extract_root: Path) -> str | None:
    """The sha256 the stamp remembers for the tarball as it is now; None when there is no valid stamp."""
    try:
        data = json.loads(digest_stamp(archive, extract_root).read_text())
        digest = data["sha256"]
        message = "|".join(str(part) for part in fingerprint(archive)) + "|" + str(digest)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return digest if isinstance(digest, str) and signed(message, data.get("mac")) else None


def at_hand(capsule_id: str, store: Path) -> bool:
    """Whether the capsule is in the store (an unpacked folder or its tarball): nothing to download."""
    return (Path(store) / capsule_id).is_dir() or (Path(store) / f"{capsule_id}.tar.gz").is_file()


def download_problem(url: str, timeout: float = 15) -> str | None:
    """Why ``url`` cannot be downloaded now (HTTP status, unreachable host), or None when a HEAD request finds
    it: one cheap request per missing capsule instead of a failed download per item."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return None
    except urllib.error.HTTPError as exc:
        if exc.code in (405, 501):  # a host that answers no HEAD says nothing against the download
            return None
        return f"HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return str(getattr(exc, "reason", None) or exc)


def unpacked_capsule(capsule_id: str, store: Path, extract_root: Path) -> Path | None:
    """The capsule's folder when it is at hand without hashing or unpacking anything (staged, or unpacked from
    the tarball as it is now): what collection may look at. None otherwise."""
    staged = Path(store) / capsule_id
    if staged.is_dir():
        return staged
    archive = Path(store) / f"{capsule_id}.tar.gz"
    digest = stamped_sha256(archive, extract_root) if archive.is_file() else None
    entry = Path(extract_root) / entry_name(capsule_id, digest) if digest else None
    return entry if entry is not None and entry.is_dir() else None
