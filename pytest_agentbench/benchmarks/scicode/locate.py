"""Where a run's targets come from, decided once per process before the first step is scored.

* ``--bench-h5 PATH`` or a ``test_data.h5`` in the data dir: the official file (checksum verified once,
  remembered by size and mtime) or, with ``--bench-allow-custom-data``, a custom file;
* neither, when the official targets are needed (a test-split item, or ``--bench-targets=official``):
  fetched from the data archive (archive.py; ``bench.find_targets`` decides, ``locate`` is given the fetch);
* neither, on the validation split (or ``--bench-targets=rebuilt``): rebuilt from the ground truth, once per problem, into the cache
  folder, under a file lock so that xdist workers share the work and the result;
* nothing a child could have written is trusted later: the official file's fingerprint (inode, size,
  mtime, ctime) is taken when its checksum is checked and compared again before every step (a change
  means a re-hash); a rebuilt file's sha256 is signed with the machine secret in its manifest
  (``core.data.sign``) and kept in memory, and the file is re-hashed against it before every step;
* neither, otherwise: missing, and every step with code ends as ``eval_error`` saying where to get it.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from ...core.data import DataError, find, fingerprint, sha256_of, sign, signed, verify
from ...core.errors import ConfigError
from ...core.io import write_atomic
from . import dataset

if TYPE_CHECKING:
    from ...sandbox.executors import Limits

REBUILT_NOTE = "targets rebuilt from ground truth, not the official file"
H5_HELP = ("the official test_data.h5 is missing: download it from {url} (sha256 {sha}) into {where}, "
           "or pass --bench-h5 PATH")
REBUILT_FOLDER = ("scicode", "rebuilt-targets")  # under the cache folder


@dataclass(frozen=True)
class Targets:
    path: Path | None
    kind: str  # official, custom, rebuilt, missing
    message: str = ""
    sha256: str | None = None  # the content this run trusts (official: the pin; rebuilt: as built)
    stamp: tuple | None = None  # core.data.fingerprint of the file when its sha256 was last checked

    def checked(self) -> "Targets":
        """These targets if the file is still the one that was checked, else a ``path``-less Targets whose
        message says why (the step then ends as eval_error). Cheap when nothing changed: the official
        file is re-hashed only when its fingerprint moved; a rebuilt file (small) is re-hashed every time."""
        if self.path is None or self.sha256 is None:
            return self
        try:
            if self.kind != "rebuilt" and self.stamp is not None and fingerprint(self.path) == self.stamp:
                return self
            actual = sha256_of(self.path)
        except OSError as exc:
            return Targets(None, self.kind, f"agentbench: the targets file {self.path} cannot be read: {exc}")
        if actual == self.sha256:
            return self
        return Targets(None, self.kind, changed_message(self.path, self.sha256, actual))

    def read_step(self, number: str) -> list:
        """The decoded targets of step ``number``, read from bytes checked against ``sha256`` (no window
        between the check and the read) for a rebuilt file; from the checked file otherwise."""
        from . import h5codec  # why: it loads h5py; only scoring reads targets

        current = self.checked()
        if current.path is None:
            raise h5codec.TargetsError(current.message)
        if self.kind != "rebuilt" or self.sha256 is None:
            return h5codec.read_step_targets(self.path, number)
        import hashlib  # why: only a rebuilt file is hashed from memory
        import io  # why: as hashlib

        import h5py  # why: as h5codec

        data = Path(self.path).read_bytes()
        actual = hashlib.sha256(data).hexdigest()
        if actual != self.sha256:
            raise h5codec.TargetsError(changed_message(self.path, self.sha256, actual))
        with h5py.File(io.BytesIO(data), "r") as fh:
            return h5codec.read_step_targets(fh, number)

    def note(self) -> str | None:
        """What the report header says about these targets (None for the official file)."""
        if self.kind == "rebuilt":
            return REBUILT_NOTE
        if self.kind == "missing":
            return self.message
        if self.kind == "custom":
            return f"custom targets file {self.path} (checksum not verified)"
        return None


@dataclass(frozen=True)
class TargetTable:
    """The targets of every step of a run: one file for all, or one rebuilt file per problem."""

    source: Targets
    steps: Mapping[str, Targets] = field(default_factory=dict)  # step number -> its rebuilt targets

    @classmethod
    def file(cls, path: Path, kind: str = "custom") -> "TargetTable":
        """Every step read from one h5 file (``kind`` "official" when it is the verified official file)."""
        return cls(Targets(Path(path), kind))

    def for_step(self, number: str) -> Targets:
        """The targets of step ``number``, re-checked against the digest this process holds (see
        :meth:`Targets.checked`)."""
        if self.source.kind != "rebuilt":
            return self.source.checked()
        if number in self.steps:
            return self.steps[number].checked()
        return Targets(None, "rebuilt", f"could not rebuild the targets of step {number}: not rebuilt")


def changed_message(path: Path, expected: str, actual: str) -> str:
    return (f"agentbench: the targets file {path} changed after its checksum was checked (sha256 {actual}, "
            f"expected {expected}): it is not trusted. Something wrote to it during the run; delete it "
            "(rebuilt targets are then rebuilt) or restore the official file")


def official(path: Path, stamp_dir: Path | None) -> Targets:
    """The verified official file, with its fingerprint taken right after the check."""
    checked = verify(path, dataset.H5_FILE, stamp_dir)
    return Targets(checked, "official", sha256=dataset.H5_FILE.sha256, stamp=fingerprint(checked))


def locate(h5: Path | None, data_dir: Path, cache_dir: Path | None, split: str, *, verified: bool,
           fetch: Callable[[], Path] | None = None) -> Targets:
    """The targets file of a run (``path`` None when rebuilt or missing); ConfigError for a bad file.

    ``fetch``: when the official file is in neither the data dir nor the cache dir, get it this way
    (``archive.fetch_h5`` from --bench-data-url; given only when the run needs the official targets, so
    a validation split given a fetch never falls back to the rebuild)."""
    if h5 is not None:
        path = Path(h5)
        if not path.is_file():
            raise ConfigError(f"--bench-h5 {path} does not exist")
        if not verified:
            return Targets(path, "custom")
        try:
            return official(path, cache_dir)
        except DataError as exc:
            raise ConfigError(f"{exc} To score against a file of your own, add --bench-allow-custom-data.") from None
    found = find(data_dir, dataset.H5_FILE)
    if found is None and cache_dir is not None:  # extracted there from the archive when data_dir is read-only
        found = find(Path(cache_dir), dataset.H5_FILE)
    if found is None and fetch is not None:
        try:
            found = fetch()
        except DataError as exc:
            raise ConfigError(str(exc)) from None
    if found is not None:
        if not verified:
            return Targets(found, "custom")
        try:
            return official(found, cache_dir)
        except DataError as exc:
            raise ConfigError(str(exc)) from None
    if split == "validation":
        return Targets(None, "rebuilt")
    where = data_dir / dataset.SUBDIR
    return Targets(None, "missing", H5_HELP.format(url=dataset.H5_FILE.url, sha=dataset.H5_FILE.sha256, where=where)
                   + "; for the validation split alone, targets can be rebuilt from ground truth "
                     "(--bench-split=validation)")


def rebuilt_table(problems: Iterable[dict[str, Any]], cache_dir: Path, *, data_dir: Path | None,
                  limits: Limits | None = None, timeout: float = 1800) -> TargetTable:
    """Targets of ``problems`` rebuilt from their ground truth (each problem once, shared through the cache).

    Problems another process is building are left for last, so xdist workers build different problems
    at the same time and then wait only for the ones still under way."""
    folder = Path(cache_dir).joinpath(*REBUILT_FOLDER)
    folder.mkdir(parents=True, exist_ok=True)
    steps: dict[str, Targets] = {}
    busy = []
    for problem in problems:
        built = build_problem(problem, folder, data_dir=data_dir, limits=limits, timeout=timeout, wait=False)
        if built is None:
            busy.append(problem)
        else:
            steps.update(built)
    for problem in busy:
        steps.update(build_problem(problem, folder, data_dir=data_dir, limits=limits, timeout=timeout,
                                   wait=True) or {})
    return TargetTable(Targets(None, "rebuilt"), steps)


def build_problem(problem: dict[str, Any], folder: Path, *, data_dir: Path | None, limits: Limits | None,
                  timeout: float, wait: bool) -> dict[str, Targets] | None:
    """The rebuilt targets of each step of ``problem`` (built now unless the cache has them); None when
    ``wait`` is false and another process holds the problem's lock."""
    from .targets import RebuildError, rebuild_targets  # why: it loads h5py and numpy; only a rebuild needs them

    digest = hashlib.sha256(json.dumps(problem, sort_keys=True).encode()).hexdigest()[:16]
    path = folder / f"{problem['problem_id']}-{digest}.h5"
    report_path = path.with_suffix(".json")
    with open(folder / f".{path.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        cached = trusted_manifest(path, report_path)
        if cached is not None:
            report, digest = cached
        else:
            path.unlink(missing_ok=True)  # never merge into a file that is not ours
            try:
                report = rebuild_targets([problem], path, timeout=timeout, limits=limits, data_dir=data_dir)
            except RebuildError as exc:  # e.g. a problem without steps: every step says why
                report = {str(s["step_number"]): str(exc) for s in problem.get("sub_steps", [])}
            digest = sha256_of(path) if path.is_file() else None
            write_atomic(report_path, json.dumps(manifest(path, report, digest)))
    out = {}
    for step in problem.get("sub_steps", []):
        number = str(step["step_number"])
        status = report.get(number, "not rebuilt")
        out[number] = (Targets(path, "rebuilt", sha256=digest) if status == "ok" and digest else
                       Targets(None, "rebuilt", f"could not rebuild the targets of step {number}: {status}"))
    return out


def manifest_message(path: Path, report: Mapping[str, str], digest: str | None) -> str:
    return f"rebuilt-targets|{path.name}|{digest}|{json.dumps(report, sort_keys=True)}"


def manifest(path: Path, report: Mapping[str, str], digest: str | None) -> dict[str, Any]:
    """What a rebuild remembers next to its file: the per-step report, the file's sha256 and their HMAC
    under the machine secret (only the trusted process that built the file can write a valid one)."""
    return {"report": dict(report), "sha256": digest, "mac": sign(manifest_message(path, report, digest))}


def trusted_manifest(path: Path, report_path: Path) -> tuple[dict[str, str], str | None] | None:
    """(report, sha256) of a cached rebuild when its manifest is signed by this machine and the file still
    has that sha256; None otherwise (missing, from an older version, forged, or the file changed):
    the problem is then rebuilt."""
    try:
        data = json.loads(report_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("report"), dict):
        return None
    report, digest = data["report"], data.get("sha256")
    if not signed(manifest_message(path, report, digest), data.get("mac")):
        return None
    if digest is not None:
        try:
            if sha256_of(path) != digest:
                return None
        except OSError:
            return None
    return report, digest
