"""Task packages: what one task's run sends the run's only writer, as a file in the run's spool folder.

A task (a SciCode problem's steps, one CORE-Bench capsule, one attempt of either) run away from the controller
(``python -m pytest_agentbench run-task``: a Slurm job, or any engine that runs a command) writes one
package: per item its reports' outcomes, its record and its delivery (the item's files and new model-cache
entries, exactly what an xdist worker attaches to a report). The package appears whole or not at all (written
beside its final name, then renamed). The controller, or ``collect``, takes it in with the code that takes in
xdist deliveries, then moves it to ``spool/taken/`` so it is never taken in twice.

Engine-neutral and plain: no pytest, no scheduler. Everything in a package came from another process: its
shape is checked here (``PackageError``), its paths by ``store_delivery``.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...core.io import write_atomic

SPOOL_DIR = "spool"
TAKEN_DIR = "taken"
SUFFIX = ".package.json"
SECRET_FILE = "api-key"  # the run's API key for its jobs, mode 0600, removed by collect
FORMAT = 1
MAX_PACKAGE_BYTES = 256 * 2**20  # a package file larger than this is refused unread


class PackageError(ValueError):
    """A package file that is not a whole package of this run (damaged, foreign, too large)."""


def spool_dir(run_dir: Path) -> Path:
    return Path(run_dir) / SPOOL_DIR


def unit_name(task_id: str, attempt: int | None = None) -> str:
    """The name of a task as a unit of work: ``77``, or ``77@2`` for its second attempt (attempts are
    separate tasks)."""
    return str(task_id) if attempt is None else f"{task_id}@{attempt}"


def parse_unit(unit: str) -> tuple[str, int | None]:
    task, at, attempt = str(unit).rpartition("@")
    if at and attempt.isdigit():
        return task, int(attempt)
    return str(unit), None


def package_path(run_dir: Path, unit: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._@-]+", "_", unit)
    return spool_dir(run_dir) / f"task-{safe}{SUFFIX}"


def encode_delivery(delivery: dict[str, Any]) -> dict[str, Any]:
    """A delivery (zlib bytes inside) as JSON data: the blobs in base64."""

    def enc(rows: Iterable[tuple[Any, Any]] | None) -> list[list[str]]:
        return [[str(name), base64.b64encode(bytes(blob)).decode("ascii")] for name, blob in rows or ()]

    return {
        "append": bool(delivery.get("append", True)),
        "files": enc(delivery.get("files")),
        "cache": enc(delivery.get("cache")),
        "bytes": int(delivery.get("bytes") or 0),
    }


def decode_delivery(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise PackageError("a delivery is not an object")

    def dec(rows: Any) -> list[list[Any]]:
        if not isinstance(rows, list):
            raise PackageError("a delivery's files or cache entries are not a list")
        out = []
        for row in rows:
            if not (isinstance(row, list) and len(row) == 2 and all(isinstance(v, str) for v in row)):
                raise PackageError("a delivery row is not [name, base64]")
            out.append([row[0], base64.b64decode(row[1].encode("ascii"), validate=True)])
        return out

    return {
        "append": bool(data.get("append", True)),
        "files": dec(data.get("files", [])),
        "cache": dec(data.get("cache", [])),
        "bytes": int(data.get("bytes") or 0),
    }


def write_package(run_dir: Path, unit: str, items: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """Write the package of ``unit`` into the spool, atomically and durably. ``items``: per item
    ``{"nodeid", "phases": [{"when", "outcome", "longrepr", "duration"}], "record", "delivery"}``."""
    path = package_path(run_dir, unit)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "format": FORMAT,
        "unit": unit,
        "meta": meta,
        "items": [{**item, "delivery": encode_delivery(item["delivery"])} for item in items],
    }
    write_atomic(path, json.dumps(body, ensure_ascii=True, sort_keys=True), durable=True)
    return path


def read_package(path: Path) -> dict[str, Any]:
    """A package's content, its deliveries decoded; PackageError when it is not a whole package."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_PACKAGE_BYTES:
            raise PackageError(f"{path.name}: larger than {MAX_PACKAGE_BYTES // 2**20} MiB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PackageError(f"{path.name}: cannot be read as a package: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("items"), list):
        raise PackageError(f"{path.name}: not a package of format {FORMAT}")
    items = []
    for item in data["items"]:
        if not (
            isinstance(item, dict) and isinstance(item.get("nodeid"), str) and isinstance(item.get("phases"), list)
        ):
            raise PackageError(f"{path.name}: an item without a node id or phases")
        if item.get("record") is not None and not isinstance(item["record"], dict):
            raise PackageError(f"{path.name}: {item['nodeid']}: the record is not an object")
        items.append({**item, "delivery": decode_delivery(item.get("delivery") or {})})
    return {**data, "items": items, "meta": data.get("meta") if isinstance(data.get("meta"), dict) else {}}


def waiting_packages(run_dir: Path) -> list[Path]:
    """Packages in the spool not yet taken in, oldest first (names of half-written files start with a dot)."""
    folder = spool_dir(run_dir)
    try:
        found = [p for p in folder.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith(".")]
    except FileNotFoundError:
        return []
    return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))


def mark_taken(path: Path) -> Path:
    """Move a package that was taken in to ``spool/taken/`` (a later look at the spool ignores it)."""
    path = Path(path)
    target = path.parent / TAKEN_DIR / path.name
    target.parent.mkdir(exist_ok=True)
    os.replace(path, target)
    return target


def taken_units(run_dir: Path) -> set[str]:
    folder = spool_dir(run_dir) / TAKEN_DIR
    try:
        names = [p.name for p in folder.iterdir() if p.name.endswith(SUFFIX)]
    except FileNotFoundError:
        return set()
    return {n[len("task-") : -len(SUFFIX)] for n in names if n.startswith("task-")}
