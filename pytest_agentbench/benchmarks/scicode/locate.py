"""Where a run's targets come from, decided once per process before the first step is scored.

* ``--bench-h5 PATH`` or a ``test_data.h5`` in the data dir: the official file (checksum verified once,
  remembered by size and mtime) or, with ``--bench-allow-custom-data``, a custom file;
* neither, on the validation split: rebuilt from the ground truth, once per problem, into the cache
  folder, under a file lock so that xdist workers share the work and the result;
* neither, otherwise: missing, and every step with code ends as ``eval_error`` saying where to get it.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from ...core.data import DataError, find, verify
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
        if self.source.kind != "rebuilt":
            return self.source
        if number in self.steps:
            return self.steps[number]
        return Targets(None, "rebuilt", f"could not rebuild the targets of step {number}: not rebuilt")


def locate(h5: Path | None, data_dir: Path, cache_dir: Path | None, split: str, *, verified: bool) -> Targets:
    """The targets file of a run (``path`` None when rebuilt or missing); ConfigError for a bad file."""
    if h5 is not None:
        path = Path(h5)
        if not path.is_file():
            raise ConfigError(f"--bench-h5 {path} does not exist")
        if not verified:
            return Targets(path, "custom")
        try:
            return Targets(verify(path, dataset.H5_FILE, cache_dir), "official")
        except DataError as exc:
            raise ConfigError(f"{exc} To score against a file of your own, add --bench-allow-custom-data.") from None
    found = find(data_dir, dataset.H5_FILE)
    if found is not None:
        if not verified:
            return Targets(found, "custom")
        try:
            return Targets(verify(found, dataset.H5_FILE, cache_dir), "official")
        except DataError as exc:
            raise ConfigError(str(exc)) from None
    if split == "validation":
        return Targets(None, "rebuilt")
    where = data_dir / dataset.SUBDIR
    return Targets(None, "missing", H5_HELP.format(url=dataset.H5_FILE.url, sha=dataset.H5_FILE.sha256, where=where)
                   + "; for the validation split alone, targets can be rebuilt from ground truth "
                     "(--bench-split=validation)")


def rebuilt_table(problems: Iterable[dict[str, Any]], cache_dir: Path, *, data_dir: Path | None,
                  limits: Limits | None = None, timeout: float = 1800, executor: str = "fork") -> TargetTable:
    """Targets of ``problems`` rebuilt from their ground truth (each problem once, shared through the cache).

    Problems another process is building are left for last, so xdist workers build different problems
    at the same time and then wait only for the ones still under way."""
    folder = Path(cache_dir).joinpath(*REBUILT_FOLDER)
    folder.mkdir(parents=True, exist_ok=True)
    steps: dict[str, Targets] = {}
    busy = []
    for problem in problems:
        built = build_problem(problem, folder, data_dir=data_dir, limits=limits, timeout=timeout,
                              executor=executor, wait=False)
        if built is None:
            busy.append(problem)
        else:
            steps.update(built)
    for problem in busy:
        steps.update(build_problem(problem, folder, data_dir=data_dir, limits=limits, timeout=timeout,
                                   executor=executor, wait=True) or {})
    return TargetTable(Targets(None, "rebuilt"), steps)


def build_problem(problem: dict[str, Any], folder: Path, *, data_dir: Path | None, limits: Limits | None,
                  timeout: float, executor: str, wait: bool) -> dict[str, Targets] | None:
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
        if report_path.is_file() and path.is_file():
            report = json.loads(report_path.read_text())
        else:
            try:
                report = rebuild_targets([problem], path, timeout=timeout, limits=limits, executor=executor,
                                         data_dir=data_dir)
            except RebuildError as exc:  # e.g. a problem without steps: every step says why
                report = {str(s["step_number"]): str(exc) for s in problem.get("sub_steps", [])}
            write_atomic(report_path, json.dumps(report))
    out = {}
    for step in problem.get("sub_steps", []):
        number = str(step["step_number"])
        status = report.get(number, "not rebuilt")
        out[number] = (Targets(path, "rebuilt") if status == "ok" else
                       Targets(None, "rebuilt", f"could not rebuild the targets of step {number}: {status}"))
    return out
