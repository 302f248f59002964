"""Where a run's targets come from, decided once per process before the first step is scored.

* ``--bench-set h5 PATH`` or a ``test_data.h5`` in the data dir: the official file (checksum verified once,
  remembered by size and mtime) or, with ``--bench-set=allow_custom_data=true``, a custom file;
* neither, when the official targets are needed (a test-split item, or ``--bench-targets=official``):
  fetched from the data archive (archive.py; ``bench.find_targets`` decides, ``locate`` is given the fetch);
* neither, on the validation split (or ``--bench-targets=rebuilt``): rebuilt from the ground truth, per problem
  when its first step reaches the process (``RebuiltTable``), under a file lock; stored in the cache folder
  (keyed by the problem's data and the numpy/scipy/h5py versions) only when every step rebuilt: a failure
  is never cached (docs/runs.md);
* nothing a child could have written is trusted later: the official file's fingerprint (inode, size,
  mtime, ctime) is taken when its checksum is checked and compared again before every step (a change
  means a re-hash); a rebuilt file's sha256 is signed with the cache folder's secret in its manifest
  (``core.data.sign``) and kept in memory, and the file is re-hashed against it before every step;
* neither, otherwise: missing, and every step with code ends as ``eval_error`` saying where to get it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import platform
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.data import DataError, find, fingerprint, sha256_of, sign, signed, verify
from ...core.errors import ConfigError
from ...core.io import write_atomic
from . import dataset

if TYPE_CHECKING:
    from ...sandbox.executors import Limits
    from ...sandbox.interpreter import Python

REBUILT_NOTE = "targets rebuilt from ground truth, not the official file"
H5_HELP = (
    "the official test_data.h5 is missing: download it from {url} (sha256 {sha}) into {where}, "
    "or pass --bench-set=h5=PATH"
)
REBUILT_FOLDER = ("scicode", "rebuilt-targets")  # under the cache folder


@dataclass(frozen=True)
class Targets:
    path: Path | None
    kind: str  # official, custom, rebuilt, missing
    message: str = ""
    sha256: str | None = None  # the content this run trusts (official: the pin; rebuilt: as built)
    stamp: tuple | None = None  # core.data.fingerprint of the file when its sha256 was last checked
    # where a rebuilt step's targets came from: "rebuilt" (built by this process) or "cached" (an entry of the
    # cache); other kinds are their own source. The record's ``targets_source``.
    origin: str = ""
    status: str = "eval_error"  # what a step without targets (``path`` None) ends as: env_error when the
    # environment, not the data, kept them from being had (retried by the next run, never cached)
    # a rebuild that is not stored (a step of the problem failed) is held in memory only, never in the cache
    content: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def source(self) -> str:
        return self.origin or self.kind

    def checked(self) -> Targets:
        """These targets if the file is still the one that was checked, else a ``path``-less Targets whose
        message says why (the step then ends as eval_error). Cheap when nothing changed: the official
        file is re-hashed only when its fingerprint moved; a rebuilt file (small) is re-hashed every time."""
        if self.path is None or self.sha256 is None or self.content is not None:
            return self  # (bytes in memory: nothing anyone else can write)
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
        path = current.path
        if path is None:
            raise h5codec.TargetsError(current.message)
        if self.kind != "rebuilt" or self.sha256 is None:
            return h5codec.read_step_targets(path, number)
        import hashlib  # why: only a rebuilt file is hashed from memory
        import io  # why: as hashlib

        import h5py  # why: as h5codec

        data = self.content if self.content is not None else Path(path).read_bytes()
        actual = hashlib.sha256(data).hexdigest()
        if actual != self.sha256:
            raise h5codec.TargetsError(changed_message(path, self.sha256, actual))
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
    def file(cls, path: Path, kind: str = "custom") -> TargetTable:
        """Every step read from one h5 file (``kind`` "official" when it is the verified official file)."""
        return cls(Targets(Path(path), kind))

    def prepare_step(self, number: str) -> None:
        """Nothing to prepare: the targets are at hand (see :meth:`RebuiltTable.prepare_step`)."""

    def forget_failures(self, problem_id: str) -> None:
        """Nothing to forget (see :meth:`RebuiltTable.forget_failures`)."""

    def for_step(self, number: str) -> Targets:
        """The targets of step ``number``, re-checked against the digest this process holds (see
        :meth:`Targets.checked`)."""
        if self.source.kind != "rebuilt":
            return self.source.checked()
        if number in self.steps:
            return self.steps[number].checked()
        return Targets(None, "rebuilt", f"could not rebuild the targets of step {number}: not rebuilt")


def changed_message(path: Path, expected: str, actual: str) -> str:
    return (
        f"agentbench: the targets file {path} changed after its checksum was checked (sha256 {actual}, "
        f"expected {expected}): it is not trusted. Something wrote to it during the run; delete it "
        "(rebuilt targets are then rebuilt) or restore the official file"
    )


def official(path: Path, stamp_dir: Path | None) -> Targets:
    """The verified official file, with its fingerprint taken right after the check."""
    checked = verify(path, dataset.H5_FILE, stamp_dir)
    return Targets(checked, "official", sha256=dataset.H5_FILE.sha256, stamp=fingerprint(checked))


def locate(
    h5: Path | None,
    data_dir: Path,
    cache_dir: Path | None,
    split: str,
    *,
    verified: bool,
    fetch: Callable[[], Path] | None = None,
) -> Targets:
    """The targets file of a run (``path`` None when rebuilt or missing); ConfigError for a bad file.

    ``fetch``: when the official file is in neither the data dir nor the cache dir, get it this way
    (``archive.fetch_h5`` from --bench-set data_url; given only when the run needs the official targets, so
    a validation split given a fetch never falls back to the rebuild)."""
    if h5 is not None:
        path = Path(h5)
        if not path.is_file():
            raise ConfigError(f"--bench-set h5 {path} does not exist")
        if not verified:
            return Targets(path, "custom")
        try:
            return official(path, cache_dir)
        except DataError as exc:
            raise ConfigError(
                f"{exc} To score against a file of your own, add --bench-set=allow_custom_data=true."
            ) from None
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
    return Targets(
        None,
        "missing",
        H5_HELP.format(url=dataset.H5_FILE.url, sha=dataset.H5_FILE.sha256, where=where)
        + "; for the validation split alone, targets can be rebuilt from ground truth "
        "(--bench-split=validation)",
    )


class RebuiltTable:
    """Targets rebuilt from the ground truth, one problem at a time, the first time one of its steps reaches this
    process (:meth:`prepare_step`, called before the step is timed, or :meth:`for_step`): a process, and so a
    host, builds only the problems it scores, and the build is in no step's ``duration`` or timeout.

    A problem's targets are shared through the cache only when every step of it rebuilt (``build_problem``);
    a failed rebuild is kept for this process's run (its steps' records say why) and tried again by the next
    run, or by a retry of a step (:meth:`forget_failures`)."""

    def __init__(
        self,
        problems: Iterable[dict[str, Any]],
        cache_dir: Path,
        *,
        data_dir: Path | None,
        limits: Limits | None = None,
        timeout: float = 1800,
        python: Python | None = None,
    ) -> None:
        """``python``: the interpreter the ground truth runs in (a grading environment's; default the running one),
        part of the cache's key through its package versions."""
        self.source = Targets(None, "rebuilt")
        self.python = python
        self.cache_dir = Path(cache_dir)
        self.folder = self.cache_dir.joinpath(*REBUILT_FOLDER)
        self.problem_of = {
            str(step["step_number"]): problem for problem in problems for step in problem.get("sub_steps", [])
        }
        self.data_dir, self.limits, self.timeout = data_dir, limits, timeout
        self.built: dict[str, dict[str, Targets]] = {}  # problem id -> step number -> its targets
        self.lock = threading.Lock()  # a step and the look-ahead of another may ask at once

    @property
    def steps(self) -> dict[str, Targets]:
        """The targets of every step built so far."""
        return {number: targets for built in self.built.values() for number, targets in built.items()}

    def prepare_step(self, number: str) -> None:
        """Build the targets of the problem of step ``number`` unless this process has them."""
        self.problem_targets(number)

    def for_step(self, number: str) -> Targets:
        """The targets of step ``number`` (its problem built first when needed), re-checked against the digest
        this process holds."""
        built = self.problem_targets(number)
        if built is None:
            return Targets(
                None,
                "rebuilt",
                f"could not rebuild the targets of step {number}: not a step of the problems of this run",
            )
        if number not in built:
            return Targets(None, "rebuilt", f"could not rebuild the targets of step {number}: not rebuilt")
        return built[number].checked()

    def problem_targets(self, number: str) -> dict[str, Targets] | None:
        problem = self.problem_of.get(str(number))
        if problem is None:
            return None
        problem_id = str(problem["problem_id"])
        with self.lock:
            if problem_id not in self.built:
                built = self.build(problem)
                assert built is not None  # (a build that waits for the cache's lock always gives the steps)
                self.built[problem_id] = built
            return self.built[problem_id]

    def build(self, problem: dict[str, Any], wait: bool = True) -> dict[str, Targets] | None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            return build_problem(
                problem,
                self.folder,
                data_dir=self.data_dir,
                limits=self.limits,
                timeout=self.timeout,
                wait=wait,
                python=self.python,
                key_dir=self.cache_dir,
            )
        except OSError as exc:  # the cache folder cannot be written: an environment failure of every step
            why = f"the cache folder {self.folder} cannot be used ({exc})"
            return {
                str(step["step_number"]): Targets(
                    None,
                    "rebuilt",
                    f"could not rebuild the targets of step {step['step_number']}: {why}",
                    status="env_error",
                )
                for step in problem.get("sub_steps", [])
            }

    def forget_failures(self, problem_id: str) -> None:
        """Forget a rebuild of ``problem_id`` that failed, so the next step asking builds it again (a retry)."""
        with self.lock:
            built = self.built.get(str(problem_id))
            if built is not None and any(t.path is None for t in built.values()):
                del self.built[str(problem_id)]


def rebuilt_table(
    problems: Iterable[dict[str, Any]],
    cache_dir: Path,
    *,
    data_dir: Path | None,
    limits: Limits | None = None,
    timeout: float = 1800,
) -> RebuiltTable:
    """The targets of ``problems`` rebuilt now, all of them (a notebook's or a tool's way; a run builds each
    problem when it reaches it, see :class:`RebuiltTable`).

    Problems another process is building are left for last, so processes sharing the cache build different
    problems at the same time and then wait only for the ones still under way."""
    problems = list(problems)
    table = RebuiltTable(problems, cache_dir, data_dir=data_dir, limits=limits, timeout=timeout)
    busy = []
    for problem in problems:
        built = table.build(problem, wait=False)
        if built is None:
            busy.append(problem)
        else:
            table.built[str(problem["problem_id"])] = built
    for problem in busy:
        table.built[str(problem["problem_id"])] = table.build(problem) or {}
    return table


# ---- the cache of rebuilt targets -------------------------------------------------------------------------
# An entry is one problem's targets, stored only when every step rebuilt: the ground truth's outputs, which the
# same inputs always give. Its key is everything that decides them (``entry_key``); a failure is never stored.

REBUILD_FORMAT = 3  # raised when the rebuild's output for the same inputs changes (the rewriting, the codec)
KEY_PACKAGES = ("numpy", "scipy", "h5py")  # the ground truth computes with them; the file is written by h5py


def package_versions() -> dict[str, str]:
    """The Python and the numpy/scipy/h5py versions of this interpreter (the rebuild's children run it too)."""
    from importlib import metadata  # why: only a rebuild asks

    out = {"python": platform.python_version()}
    for name in KEY_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def interpreter_versions(python: Python) -> dict[str, str]:
    """``package_versions`` of another interpreter the rebuild's children run (a grading environment's), and its
    path: two environments of the same versions are still two entries."""
    versions = {"python": python.versions.get("python", ""), "executable": python.executable}
    return versions | {name: python.versions.get(name, "not installed") for name in KEY_PACKAGES}


def entry_key(problem: dict[str, Any], data_dir: Path | None, python: Python | None = None) -> dict[str, Any]:
    """What decides a problem's rebuilt targets: its data (sha256 of the problem and of any prefilled code its
    steps run instead of a ground truth), the package versions and the rebuild's format."""
    data = hashlib.sha256(json.dumps(problem, sort_keys=True).encode()).hexdigest()
    prefilled = {}
    for step in problem.get("sub_steps", []):
        number = str(step["step_number"])
        f = dataset.PREFILLED_FILES.get(number)
        found = find(Path(data_dir), f) if data_dir is not None and f is not None else None
        if not step.get("ground_truth_code") and found is not None:
            prefilled[number] = sha256_of(found)
    versions = package_versions() if python is None else interpreter_versions(python)
    return {"problem_sha256": data, "prefilled": prefilled, "versions": versions, "format": REBUILD_FORMAT}


def entry_path(problem: dict[str, Any], key: Mapping[str, Any], folder: Path) -> Path:
    """``<folder>/<problem id>-<digest of the key>.h5`` (its manifest: the same name, ``.json``)."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return Path(folder) / f"{problem['problem_id']}-{digest}.h5"


def build_problem(
    problem: dict[str, Any],
    folder: Path,
    *,
    data_dir: Path | None,
    limits: Limits | None,
    timeout: float,
    wait: bool,
    python: Python | None = None,
    key_dir: Path | None = None,
) -> dict[str, Targets] | None:
    """The targets of each step of ``problem``: the cache's entry when it has a trusted one for the same key,
    else rebuilt now (stored only when every step rebuilt); None when ``wait`` is false and another process
    holds the problem's lock. Manifests are signed with the key of the cache folder ``key_dir`` (default:
    ``folder`` itself)."""
    key_dir = Path(folder) if key_dir is None else Path(key_dir)
    key = entry_key(problem, data_dir, python)
    path = entry_path(problem, key, folder)
    manifest_path = path.with_suffix(".json")
    with open(Path(folder) / f".{path.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        digest = trusted_manifest(path, manifest_path, key, key_dir)
        if digest is not None:
            return step_targets(problem, path, {}, digest, origin="cached")
        report, content = rebuild_problem(problem, data_dir=data_dir, limits=limits, timeout=timeout, python=python)
        digest = hashlib.sha256(content).hexdigest() if content else None
        if content and all_rebuilt(problem, report):
            path.unlink(missing_ok=True)
            write_atomic(path, content)  # a rename: never writes through a planted link
            write_atomic(manifest_path, json.dumps(manifest(path, key, digest, key_dir)))
            return step_targets(problem, path, report, digest, origin="rebuilt")
    return step_targets(problem, path, report, digest, origin="rebuilt", content=content)


def rebuild_problem(
    problem: dict[str, Any],
    *,
    data_dir: Path | None,
    limits: Limits | None,
    timeout: float,
    python: Python | None = None,
) -> tuple[dict[str, str], bytes | None]:
    """({step: "ok" or why not}, the bytes of the targets file, None when no step rebuilt), built in a private
    folder: nothing reaches the cache unless ``build_problem`` stores it."""
    from .targets import RebuildError, rebuild_targets  # why: it loads h5py and numpy; only a rebuild needs them

    with tempfile.TemporaryDirectory(prefix="agentbench-rebuild-") as tmp:
        out = Path(tmp) / "targets.h5"
        try:
            report = rebuild_targets([problem], out, timeout=timeout, limits=limits, data_dir=data_dir, python=python)
        except RebuildError as exc:  # e.g. a problem without steps: every step says why
            report = {str(s["step_number"]): str(exc) for s in problem.get("sub_steps", [])}
        return report, (out.read_bytes() if out.is_file() else None)


def all_rebuilt(problem: dict[str, Any], report: Mapping[str, str]) -> bool:
    return all(report.get(str(step["step_number"])) == "ok" for step in problem.get("sub_steps", []))


def step_targets(
    problem: dict[str, Any],
    path: Path,
    report: Mapping[str, str],
    digest: str | None,
    *,
    origin: str,
    content: bytes | None = None,
) -> dict[str, Targets]:
    """Each step's Targets: the file (or the bytes in memory) for a step that rebuilt, else why not. An entry
    from the cache (``report`` empty) holds every step."""
    from .targets import is_environment_failure  # why: as rebuild_problem

    out = {}
    for step in problem.get("sub_steps", []):
        number = str(step["step_number"])
        status = report.get(number, "not rebuilt") if report else "ok"
        if status == "ok" and digest:
            out[number] = Targets(path, "rebuilt", sha256=digest, origin=origin, content=content)
        else:
            out[number] = Targets(
                None,
                "rebuilt",
                f"could not rebuild the targets of step {number}: {status}",
                status="env_error" if is_environment_failure(status) else "eval_error",
            )
    return out


def manifest_message(path: Path, key: Mapping[str, Any], digest: str | None) -> str:
    return f"rebuilt-targets|{path.name}|{digest}|{json.dumps(dict(key), sort_keys=True)}"


def manifest(path: Path, key: Mapping[str, Any], digest: str | None, key_dir: Path) -> dict[str, Any]:
    """What an entry remembers next to its file: its key, the file's sha256 and their HMAC under the cache
    folder's secret (only the trusted process that built the file can write a valid one)."""
    return {"key": dict(key), "sha256": digest, "mac": sign(manifest_message(path, key, digest), key_dir)}


def trusted_manifest(path: Path, manifest_path: Path, key: Mapping[str, Any], key_dir: Path) -> str | None:
    """The sha256 of a cached entry when its manifest has this ``key``, is signed with the cache folder's secret
    and the file still has that sha256; None otherwise (missing, another key, from an older version, forged,
    or the file changed): the problem is then rebuilt."""
    try:
        data = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != dict(key) or not isinstance(data.get("sha256"), str):
        return None
    digest = data["sha256"]
    if not signed(manifest_message(path, key, digest), data.get("mac"), key_dir):
        return None
    try:
        return digest if sha256_of(path) == digest else None
    except OSError:
        return None
