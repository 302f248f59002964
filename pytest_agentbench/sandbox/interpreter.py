"""Another Python than the running one for scoring children: what a sandbox must show of it.

A sandbox shows the folders Python needs (``isolation.needed_paths``) and makes the links on the way to them
(``isolation.python_links``), both worked out in the running interpreter from its own ``sys`` values. A child
that runs another interpreter (a grading environment's venv) needs *that* interpreter's folders, which only
it can tell: ``describe`` asks it, running this package's own ``isolation`` module there (this package's
source is put on its path read-only, as every launcher has it; the sandbox layer imports nothing but the
standard library, so the other venv needs none of this package's dependencies). It is the user's (or this
package's own) interpreter, run once with no model code, so it runs outside any sandbox.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

from .limits import child_env, package_parent

PROBE_TIMEOUT = 120.0  # seconds; importing nothing heavy, it takes well under one
VERSION_PACKAGES = ("numpy", "scipy", "sympy", "h5py")  # what a scoring environment records of itself

# Run by the other interpreter (-S: its site folders are what we ask, through ``site``, not what it loaded).
PROBE = r"""
import json, platform, sys
from importlib import metadata
from pytest_agentbench.sandbox.isolation import needed_paths, python_links
versions = {"python": platform.python_version()}
for name in sys.argv[1].split(","):
    try:
        versions[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        versions[name] = "not installed"
print(json.dumps({"executable": sys.executable, "needed": needed_paths(), "links": python_links(),
                  "versions": versions}))
"""


class InterpreterError(RuntimeError):
    """The interpreter could not be run or did not answer."""


@dataclass(frozen=True)
class Python:
    """An interpreter children may run: its path, the folders and links a sandbox must show for it and the
    versions of Python and of the scientific packages it has (``VERSION_PACKAGES``)."""

    executable: str
    needed: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    versions: dict[str, str] = field(default_factory=dict, compare=False, hash=False)


_DESCRIBED: dict[str, Python] = {}


def describe(executable: str) -> Python:
    """``executable`` described by itself (once per process); InterpreterError when it cannot be run."""
    path = os.path.abspath(executable)
    if path in _DESCRIBED:
        return _DESCRIBED[path]
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise InterpreterError(f"{path} is not an executable file")
    env = dict(child_env(), PYTHONPATH=package_parent())
    env.pop("PYTHONHOME", None)
    try:
        done = subprocess.run(
            [path, "-c", PROBE, ",".join(VERSION_PACKAGES)],
            capture_output=True,
            text=True,
            env=env,
            cwd="/",
            timeout=PROBE_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InterpreterError(f"{path} could not be run: {exc}") from None
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = " | ".join(done.stderr.strip().splitlines()[-3:]) or f"exit status {done.returncode}, no output"
        raise InterpreterError(f"{path} did not describe itself: {tail}") from None
    python = Python(
        executable=path,
        needed=tuple(str(p) for p in found["needed"]),
        links=tuple((str(a), str(b)) for a, b in found["links"]),
        versions={str(k): str(v) for k, v in found["versions"].items()},
    )
    _DESCRIBED[path] = python
    return python


def executable_of(python: Python | None) -> str:
    """The interpreter a child runs: ``python``'s, or the running one."""
    return sys.executable if python is None else python.executable
