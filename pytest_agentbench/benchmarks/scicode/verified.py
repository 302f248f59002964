"""SciCode-Verified (``--bench-dataset=verified``): an audited release of SciCode's test split, bound to its manifest.

The dataset lives in ``<data dir>/scicode_verified/`` in the repository's own layout: ``problems_test.jsonl``,
``manifest.json``, ``targets/<problem id>.json`` (the target patches), and the release asset
``test_data_cleaned.h5`` (the corrected targets) beside them. A file that is missing is downloaded: the repository's
files from ``raw.githubusercontent.com`` at ``REVISION``, the h5 from the release tagged ``data``. Before a run
every file is checked against the manifest's md5 (the JSONL, each patch, the h5) and the manifest against this
build's pins (version v2, the JSONL's and the h5's md5): any mismatch is a DataError naming the file and the fix,
so the run ends with a usage error before any item. ``--bench-set=allow_custom_data=true`` lifts the pins (a manifest of
another version, a hand-made dataset in this layout), never the manifest's own md5s.

The target patches are checked, not applied: the corrected h5 already holds every correction (the patches are
its audit trail), so the targets of a step are read from the h5 alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.data import OFFLINE_ENV, DataError, checked_md5, download, offline

REPOSITORY = "flyingwagner/scicode-verified"  # its release tagged ``data`` holds the corrected h5
# The dataset's files (JSONL, manifest, target patches) come from the repository's published copy, at the commit
# whose manifest is dataset v2 (the JSONL and h5 md5s below); every file is checked against that manifest.
FILES_REPOSITORY = "xantheocracy/scicode-verified"
REVISION: str | None = "3dfa277b3cee817083a7079148b95f029c6b4293"
RELEASE_TAG = "data"
SUBDIR = "scicode_verified"  # under the data dir, as in the repository
VERSION = "v2"
LABEL = f"scicode-verified {VERSION}"  # what the header, summary and report say
N_PROBLEMS = 64
PROBLEMS_NAME = "problems_test.jsonl"
MANIFEST_NAME = "manifest.json"
PATCH_FOLDER = "targets"
H5_NAME = "test_data_cleaned.h5"
PROBLEMS_MD5 = "07c4cd521ea60a166c05737ddfa51ac0"  # dataset v2's problems_test.jsonl
H5_MD5 = "2b41a7df40ddc23ce651ec05b8ecb6f8"  # dataset v2's test_data_cleaned.h5
H5_URL = f"https://github.com/{REPOSITORY}/releases/download/{RELEASE_TAG}/{H5_NAME}"
REPOSITORY_URL = f"https://github.com/{REPOSITORY}"


@dataclass(frozen=True)
class Manifest:
    """The manifest's facts this build checks (``custom``: they are not dataset v2's pins)."""

    path: Path
    version: str
    n_problems: int
    problems_md5: str
    targets_md5: dict[str, str]
    targets_set_md5: str
    h5_md5: str
    custom: bool

    @property
    def label(self) -> str:
        return f"scicode-verified {self.version}" + (" (custom manifest)" if self.custom else "")


def folder(data_dir: Path) -> Path:
    return Path(data_dir) / SUBDIR


def raw_url(name: str) -> str | None:
    """Where a repository file is downloaded from (None: no revision pinned)."""
    return f"https://raw.githubusercontent.com/{FILES_REPOSITORY}/{REVISION}/{SUBDIR}/{name}" if REVISION else None


def source_of(name: str) -> str:
    """Where a user gets ``name`` by hand."""
    if name == H5_NAME:
        return f"{H5_URL} (the release tagged {RELEASE_TAG})"
    return raw_url(name) or f"the {SUBDIR}/ folder of {REPOSITORY_URL}"


def fetched(data_dir: Path, name: str) -> Path:
    """``<data dir>/scicode_verified/<name>``, downloaded when missing (DataError when it cannot be had)."""
    path = folder(data_dir) / name
    if path.is_file():
        return path
    url = H5_URL if name == H5_NAME else raw_url(name)
    fix = f"download it from {source_of(name)} and put it at {path}, or point --bench-data-dir at a folder that has it"
    if offline():
        raise DataError(f"SciCode-Verified: {path} is missing and downloads are off (${OFFLINE_ENV}=1): {fix}")
    if url is None:
        raise DataError(
            f"SciCode-Verified: {path} is missing, and this build pins no revision of {REPOSITORY} to download "
            f"it from: {fix} (take every file of the manifest's dataset version from one revision)"
        )
    try:
        return download(url, path)
    except DataError as exc:
        raise DataError(f"SciCode-Verified: {path} is missing and could not be downloaded ({exc}): {fix}") from None


def check(path: Path, md5: str, what: str, stamp_dir: Path | None = None) -> str:
    """``path``'s sha256 when its md5 is the manifest's ``md5``, else DataError naming the file and the fix."""
    found = checked_md5(path, md5, stamp_dir)
    if found is None:
        raise DataError(
            f"SciCode-Verified: {path} does not match {MANIFEST_NAME} ({what}: md5 {md5} expected): the file is "
            f"corrupt, changed or of another dataset version; delete it so it is downloaded again, or restore it "
            f"from {source_of(what)}"
        )
    return found[1]


def load_manifest(data_dir: Path, *, custom_ok: bool) -> Manifest:
    """The manifest, its fields checked, and against dataset v2's pins unless ``custom_ok``."""
    path = fetched(data_dir, MANIFEST_NAME)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(
            f"SciCode-Verified: {path} is not a readable manifest ({exc}); delete it and fetch it again"
        ) from None
    manifest = parse_manifest(path, raw)
    if manifest.custom and not custom_ok:
        raise DataError(
            f"SciCode-Verified: {path} is not dataset {VERSION}'s manifest (version {manifest.version}, "
            f"{PROBLEMS_NAME} md5 {manifest.problems_md5}, {H5_NAME} md5 {manifest.h5_md5}; this build pins "
            f"{VERSION}, {PROBLEMS_MD5}, {H5_MD5}): restore the {VERSION} files, or pass "
            f"--bench-set=allow_custom_data=true to run on this manifest's files (the report then says the manifest "
            f"is custom)"
        )
    return manifest


