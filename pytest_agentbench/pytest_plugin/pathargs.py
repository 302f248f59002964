"""Catch an option value that pytest took for a test path.

pytest works out the rootdir, the ini file and the conftest cut-off before plugins are loaded, so in
``--bench-report-dir /tmp/x`` (a space, not ``=``) it reads ``/tmp/x`` as a test path when that folder
exists. The project's ini file and conftest.py are then silently ignored. Once the plugin is loaded
its options are known: a path option written with a space on the command line is a usage error naming the
option and the ``--option=value`` form, whether or not the path exists yet; for the other options the setup is
worked out again with their values removed from the free arguments, and a difference is the same usage error.
Recovering silently is not offered: addopts, ``-p`` and the cache dir were already derived from the
wrong ini file.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import iniconfig
import pytest

from ..core.options import Option

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli below 3.11
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

# pytest has no public call that works out the setup for another argument list, so this module follows the
# algorithm its documentation states ("Initialization: determining rootdir and configfile"), with the
# releases in which it changed; tests/test_pathargs.py checks it against pytest's own answer on each
# supported release.
# since 9.0 pytest.toml and a [tool.pytest] table (native TOML) hold settings
NATIVE_TOML = pytest.version_tuple >= (9, 0)
# the files that can hold pytest's settings, in pytest's order of precedence
CONFIG_NAMES = (("pytest.toml", ".pytest.toml") if NATIVE_TOML else ()) + (
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
)
# since 8.1 a pyproject.toml without pytest settings marks the rootdir when no other file does
PYPROJECT_FALLBACK = pytest.version_tuple >= (8, 1)
# since 9.0 a .pytest.ini holds settings even without a [pytest] section, as a pytest.ini always did
HIDDEN_INI_ALWAYS = pytest.version_tuple >= (9, 0)
# since 9.2 a -c path that is not a file (-c /dev/null) no longer roots the run at its folder
NON_FILE_CONFIG_ROOTS_AT_ARGS = pytest.version_tuple >= (9, 2)


def space_form_values(args: Sequence[str], options: Iterable[Option]) -> list[tuple[str, str]]:
    """``(flag, value)`` for every plugin option written as ``--flag value`` in ``args``."""
    flags = {o.flag for o in options if o.takes_value}
    return [(flag, value) for flag, value in zip(args, args[1:]) if flag in flags and not value.startswith("-")]


def absolute(path: str | Path) -> Path:
    """An absolute path with ``..`` folded but links kept, as pytest makes them."""
    return Path(os.path.abspath(path))


def exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long, or one with a NUL byte, is no path
        return False


def folders_of(args: Sequence[str]) -> list[Path]:
    """The folder of every free argument that names an existing path (``file.py::test`` names file.py)."""
    paths = [absolute(arg.split("::")[0]) for arg in args if not arg.startswith("-")]
    return [path if path.is_dir() else path.parent for path in paths if exists(path)]


def common_ancestor(invocation_dir: Path, paths: Iterable[Path]) -> Path:
    """The deepest folder holding every existing path; the invocation folder when none exists."""
    existing = [str(path) for path in paths if path.exists()]
    if not existing:
        return invocation_dir
    ancestor = Path(os.path.commonpath(existing))
    return ancestor.parent if ancestor.is_file() else ancestor


def read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise pytest.UsageError(f"{path}: {exc}") from exc


def read_ini(path: Path) -> iniconfig.IniConfig:
    try:
        return iniconfig.IniConfig(str(path))
    except iniconfig.ParseError as exc:
        raise pytest.UsageError(str(exc)) from exc


def holds_settings(path: Path) -> bool:
    """Whether pytest takes this config file as the run's configfile (rather than looking further up)."""
    if path.name in ("pytest.toml", ".pytest.toml", "pytest.ini") or (path.name == ".pytest.ini" and HIDDEN_INI_ALWAYS):
        return True  # even when empty
    if path.name in ("tox.ini", ".pytest.ini"):
        return "pytest" in read_ini(path)
    if path.name == "setup.cfg":
        return "tool:pytest" in read_ini(path).sections
    table = read_toml(path).get("tool", {}).get("pytest", {})
    return bool(table) if NATIVE_TOML else "ini_options" in table


