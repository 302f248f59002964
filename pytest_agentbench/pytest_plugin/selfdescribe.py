"""Self-describing runs: settings.json records how a run was asked for, so ``--bench-resume DIR`` alone
continues it and ``--bench-replay DIR`` re-scores it from the cache, with nothing retyped.

settings.json (written with the run's first record) holds the effective settings and, under ``_run``,
the options given for the run (every option not left at its default whose ``Option.stored`` is true: not
a secret, not the session's own resume/replay options) and its pytest selection (``-k``, ``-m``,
``--deselect``). On resume these come back as if typed again. A command-line value that differs is refused
with the difference, except for options declared ``free_on_resume`` (where reports go, progress, retries,
the endpoint, ...); a different selection is refused too, or added to the run's with
``--bench-set=resume_merge=true``. Replay
takes the run's options and forces
``--bench-cache replay``; what is typed on its command line wins (it is a new run).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ..benchmarks.registry import available_benchmarks
from ..core.io import write_atomic
from ..core.options import Option, OptionError, Settings, resolve, stored_options
from ..report.baseline import json_text
from ..report.resume import RUN_KEY, SETTINGS_FILE
from .collect import current_nodeid
from .options import sources

DEFINITION = pytest.StashKey[dict]()
SELECTION = {"keyword": "-k", "markexpr": "-m", "deselect": "--deselect"}
LISTED = frozenset({"deselect"})  # selection options given as a list (repeatable flags)


def jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


def definition(config: pytest.Config, options: Iterable[Option], opts: Settings) -> dict[str, Any]:
    """How this run was asked for: what settings.json keeps under ``_run``."""
    given = [o for o in stored_options(options) if opts.origin(o.name) != "default"]
    return {
        "options": {o.name: jsonable(opts[o.name]) for o in given},
        "selection": {key: selection_of(config, key) for key in SELECTION},
        # where each of those values came from: command line, environment, a run file's line, ini
        "sources": {o.name: opts.origin(o.name) for o in given},
        "cwd": str(config.invocation_params.dir),
    }


def selection_of(config: pytest.Config, key: str) -> Any:
    """This session's ``-k``/``-m`` expression ("" when none), or its ``--deselect`` node ids (a list)."""
    value = getattr(config.option, key, None)
    if key in LISTED:
        return list(dict.fromkeys(str(v) for v in value or ()))
    return value or ""


def stored_selection(stored: dict[str, Any], key: str) -> Any:
    """A selection as the run stored it, its node ids in today's form (a run written before CORE-Bench items
    were ``core-bench::capsule-X`` stored ``core-bench/capsule-X``, which would match nothing now)."""
    value = stored.get("selection", {}).get(key)
    if key in LISTED:
        return current_nodeids([str(v) for v in value]) if isinstance(value, list) else []
    return value if isinstance(value, str) else ""


def current_nodeids(nodeids: Iterable[str]) -> list[str]:
    benches = list(available_benchmarks().found.values())
    return list(dict.fromkeys(current_nodeid(nodeid, benches) for nodeid in nodeids))


def translate_deselect(config: pytest.Config) -> None:
    """``--deselect core-bench/capsule-X`` (the form before pytest 9.2) deselects ``core-bench::capsule-X``."""
    given = getattr(config.option, "deselect", None)
    if given:
        config.option.deselect = current_nodeids(str(v) for v in given)


def same_selection(key: str, was: Any, now: Any) -> bool:
    return set(was) == set(now) if key in LISTED else was == now


def merged_selection(key: str, was: Any, now: Any) -> Any:
    """--bench-set=resume_merge=true: the run's selection and this command's together. An expression becomes
    ``(was) or (now)``; an item stays deselected only when both deselect it."""
    if key in LISTED:
        return [v for v in was if v in now]
    return f"({was}) or ({now})" if was else ""


def stored_definition(folder: Path) -> dict[str, Any] | None:
    """The ``_run`` part of a run's settings.json, or None (no file yet, or a run older than it)."""
    file = Path(folder) / SETTINGS_FILE
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    found = data.get(RUN_KEY) if isinstance(data, dict) else None
    return found if isinstance(found, dict) else None


def as_given(option: Option, value: Any) -> Any:
    """A stored value in the form the command line gives it."""
    if option.kind == "list":
        return ",".join(value) if value else None
    if option.kind == "multi":
        return list(value)
    if option.kind in ("bool", "json"):
        return value
    return None if value is None else str(value)


