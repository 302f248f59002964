"""SciCode's grading environments (--bench-set grading_envs): the interpreters a step's scoring child runs in.

SciCode's code was written against the scientific Python of 2024; SciPy and NumPy have since removed and
changed things (``scipy.integrate.simps``, NumPy 2's promotion rules). A step may be graded in several pinned
environments and pass when any of them gives the right result, every environment's verdict kept.

A name is a built-in spec (``grading_envs.json`` next to this module: exact releases and the CPython minor
versions each has wheels for) or ``NAME=/path/to/python`` (an interpreter the user provides). A built-in spec
is built on first use as a venv (uv where it is installed, else ``python -m venv`` and pip) in
``$AGENTBENCH_GRADING_ENVS`` or ``<cache dir>/grading-envs/``, named by the hash of the spec and of the
interpreter that builds it, so a changed pin or another Python builds anew and an unchanged one is reused;
a file lock lets the workers of one host share one build. Whoever needs an environment resolves it where it
runs (each xdist worker, each remote host, each Slurm job), so every host builds its own.

The scoring child needs only this package's pure-Python source of the other venv (the operand codec and
runtime, the comparison helpers, the sandbox's launcher), which it gets on its path read-only as every
launcher does; none of this package's dependencies is installed there.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError
from ...sandbox.interpreter import VERSION_PACKAGES, InterpreterError, Python, describe
from ...sandbox.isolation import Isolation, probe
from ...sandbox.selftest import run_self_test

SPECS_FILE = Path(__file__).with_name("grading_envs.json")
ROOT_ENV = "AGENTBENCH_GRADING_ENVS"  # where built-in environments are built (default <cache dir>/grading-envs)
STAMP = "agentbench-grading-env.json"  # written last: a venv without it is an unfinished build
BUILD_FORMAT = 1  # raised when the way a venv is built changes
BUILD_TIMEOUT = 1800.0  # seconds for one environment's venv and install
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
OPTION = "--bench-set grading_envs"


class GradingEnvError(ConfigError):
    """A grading environment that cannot be had: a usage error naming it and why."""


@dataclass(frozen=True)
class Spec:
    """A built-in spec: exact package releases and the CPython minor versions they have wheels for."""

    name: str
    packages: Mapping[str, str]
    python: tuple[str, ...]

    def requirements(self) -> list[str]:
        return [f"{package}=={version}" for package, version in sorted(self.packages.items())]

    def digest(self, base: str, version: str) -> str:
        """The hash naming its venv: the pins, the building interpreter and its version, the build format."""
        key: dict[str, Any] = {"packages": dict(sorted(self.packages.items())), "base": base, "version": version}
        key["format"] = BUILD_FORMAT
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class GradingEnv:
    """One environment a step is graded in: its name, its interpreter and, for a built-in one, the hash of
    its spec."""

    name: str
    python: Python
    spec_hash: str | None = None

    def describe(self) -> dict[str, Any]:
        """What a run records of it (its settings' ``grading_envs``): what another run compares."""
        out: dict[str, Any] = {"name": self.name, "python": self.python.executable}
        if self.spec_hash is not None:
            out["spec"] = self.spec_hash
        out["versions"] = dict(self.python.versions)
        return out


def load_specs(path: Path = SPECS_FILE) -> dict[str, Spec]:
    data = json.loads(path.read_text())
    return {name: Spec(name, dict(entry["packages"]), tuple(entry["python"])) for name, entry in data["specs"].items()}


def parse(values: Iterable[str]) -> list[tuple[str, str | None]]:
    """``NAME`` or ``NAME=/path/to/python`` entries (the option's list) as (name, path or None); a
    ConfigError for a malformed, unknown or repeated name."""
    specs = load_specs()
    out: list[tuple[str, str | None]] = []
    for raw in values:
        entry = str(raw).strip()
        if not entry:
            continue
        name, sep, path = entry.partition("=")
        name, path = name.strip(), path.strip()
        if not NAME_PATTERN.match(name):
            raise GradingEnvError(
                f"{OPTION}: {entry!r} is not NAME or NAME=/path/to/python (a name is letters, digits, '.', '_', '-')"
            )
        if sep and not path:
            raise GradingEnvError(f"{OPTION}: {entry!r} names no interpreter after '='")
        if not sep and name not in specs:
            raise GradingEnvError(
                f"{OPTION}: no built-in grading environment {name!r}; built-in: {', '.join(specs)}, "
                f"or give one as {name}=/path/to/python"
            )
        if any(name == seen for seen, _ in out):
            raise GradingEnvError(f"{OPTION}: {name!r} is named twice")
        out.append((name, path or None))
    return out


def root_folder(cache_dir: Path | str | None) -> Path:
    """Where built-in environments are built: ``$AGENTBENCH_GRADING_ENVS``, else ``<cache dir>/grading-envs``."""
    given = os.environ.get(ROOT_ENV, "").strip()
    if given:
        return Path(given).expanduser().absolute()
    return Path(cache_dir or ".agentbench_cache").absolute() / "grading-envs"


_RESOLVED: dict[tuple[str, str | None, str], GradingEnv] = {}


def resolve(
    entries: Sequence[tuple[str, str | None]],
    cache_dir: Path | str | None,
    *,
    isolation: Isolation | None = None,
    hidden: Sequence[str] | Mapping[str, str] = (),
) -> tuple[GradingEnv, ...]:
    """The environments ``entries`` name, built where they are missing and checked by the sandbox self-test
    (once per process each); a GradingEnvError (a usage error) names the one that failed and why."""
    root = root_folder(cache_dir)
    out = []
    for name, path in entries:
        key = (name, path, str(root))
        if key not in _RESOLVED:
            env = provided(name, path) if path is not None else built(load_specs()[name], root)
            check(env, isolation, hidden)
            _RESOLVED[key] = env
        out.append(_RESOLVED[key])
    return tuple(out)


def provided(name: str, path: str) -> GradingEnv:
    try:
        python = describe(path)
    except InterpreterError as exc:
        raise GradingEnvError(f"{OPTION}: grading environment {name}={path}: {exc}") from None
    return GradingEnv(name, python)


def check(env: GradingEnv, isolation: Isolation | None, hidden: Sequence[str] | Mapping[str, str]) -> None:
    """Its scientific packages are there and the sandbox shows it (the self-test imports them inside)."""
    lacking = [package for package in VERSION_PACKAGES if env.python.versions.get(package) == "not installed"]
    if lacking:
        raise GradingEnvError(
            f"{OPTION}: grading environment {env.name} ({env.python.executable}) lacks {', '.join(lacking)}: "
            f"scoring needs {', '.join(VERSION_PACKAGES)} there"
        )
    iso = probe() if isolation is None else isolation
    test = run_self_test(iso, hidden, python=env.python)
    if test is not None and not test.ok:
        raise GradingEnvError(f"{OPTION}: grading environment {env.name}: {test.describe()}")


def built(spec: Spec, root: Path) -> GradingEnv:
    """The venv of ``spec`` under ``root``: reused when its stamp says it was built whole, else built now."""
    version = ".".join(str(part) for part in sys.version_info[:2])
    if version not in spec.python:
        raise GradingEnvError(
            f"{OPTION}: grading environment {spec.name} needs CPython {', '.join(spec.python)} (its pinned "
            f"releases have wheels for those); this is Python {version} ({sys.executable}): run pytest with one "
            f"of those, or give the environment as {spec.name}=/path/to/python"
        )
    base = os.path.realpath(sys.executable)
    digest = spec.digest(base, sys.version.split()[0])
    folder = root / f"{spec.name}-{digest}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with open(root / f".{folder.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another worker of this host may be building it
            if not finished(folder, digest):
                build(spec, folder, digest)
    except OSError as exc:
        raise GradingEnvError(f"{OPTION}: grading environment {spec.name}: cannot use {root} ({exc})") from None
    python = describe(str(folder / "bin" / "python"))
    return GradingEnv(spec.name, python, digest)


def finished(folder: Path, digest: str) -> bool:
    try:
        stamp = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("spec") == digest and (folder / "bin" / "python").exists()


def build(spec: Spec, folder: Path, digest: str) -> None:
    """Build the venv (uv where it is installed, else venv and pip); GradingEnvError with the tool's message."""
    shutil.rmtree(folder, ignore_errors=True)
    uv = shutil.which("uv")
    python = str(folder / "bin" / "python")
    if uv:
        steps = [
            ("uv venv", [uv, "venv", "--quiet", "--python", sys.executable, str(folder)]),
            ("uv pip", [uv, "pip", "install", "--quiet", "--python", python, *spec.requirements()]),
        ]
    else:
        pip = [python, "-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check"]
        steps = [("venv", [sys.executable, "-m", "venv", str(folder)]), ("pip", [*pip, *spec.requirements()])]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    for tool, argv in steps:
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, env=env, timeout=BUILD_TIMEOUT, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            done = subprocess.CompletedProcess(argv, -1, "", str(exc))
        if done.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            message = " | ".join(line.strip() for line in done.stderr.strip().splitlines()[-6:] if line.strip())
            raise GradingEnvError(
                f"{OPTION}: could not build grading environment {spec.name} ({' '.join(spec.requirements())}) "
                f"in {folder}: {tool} said: {message or f'exit status {done.returncode}'}"
            )
    stamp = {"spec": digest, "name": spec.name, "packages": dict(spec.packages), "base": sys.executable}
    (folder / STAMP).write_text(json.dumps(stamp, indent=1))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pytest_agentbench.benchmarks.scicode.gradingenvs NAME...``: build (or find) the built-in
    environments, print each one's interpreter (a CI step builds them before the tests)."""
    import argparse  # why: only the command line needs it

    parser = argparse.ArgumentParser(description="Build SciCode's built-in grading environments.")
    parser.add_argument("names", nargs="*", help="built-in spec names (default: all)")
    parser.add_argument("--cache-dir", default=None, help="the cache folder (default: $AGENTBENCH_GRADING_ENVS)")
    args = parser.parse_args(argv)
    names = args.names or list(load_specs())
    try:
        for env in resolve(parse(names), args.cache_dir):
            print(env.name, env.python.executable, json.dumps(env.python.versions, sort_keys=True))
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