def locate_config(starts: Sequence[Path]) -> tuple[Path | None, Path | None]:
    """(rootdir, configfile) of the first config file found from each start upwards."""
    first_pyproject = None
    for start in starts:
        for base in (start, *start.parents):
            for name in CONFIG_NAMES:
                candidate = base / name
                if not candidate.is_file():
                    continue
                if name == "pyproject.toml" and first_pyproject is None:
                    first_pyproject = candidate
                if holds_settings(candidate):
                    return base, candidate
    if PYPROJECT_FALLBACK and first_pyproject is not None:
        return first_pyproject.parent, first_pyproject
    return None, None


def first_setup_py_folder(ancestor: Path) -> Path | None:
    return next((base for base in (ancestor, *ancestor.parents) if (base / "setup.py").is_file()), None)


def determine_setup(
    inifile: str | None, args: Sequence[str], rootdir_arg: str | None, invocation_dir: Path
) -> tuple[Path, Path | None]:
    """(rootdir, configfile) for these free arguments, ``-c`` and ``--rootdir``, in pytest's order."""
    folders = folders_of(args)
    rootdir: Path | None
    inipath: Path | None
    if inifile:
        inipath = absolute(inifile)
        rootdir = inipath.parent
        if NON_FILE_CONFIG_ROOTS_AT_ARGS and not inipath.is_file():
            rootdir = common_ancestor(invocation_dir, folders)
            rootdir = invocation_dir if is_fs_root(rootdir) else rootdir
    else:
        ancestor = common_ancestor(invocation_dir, folders)
        rootdir, inipath = locate_config([ancestor])
        if rootdir is None and not rootdir_arg:
            rootdir = first_setup_py_folder(ancestor)
            if rootdir is None and folders != [ancestor]:
                rootdir, inipath = locate_config(folders)
            if rootdir is None:
                rootdir = common_ancestor(invocation_dir, [invocation_dir, ancestor])
                rootdir = ancestor if is_fs_root(rootdir) else rootdir
    if rootdir_arg:
        rootdir = absolute(os.path.expandvars(rootdir_arg))
    assert rootdir is not None
    return rootdir, inipath


def is_fs_root(path: Path) -> bool:
    return os.path.splitdrive(str(path))[1] == os.sep


def setup_without_option_values(
    config: pytest.Config, parser: pytest.Parser, args: Sequence[str]
) -> tuple[Path, Path | None]:
    """rootdir and ini file as pytest would find them had it known the plugin's options."""
    ns = parser.parse_known_args(list(args))
    return determine_setup(ns.inifilename, ns.file_or_dir, ns.rootdir or None, config.invocation_params.dir)


def space_form_error(
    config: pytest.Config, parser: pytest.Parser, args: Sequence[str], options: Iterable[Option]
) -> str | None:
    """The usage error to raise, or None when every option value left pytest's setup alone and no path option was
    written with a space.

    A path option's space form is refused even when its path does not exist (yet): the same command line would be
    refused the day it does (a resumed run's folder, a report folder made by the first run)."""
    options = tuple(options)
    culprits = space_form_values(args, options)
    if not culprits:
        return None
    rootpath, inipath = setup_without_option_values(config, parser, args)
    if (rootpath, inipath) == (config.rootpath, config.inipath):
        return space_form_path_error(culprits, {o.flag for o in options if o.kind == "path"})
    written = ", ".join(f"'{flag} {value}'" for flag, value in culprits)
    ignored = ([f"the ini file {inipath}"] if inipath else []) + [
        f"the conftest.py files under {inipath.parent if inipath else rootpath}"
    ]
    return (
        f"agentbench: pytest read the value in {written} as a test path before the plugin's options were "
        f"known, which moved the rootdir to {config.rootpath} (it should be {rootpath}); "
        f"{' and '.join(ignored)} would be ignored. Write the option with '=': {equals_form(culprits)}"
    )


def equals_form(culprits: Sequence[tuple[str, str]]) -> str:
    return " ".join(f"{flag}={shlex.quote(value)}" for flag, value in culprits)


def space_form_path_error(culprits: Sequence[tuple[str, str]], path_flags: set[str]) -> str | None:
    """The usage error for path options written ``--flag PATH``, whose PATH left the setup alone."""
    paths = [(flag, value) for flag, value in culprits if flag in path_flags]
    if not paths:
        return None
    written = ", ".join(f"'{flag} {value}'" for flag, value in paths)
    return (
        f"agentbench: {written}: a path option takes its value after '=': pytest reads a separate value as a "
        f"test path before the plugin's options are known, and once that path exists it moves the rootdir and "
        f"the project's ini file and conftest.py are ignored, so the space form is refused whether or not the "
        f"path exists. Write the option with '=': {equals_form(paths)}"
    )