def shown(value: Any) -> str:
    if value in (None, "", [], ()):
        return "(not set)"
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def restore(config: pytest.Config, options: tuple[Option, ...], opts: Settings) -> Settings:
    """The settings of ``--bench-resume DIR`` / ``--bench-replay DIR``: the run's own, from its settings.json,
    checked against what this command line gives (pytest.UsageError naming every difference; an option
    ``free_on_resume`` may differ)."""
    translate_deselect(config)
    folder = opts.resume or opts.replay
    stored = stored_definition(folder) if folder else None
    if stored is None:
        return opts
    resuming, merge = bool(opts.resume), bool(opts.resume_merge)
    flag = "--bench-resume" if resuming else "--bench-replay"
    raw = sources(config, options)
    cli = dict(raw.cli)
    kept = stored.get("options", {})
    diffs: list[str] = []  # settings: only a new run, or the run's own value, fits
    selection_diffs: list[str] = []  # what --bench-set=resume_merge=true can add to the run's selection
    for option in stored_options(options):
        given = opts.origin(option.name) == "command line"
        was = kept.get(option.name)
        if not given:
            cli[option.name] = as_given(option, was) if option.name in kept else None
            continue
        now = jsonable(opts[option.name])
        if not resuming or option.free_on_resume or now == was:
            continue
        if option.name not in kept and option.name != "ids":
            continue  # left at its default by the run: report.resume.check_settings compares the effective settings
        if option.name == "ids" and merge:
            cli["ids"] = None if not was else ",".join(dict.fromkeys([*was, *now]))
            continue
        (selection_diffs if option.name == "ids" else diffs).append(
            f"{option.spelling}: {shown(was)} in the run, {shown(now)} now"
        )
    for key, short in SELECTION.items():
        was, now = stored_selection(stored, key), selection_of(config, key)
        if not now:
            setattr(config.option, key, was)
        elif not same_selection(key, was, now) and resuming:
            if merge:
                setattr(config.option, key, merged_selection(key, was, now))
            else:
                selection_diffs.append(f"{short}: {shown(was)} in the run, {shown(now)} now")
    if diffs or selection_diffs:
        raise pytest.UsageError(refusal(flag, folder, diffs, selection_diffs))
    if not resuming:
        cli["cache"] = "replay"  # only the run's cached responses: no model is called
    if (cli.get("model") and not raw.cli.get("model")) or (cli.get("agent") and not raw.cli.get("agent")):
        # a run file of several runs: this run's model and agent entries
        model, agent = cli.get("model"), cli.get("agent")
        raw = sources(config, options, str(model) if model else None, str(agent) if agent else None)
    try:
        return resolve(options, replace(raw, cli=cli))
    except OptionError as exc:
        raise pytest.UsageError(f"agentbench: {flag} {folder}: {exc}") from None


def refusal(flag: str, folder: Any, diffs: list[str], selection_diffs: list[str]) -> str:
    """Why a resume or replay is refused, and the way out that fits what differs: a selection can be added to the
    run's (--bench-set=resume_merge=true); a setting cannot, since the run's finished records were made with the old
    one."""
    text = (
        f"agentbench: {flag} {folder}: this command differs from the run's own settings (settings.json): "
        f"{'; '.join(diffs + selection_diffs)}. Leave them out to continue the run as it was"
    )
    if flag != "--bench-resume":
        return text
    if selection_diffs:
        text += ", add --bench-set=resume_merge=true to add this selection to the run's"
    if diffs:
        text += (
            f"; to use another setting ({', '.join(d.split(':', 1)[0] for d in diffs)}), start a new run (leave out "
            f"{flag}): the run's finished records were made with its own"
        )
    return text


def settings_file_content(
    settings: dict[str, Any], config: pytest.Config, found: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What settings.json holds: the effective settings and, under ``_run``, how the run was asked for
    (``found``: one run's definition in a session of several runs; else the session's)."""
    found = found if found is not None else config.stash.get(DEFINITION, None)
    return {**settings, RUN_KEY: found} if found is not None else dict(settings)


def rewrite_definition(run_dir: Path, config: pytest.Config) -> None:
    """--bench-set=resume_merge=true: the run's settings.json now names the merged selection."""
    file = Path(run_dir) / SETTINGS_FILE
    if not file.is_file() or DEFINITION not in config.stash:
        return
    data = json.loads(file.read_text(encoding="utf-8"))
    data[RUN_KEY] = config.stash[DEFINITION]
    write_atomic(file, json_text(data))
