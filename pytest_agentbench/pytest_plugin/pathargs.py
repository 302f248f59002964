"""Catch an option value that pytest took for a test path.

pytest works out the rootdir, the ini file and the conftest cut-off before plugins are loaded, so in
``--bench-report-dir /tmp/x`` (a space, not ``=``) it reads ``/tmp/x`` as a test path when that folder
exists. The project's ini file and conftest.py are then silently ignored. Once the plugin is loaded
its options are known: the setup is worked out again with their values removed from the free
arguments, and a difference is a usage error naming the option and the ``--option=value`` form.
Recovering silently is not offered: addopts, ``-p`` and the cache dir were already derived from the
wrong ini file.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
from _pytest.config.findpaths import determine_setup

from ..core.options import Option


def space_form_values(args: Sequence[str], options: Iterable[Option]) -> list[tuple[str, str]]:
    """``(flag, value)`` for every plugin option written as ``--flag value`` in ``args``."""
    flags = {o.flag for o in options if o.takes_value}
    return [(flag, value) for flag, value in zip(args, args[1:]) if flag in flags and not value.startswith("-")]


def setup_without_option_values(config: pytest.Config, args: Sequence[str]) -> tuple[Path, Path | None]:
    """rootdir and ini file as pytest would find them had it known the plugin's options."""
    ns = config._parser.parse_known_args(list(args))
    given = {
        "inifile": ns.inifilename,
        "override_ini": getattr(ns, "override_ini", None),
        "args": ns.file_or_dir,
        "rootdir_cmd_arg": ns.rootdir or None,
        "invocation_dir": config.invocation_params.dir,
    }
    # pytest 8.0 takes no override_ini and returns 3 values, later releases take it (keyword-only) and return 4
    accepted = inspect.signature(determine_setup).parameters
    found = determine_setup(**{name: value for name, value in given.items() if name in accepted})
    return found[0], found[1]


def space_form_error(config: pytest.Config, args: Sequence[str], options: Iterable[Option]) -> str | None:
    """The usage error to raise, or None when every option value left pytest's setup alone."""
    culprits = space_form_values(args, options)
    if not culprits:
        return None
    rootpath, inipath = setup_without_option_values(config, args)
    if (rootpath, inipath) == (config.rootpath, config.inipath):
        return None
    written = ", ".join(f"'{flag} {value}'" for flag, value in culprits)
    fixed = " ".join(f"{flag}={value}" for flag, value in culprits)
    ignored = ([f"the ini file {inipath}"] if inipath else []) + [
        f"the conftest.py files under {inipath.parent if inipath else rootpath}"
    ]
    return (
        f"agentbench: pytest read the value in {written} as a test path before the plugin's options were "
        f"known, which moved the rootdir to {config.rootpath} (it should be {rootpath}); "
        f"{' and '.join(ignored)} would be ignored. Write the option with '=': {fixed}"
    )
