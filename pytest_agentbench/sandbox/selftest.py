"""The sandbox self-test: the real interpreter, started afresh inside the real sandbox with the run's own binds
and hidden folders, imports what scoring needs (numpy, scipy, h5py and this package).

Run once per process per (interpreter, binds) by the controller before any item (``pytest_plugin/checks.py``)
and by every remote host's probe (``pytest_plugin/distribution/hostprobe.py``); a failure is a usage error naming
what the sandbox does not show and how to fix it, so no run spends its items on ``could not rebuild the targets``.
It uses the subprocess executor's way in (bwrap, then the launcher's private ``/tmp``, ``/dev/shm`` and masks,
then ``exec`` of ``sys.executable``): the strictest of the sandboxes, and the one the targets rebuild uses.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .executors import SubprocessExecutor
from .interpreter import Python, executable_of
from .isolation import ISOLATION_ENV, SANDBOX_UID, Isolation, needed_paths, probe, python_links, site_folders, under
from .limits import Limits, package_parent

MODULES = ("numpy", "scipy", "h5py", "pytest_agentbench")  # what every scoring child imports
TIMEOUT = 60.0  # seconds; it takes about one on a loaded machine
EXPECTED_FILE = "expected.json"
# Runs as main.py in the sandbox: what it cannot import (the verdict) and, to say why, which expected paths it
# cannot see (a folder that must hold entries and holds none is masked) or cannot read.
SCRIPT = r"""
import importlib, json, os, sys
expected = json.load(open("expected.json"))
found = {"executable": sys.executable, "missing": [], "unreadable": [], "imports": {}}
for path, has_entries in expected["paths"]:
    try:
        if not os.path.exists(path) or (has_entries and not os.listdir(path)):
            found["missing"].append(path)
        elif not os.access(path, os.R_OK):
            found["unreadable"].append(path)
    except OSError:
        found["unreadable"].append(path)
for name in expected["modules"]:
    try:
        importlib.import_module(name)
        found["imports"][name] = "ok"
    except BaseException as exc:
        found["imports"][name] = (type(exc).__name__ + ": " + str(exc)).splitlines()[0][:300]
print("\n" + json.dumps(found))
"""
FIX = (
    f"fix: keep the interpreter, its venv and its packages outside the data dir, the cache and the report "
    f"folder, in folders every user (uid {SANDBOX_UID}) may read and enter (chmod -R o+rX); or, for trusted "
    f"models only, run without isolation ({ISOLATION_ENV}=off)"
)


@dataclass(frozen=True)
class SelfTest:
    """The outcome: ``ok``, how long it took, and otherwise ``problem`` (what is hidden, how to fix it)."""

    ok: bool
    seconds: float
    interpreter: str
    problem: str = ""

    def describe(self) -> str:
        """For the run's isolation line (a passed test) or the usage error (a failed one)."""
        if self.ok:
            return f"self-test passed ({self.interpreter} imports {', '.join(short(MODULES))}; {self.seconds:.1f} s)"
        return f"the sandbox self-test failed: {self.problem}"


def short(modules: Sequence[str]) -> list[str]:
    return [name.split(".")[0] for name in modules]


_DONE: dict[tuple[object, ...], SelfTest] = {}


def run_self_test(
    isolation: Isolation | None = None,
    hidden: Sequence[str] | Mapping[str, str] = (),
    python: Python | None = None,
) -> SelfTest | None:
    """The self-test under ``isolation`` (default: ``probe()``) with the run's ``hidden`` folders (a mapping
    gives each the option that names it, for the message); None when children are not isolated (nothing to
    test). Once per process per interpreter, binds and isolation mode: the hidden folders count only where
    they meet Python's folders (elsewhere they cannot change the answer). ``python``: another interpreter
    than the running one (a grading environment's), which must import every module of ``MODULES``."""
    iso = probe() if isolation is None else isolation
    if not iso.active:
        return None
    labels = {os.path.realpath(str(p)): label for p, label in hidden.items()} if isinstance(hidden, Mapping) else {}
    hidden = [os.path.realpath(str(path)) for path in hidden]
    needed = needed_paths() if python is None else list(python.needed)
    links = python_links() if python is None else list(python.links)
    seen = [*needed, *(link for link, _ in links)]
    meeting = tuple(sorted(h for h in hidden if any(under(p, [h]) or under(h, [p]) for p in seen)))
    key = (executable_of(python), iso.mode, tuple(needed), tuple(links), meeting)
    if key not in _DONE:
        _DONE[key] = _run(iso, hidden, labels, python)
    return _DONE[key]


