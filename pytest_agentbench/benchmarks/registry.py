"""Benchmarks are found through entry points, by name, and each is loaded only when it is asked for.

Two entry-point groups: ``pytest_agentbench.benchmarks`` names each benchmark (``name = "pkg.module:obj"``, a
``Benchmark`` or its class) and ``pytest_agentbench.options`` its option declarations (``name =
"pkg.options:OPTIONS"``, a tuple of ``Option``). The plugin reads the declarations in every pytest run, to
register the flags and ini keys; a benchmark itself (its runtime: numpy, h5py, its solvers) is loaded only by a run
that names it (``get_benchmark``). A benchmark that declares no options entry point has its options read off the
benchmark object, which loads it.

What is read is kept for the process: every later caller gets the same benchmark objects, so an entry point that
names a class is instantiated once and keeps its per-run caches. ``reload`` reads the entry points again: for
tests that install a benchmark after the first read.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError, choose

if TYPE_CHECKING:
    from ..core.options import Option
    from .base import Benchmark, Registered

ENTRY_POINT_GROUP = "pytest_agentbench.benchmarks"
OPTIONS_GROUP = "pytest_agentbench.options"


def benchmark_names() -> tuple[str, ...]:
    """The names of the installed benchmarks (their entry points), none of them loaded."""
    return tuple(sorted(_entry_points(ENTRY_POINT_GROUP)))


def declared_options() -> tuple[Option, ...]:
    """Every installed benchmark's own options, in name order, without loading a benchmark that declares them
    through the options entry point. A declaration that fails to load is left out (the benchmark is an error only
    when a run asks for it, ``get_benchmark``)."""
    return _declared_options()


def get_benchmark(name: str) -> Benchmark:
    """The benchmark ``--bench`` names, loaded now (only it); a ConfigError naming the installed ones if none is
    called so, or the reason it failed to load."""
    points = _entry_points(ENTRY_POINT_GROUP)
    if name not in points:  # an entry point named unlike its benchmark: look through all of them
        registered = available_benchmarks()
        if name in registered.found:
            return registered.found[name]
        choose(sorted({*registered.found, *points}), name, "benchmark (--bench)")
    loaded = _load(name)
    if isinstance(loaded, str):
        raise ConfigError(loaded)
    return loaded


def available_benchmarks() -> Registered:
    """Every installed benchmark, loaded, keyed by ``--bench`` name, and the ones that failed to load.

    The plugin is active in every pytest run of an environment it is installed in, so a broken
    benchmark package must not break unrelated runs: it is only an error when it is asked for.
    """
    return _load_all()


@cache
def _load_all() -> Registered:
    from .base import Registered  # why: the benchmark base imports the layers below; a run without --bench skips it

    out = Registered()
    for name in sorted(_entry_points(ENTRY_POINT_GROUP)):
        loaded = _load(name)
        if isinstance(loaded, str):
            out.broken[name] = loaded
        else:
            out.found[loaded.name] = loaded
    return out


def reload() -> Registered:
    """Tests only: forget what was read and read the entry points again (a benchmark installed since)."""
    _groups.cache_clear()
    _load.cache_clear()
    _declared_options.cache_clear()
    _load_all.cache_clear()
    return available_benchmarks()


def _entry_points(group: str) -> dict[str, EntryPoint]:
    return _groups().get(group, {})


@cache
def _groups() -> dict[str, dict[str, EntryPoint]]:
    """Both groups' entry points, from one pass over the installed distributions (each pass costs a pytest start
    some 0.05 s)."""
    found = entry_points()
    return {group: {ep.name: ep for ep in found.select(group=group)} for group in (ENTRY_POINT_GROUP, OPTIONS_GROUP)}


@cache
def _load(name: str) -> Benchmark | str:
    """The benchmark of entry point ``name``, or why it could not be loaded."""
    from .base import Benchmark  # why: the benchmark base imports the layers below; only a loaded benchmark needs it

    ep = _entry_points(ENTRY_POINT_GROUP)[name]
    try:
        obj: Any = ep.load()
    except Exception as exc:
        return f"benchmark entry point {ep.name!r} ({ep.value}) failed to load: {exc!r}"
    bench = obj() if isinstance(obj, type) else obj
    if not isinstance(bench, Benchmark):
        return f"benchmark entry point {ep.name!r} ({ep.value}) is not a pytest_agentbench.benchmarks.base.Benchmark"
    return bench


@cache
def _declared_options() -> tuple[Option, ...]:
    declarations = _entry_points(OPTIONS_GROUP)
    out: list[Option] = []
    for name in benchmark_names():
        out += _options_of(name, declarations.get(name))
    return tuple(out)


def _options_of(name: str, declaration: EntryPoint | None) -> tuple[Option, ...]:
    """Benchmark ``name``'s options: its options entry point's, else the loaded benchmark's; none when they fail to
    load (a broken package is an error only when a run asks for it)."""
    if declaration is None:
        loaded = _load(name)  # no declarations of its own: the benchmark object holds them
        return () if isinstance(loaded, str) else tuple(loaded.options)
    try:
        return tuple(declaration.load())
    except Exception:
        return ()
