"""The official targets from the reference system's data archive (``--bench-set data_url``).

When the official ``test_data.h5`` is absent and a run needs the official targets (a test-split item is
selected, or ``--bench-targets=official`` asks for them), the ZIP at ``--bench-set data_url`` is downloaded
(``core.data.download``: resumable, retried,
with progress) and only its ``test_data.h5`` is extracted: streamed into a temporary file next to its
destination, checked against the pinned sha256 (refused with both sums unless custom data is allowed),
then renamed into place. No other member is written, so a hostile archive (absolute paths, ``..``,
links) cannot write outside the data folder. The destination is ``<data dir>/scicode/``, or
``<cache dir>/scicode/`` when the data dir is read-only. Offline mode ($AGENTBENCH_OFFLINE) forbids it:
with ``--bench-targets=auto`` the run then goes on without the file (every step with code is an
eval_error saying where to get it); with ``--bench-targets=official`` it is a usage error (``fetch_h5``
itself refuses to download offline).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from ...core.data import OFFLINE_ENV, DataError, download, sha256_of
from . import dataset

ARCHIVE_NAME = "scicode-data.zip"


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "") in ("1", "true", "yes")


def writable(folder: Path) -> bool:
    """Whether files can be created in ``folder`` (created when missing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".agentbench-write-test-"):
            return True
    except OSError:
        return False


def destination(data_dir: Path, cache_dir: Path | None) -> Path:
    """The folder the h5 goes into: the data dir's scicode/ folder, else the cache dir's when read-only."""
    first = Path(data_dir) / dataset.SUBDIR
    if writable(first):
        return first
    if cache_dir is not None and writable(Path(cache_dir) / dataset.SUBDIR):
        return Path(cache_dir) / dataset.SUBDIR
    raise DataError(f"cannot write the official targets: neither {first} nor the cache folder is writable")


def h5_member(archive: zipfile.ZipFile, url: str) -> zipfile.ZipInfo:
    """The archive's test_data.h5 (at any depth; a path with '..' or an absolute one is not considered)."""
    found = []
    for info in archive.infolist():
        path = PurePosixPath(info.filename.replace("\\", "/"))
        if info.is_dir() or path.name != dataset.H5_FILE.name or path.is_absolute() or ".." in path.parts:
            continue
        found.append(info)
    if not found:
        raise DataError(f"the archive from {url} holds no {dataset.H5_FILE.name}")
    return min(found, key=lambda i: len(PurePosixPath(i.filename).parts))  # the shallowest one


def fetch_h5(url: str, data_dir: Path, cache_dir: Path | None, *, verified: bool) -> Path:
    """Download the archive at ``url`` and extract its test_data.h5; return the h5's path.

    ``verified``: the h5 must match the pinned sha256 (else DataError naming both sums, nothing kept)."""
    pinned = dataset.H5_FILE.sha256
    if offline():
        raise DataError(
            f"the official {dataset.H5_FILE.name} is missing and downloads are off (${OFFLINE_ENV}): "
            f"download {url} and extract its {dataset.H5_FILE.name} into {Path(data_dir) / dataset.SUBDIR}, "
            f"or pass --bench-set=h5=PATH"
        )
    folder = destination(Path(data_dir), cache_dir)
    zip_path = folder / ARCHIVE_NAME
    try:
        download(url, zip_path)
    except DataError as exc:
        raise DataError(
            f"the official {dataset.H5_FILE.name} is missing and the data archive could not be "
            f"downloaded from {url}: {exc}. Download it by hand and extract its "
            f"{dataset.H5_FILE.name} into {folder}, or pass --bench-set=h5=PATH"
        ) from exc
    dest = folder / dataset.H5_FILE.name
    try:
        with zipfile.ZipFile(zip_path) as archive:
            member = h5_member(archive, url)
            fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}-", suffix=".part", dir=folder)
            try:
                with archive.open(member) as src, os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                actual = sha256_of(Path(tmp))
                if verified and actual != pinned:
                    raise DataError(
                        f"the {dataset.H5_FILE.name} in the archive {url} is not the official file: "
                        f"sha256 {actual}, expected {pinned}; it was not kept (a file of your own: "
                        f"--bench-set=allow_custom_data=true)"
                    )
                os.replace(tmp, dest)
            finally:
                Path(tmp).unlink(missing_ok=True)
    except zipfile.BadZipFile as exc:
        raise DataError(f"the data archive from {url} is not a valid ZIP file ({exc}); it was deleted") from None
    finally:
        zip_path.unlink(missing_ok=True)  # about 1 GB: only the h5 is kept
    return dest