def _run(iso: Isolation, hidden: Sequence[str], labels: Mapping[str, str], python: Python | None = None) -> SelfTest:
    executable = executable_of(python)
    if python is None:
        modules = [name for name in MODULES if importable(name)]  # what is missing here is no sandbox's fault
        paths = expected_paths()
    else:  # another interpreter must have all of them: it is there to score
        modules = list(MODULES)
        paths = other_expected_paths(python)
    files = {EXPECTED_FILE: json.dumps({"paths": paths, "modules": modules})}
    started = time.monotonic()
    try:
        result = SubprocessExecutor(iso, python=python).run(
            SCRIPT,
            limits=Limits(timeout=TIMEOUT, hidden=tuple(hidden)),
            files=files,
            env={"PYTHONPATH": package_path()},
        )
    except (OSError, ValueError) as exc:  # the sandbox could not even be started
        problem = f"the sandbox for {executable} could not be started ({type(exc).__name__}: {exc}); {FIX}"
        return SelfTest(False, time.monotonic() - started, executable, problem)
    seconds = time.monotonic() - started
    found = last_json_line(result.stdout)
    if found is None:
        tail = " | ".join(line.strip() for line in result.stderr.strip().splitlines()[-3:]) or "no output"
        why = "timed out" if result.timed_out else f"exit status {result.exit_code}"
        problem = (
            f"{executable} could not run in the sandbox ({why}: {tail}); "
            f"{explain([executable, *masked_python(hidden)], hidden, labels)}{FIX}"
        )
        return SelfTest(False, seconds, executable, problem)
    failed = {name: error for name, error in found["imports"].items() if error != "ok"}
    if not failed and result.exit_code == 0:  # (a folder it cannot see that nothing needed: a $PYTHONPATH
        return SelfTest(True, seconds, executable)  # entry only root may read is skipped, as outside)
    parts = []
    if found["missing"]:
        parts.append(f"not visible: {', '.join(found['missing'])}")
    if found["unreadable"]:
        parts.append(f"not readable by uid {SANDBOX_UID}: {', '.join(found['unreadable'])}")
    if failed:
        parts.append("cannot import " + "; ".join(f"{name} ({error})" for name, error in failed.items()))
    if not parts:
        parts.append(f"the script ended with exit status {result.exit_code}")
    problem = f"inside the sandbox, {executable}: {'; '.join(parts)}; {explain(found['missing'], hidden, labels)}{FIX}"
    return SelfTest(False, seconds, executable, problem)


def package_path() -> str:
    """The script's ``$PYTHONPATH``: this package's parent (as every launcher has it: a relative ``$PYTHONPATH``
    means nothing in the child's work folder), then the user's."""
    return os.pathsep.join(p for p in (package_parent(), os.environ.get("PYTHONPATH", "")) if p)


def expected_paths() -> list[tuple[str, bool]]:
    """What the sandbox must show, each with whether it is a folder with entries here (then it must have
    entries there too: a mask is an empty folder): the interpreter as spelt and resolved, Python's folders,
    its site folders and the links on the way to them."""
    out: dict[str, bool] = {}
    for path in [
        sys.executable,
        os.path.realpath(sys.executable),
        *needed_paths(),
        *sorted(os.path.realpath(p) for p in site_folders() if os.path.isdir(p)),
        *(link for link, _ in python_links()),
    ]:
        if path and path not in out:
            try:
                out[path] = os.path.isdir(path) and bool(os.listdir(path))
            except OSError:
                out[path] = False
    return list(out.items())


def other_expected_paths(python: Python) -> list[tuple[str, bool]]:
    """``expected_paths`` of another interpreter: its path and the folders it told (``interpreter.describe``)."""
    out: dict[str, bool] = {}
    for path in [python.executable, *python.needed, *(link for link, _ in python.links)]:
        if path and path not in out:
            try:
                out[path] = os.path.isdir(path) and bool(os.listdir(path))
            except OSError:
                out[path] = False
    return list(out.items())


def explain(missing: Sequence[str], hidden: Sequence[str], labels: Mapping[str, str]) -> str:
    """Which hidden folder of the run (data dir, cache, reports) hides the ``missing`` paths: a path at or below
    one is masked with it (Python strictly inside one is bound again on top; Python that is the folder is not)."""
    notes = []
    for folder in hidden:
        covered = [path for path in missing if under(path, [folder]) or under(os.path.realpath(path), [folder])]
        if covered:
            named = labels.get(folder) or "the data dir, the cache or the report folder"
            if os.path.realpath(covered[0]) == folder:
                notes.append(f"{folder} is hidden from children ({named}) and Python needs it")
            else:
                notes.append(f"{covered[0]} lies in {folder}, which is hidden from children ({named})")
    return "".join(f"{note}; " for note in notes)


def masked_python(hidden: Sequence[str]) -> list[str]:
    """Python's folders that a hidden folder of the run is, or lies in: masks that stay on Python."""
    return [path for path in needed_paths() if any(under(folder, [path]) for folder in hidden)]


def importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def last_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "imports" in value:
            return value
    return None
