"""Resume an interrupted run in its own folder.

The controller reads the run's records file (a torn last line is dropped with a warning and cut off
the file, so new records start on a clean line) and checks that the settings are those of the
interrupted run (``settings.json``, written with the first record). Only the controller reads or writes
the file: the plugin hands the finished records to its xdist workers in ``workerinput``. Finished items
are then reported from their records, not run again (the plugin's run loop). Plain functions: the
plugin turns ConfigError into a usage error.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import records as rec
from ..core.errors import ConfigError
from ..core.io import write_atomic
from .baseline import json_text, settings_differences

SETTINGS_FILE = "settings.json"
RUN_KEY = "_run"  # in settings.json: how the run was asked for (its options and selection), not a setting


@dataclass
class Resumed:
    records: dict[str, rec.Record] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def stored_cwd(run_dir: Path) -> str | None:
    """The folder the run was started from (its settings.json), when it still exists: ``resume``, ``run-task``
    and ``collect`` run there, so the run's relative paths mean what they meant."""
    try:
        cwd = json.loads((Path(run_dir) / SETTINGS_FILE).read_text(encoding="utf-8")).get(RUN_KEY, {}).get("cwd")
    except (OSError, ValueError, AttributeError):
        return None
    return cwd if cwd and Path(cwd).is_dir() else None


def check_settings(run_dir: Path, settings: Mapping[str, Any], free: Iterable[str] = ()) -> None:
    """ConfigError when this run's settings are not the interrupted run's (the model included)."""
    file = Path(run_dir) / SETTINGS_FILE
    if not file.is_file():
        return  # the run was killed before its first record: nothing to protect
    old = {k: v for k, v in json.loads(file.read_text(encoding="utf-8")).items() if k != RUN_KEY}
    diffs = settings_differences(old, settings, free)
    if old.get("model") != settings.get("model"):
        diffs.insert(0, f"model: {old.get('model')} vs {settings.get('model')}")
    if diffs:
        raise ConfigError(
            f"--bench-resume {run_dir}: this run's settings differ from the "
            f"interrupted run's: {'; '.join(diffs)}; resume with the run's own options, or start a new run "
            "(leave out --bench-resume) to use these: the run's finished records were made with its own"
        )


def load_for_controller(records_path: Path) -> Resumed:
    """Read the finished records; cut a torn or corrupt line off the file so appends stay whole."""
    out = Resumed()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = rec.read_records(records_path)
    # the run's header shows them as the plugin's own notes (which carry the "agentbench:" prefix already)
    out.notes += [str(w.message).removeprefix("agentbench: ") for w in caught]
    if caught:
        rec.rewrite_records(records_path, records)
    out.records = {key: rec.Record.from_json(r) for key, r in rec.latest_by_id(records).items()}
    out.notes.insert(
        0, f"resuming {records_path.parent}: {len(out.records)} finished record(s) reused, the rest runs now"
    )
    return out


def resume_controller(
    run_dir: Path, records_path: Path, settings: Mapping[str, Any], free: Iterable[str] = ()
) -> Resumed:
    """Both controller steps: check the settings (ConfigError), then read the finished records."""
    check_settings(run_dir, settings, free)
    return load_for_controller(records_path)


def write_settings_once(run_dir: Path, settings: Mapping[str, Any]) -> None:
    file = Path(run_dir) / SETTINGS_FILE
    if file.exists():
        return
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_atomic(file, json_text(dict(settings)))