def parse_manifest(path: Path, raw: Any) -> Manifest:
    fields = ("version", "problems_test_jsonl_md5", "targets_md5", "h5_md5")
    if not isinstance(raw, dict) or any(k not in raw for k in fields) or not isinstance(raw["targets_md5"], dict):
        raise DataError(
            f"SciCode-Verified: {path} is not a SciCode-Verified manifest (it needs {', '.join(fields)}); "
            f"delete it and fetch it again"
        )
    manifest = Manifest(
        path=path,
        version=str(raw["version"]),
        n_problems=int(raw.get("n_problems") or 0),
        problems_md5=str(raw["problems_test_jsonl_md5"]),
        targets_md5={str(k): str(v) for k, v in raw["targets_md5"].items()},
        targets_set_md5=str(raw.get("targets_set_md5") or ""),
        h5_md5=str(raw["h5_md5"]),
        custom=False,
    )
    pinned = (manifest.version, manifest.problems_md5, manifest.h5_md5) == (VERSION, PROBLEMS_MD5, H5_MD5)
    return manifest if pinned else Manifest(**{**manifest.__dict__, "custom": True})


def patch_name(problem_id: str) -> str:
    return f"{PATCH_FOLDER}/{problem_id}.json"


def load_files(data_dir: Path, *, custom_ok: bool) -> tuple[Manifest, Path]:
    """The manifest and the problems file, every patch checked: DataError at the first mismatch."""
    manifest = load_manifest(data_dir, custom_ok=custom_ok)
    problems = fetched(data_dir, PROBLEMS_NAME)
    check(problems, manifest.problems_md5, PROBLEMS_NAME)
    for problem_id, md5 in sorted(manifest.targets_md5.items()):
        name = patch_name(problem_id)
        check(fetched(data_dir, name), md5, name)
    return manifest, problems


def check_count(manifest: Manifest, problems: list[Any]) -> None:
    """The JSONL holds the manifest's number of problems (64 in v2)."""
    expected = manifest.n_problems or N_PROBLEMS
    if len(problems) != expected:
        raise DataError(
            f"SciCode-Verified: {manifest.path.parent / PROBLEMS_NAME} has {len(problems)} problems, the manifest "
            f"says {expected}: restore the files of one dataset version"
        )


def h5_file(data_dir: Path, manifest: Manifest, stamp_dir: Path | None, h5: Path | None = None) -> tuple[Path, str]:
    """The corrected targets (``h5``, else the data dir's, downloaded from the release when missing) and their
    sha256, checked against the manifest's md5 (DataError otherwise)."""
    path = Path(h5) if h5 is not None else fetched(data_dir, H5_NAME)
    if not path.is_file():
        raise DataError(f"SciCode-Verified: --bench-set h5 {path} does not exist")
    return path, check(path, manifest.h5_md5, H5_NAME, stamp_dir)
