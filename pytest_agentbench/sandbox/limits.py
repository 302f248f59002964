"""The limits of one child run (``Limits``) and how a child takes them on (rlimits, its environment).

Plain standard library only: the subprocess launchers import this module with ``python -S``.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GiB = 1 << 30
MiB = 1 << 20
DEFAULT_MEMORY_LIMIT = 4 * GiB
DEFAULT_OUTPUT_LIMIT = 64 * 1024  # bytes kept per stream, half from the head, half from the tail
DEFAULT_OUTPUT_CAP = 256 * MiB  # bytes a stream may reach before the script is stopped
DEFAULT_MAX_PROCESSES = 256
DEFAULT_DISK_LIMIT = 1 * GiB  # size of an isolated child's private /tmp (its work folder included)
LIMIT_NAMES = ("wall", "memory", "cpu", "processes", "output")
# The environment a child inherits is an allowlist: where programs are, the locale, its home and temporary
# folder (under isolation its own /tmp, ``isolation.child_environment``), the number of threads and whether
# Python's output is buffered (a script killed mid-run keeps what it printed, as today); every other
# name of ours (the model's key, a database URL, a webhook, a token under any name) stays with the controller.
# A benchmark's or environment's own names come on top (``child_env``'s ``extra``).
PASSED_ENV = ("PATH", "LANG", "LANGUAGE", "HOME", "TMPDIR", "PYTHONUNBUFFERED")
PASSED_ENV_PREFIXES = ("LC_",)
THREAD_ENV = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "NUMEXPR_MAX_THREADS",
    "NUMBA_NUM_THREADS",
)
# what every child is given, whatever ours says
CHILD_SETTINGS = {"MPLBACKEND": "Agg", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}


def passes_to_children(name: str) -> bool:
    """Whether a child inherits our variable ``name`` (the allowlist above)."""
    return name in PASSED_ENV or name in THREAD_ENV or name.startswith(PASSED_ENV_PREFIXES)


def passed_env_names() -> list[str]:
    """The names a child may inherit, as the run's settings page shows them."""
    return [
        *PASSED_ENV,
        *(prefix + "*" for prefix in PASSED_ENV_PREFIXES),
        *THREAD_ENV,
        *CHILD_SETTINGS,
        "PYTHONPATH (scoring and tool scripts: this package's folder only)",
    ]


@dataclass(frozen=True)
class Limits:
    timeout: float = 1800.0
    memory: int | None = DEFAULT_MEMORY_LIMIT
    cpu: float | None = None  # defaults to the wall-clock timeout
    processes: int | None = DEFAULT_MAX_PROCESSES
    output: int = DEFAULT_OUTPUT_LIMIT
    output_cap: int = DEFAULT_OUTPUT_CAP
    disk: int | None = DEFAULT_DISK_LIMIT  # bytes of the private /tmp under isolation (None: no cap)
    hidden: tuple[str, ...] = ()  # paths an isolated child must not see (the data dir, the cache, ...)

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(str(p) for p in self.hidden))
        if not self.timeout or self.timeout <= 0:
            raise ValueError(f"Limits.timeout must be a positive number of seconds, got {self.timeout!r}")
        if self.processes is not None and self.processes < 1:
            raise ValueError(f"Limits.processes must be at least 1 (or None), got {self.processes!r}")
        if self.output < 2:
            raise ValueError(f"Limits.output must be at least 2 bytes, got {self.output!r}")


def apply_child_limits(limits: Limits) -> None:
    """Set the rlimits of the calling process (the child, before any untrusted code runs)."""
    if limits.memory:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory, limits.memory))
    cpu = int(limits.cpu or limits.timeout) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    if limits.processes and os.getuid() != 0:
        # RLIMIT_NPROC counts every process of the user, so it is a ceiling on a fork bomb, not a quota.
        soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        want = limits.processes if hard == resource.RLIM_INFINITY else min(limits.processes, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (want, want))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_cap, limits.output_cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def enter_jail(spec: dict[str, Any]) -> None:
    """In a launcher process: join the run's pids cgroup (when it has one), then take on its rlimits.

    ``spec`` is the launcher's JSON argument: ``cgroup`` (a folder or "") and ``limits`` (Limits fields).
    """
    join_cgroup(spec.get("cgroup"))
    apply_child_limits(Limits(**spec["limits"]))


def join_cgroup(cgroup: str | None) -> None:
    """Move the calling process into the cgroup folder ``cgroup`` (nothing when it is empty)."""
    if cgroup:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as fh:
            fh.write("0")  # "0": the writer itself, whatever PID namespace it is in


def package_parent() -> str:
    """The folder holding the ``pytest_agentbench`` package: launchers run with ``-S`` (fast start, no
    site), so they need the package's location explicitly on PYTHONPATH."""
    return str(Path(__file__).resolve().parents[2])


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child: the allowlisted names of ours (``passes_to_children``), the fixed settings,
    then ``extra`` (what the benchmark or environment declares)."""
    env = {k: v for k, v in os.environ.items() if passes_to_children(k)}
    env.update(CHILD_SETTINGS, OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"))
    if extra:
        bad = [k for k, v in extra.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise TypeError(f"env for the sandboxed script must map str to str; fix the entries {bad!r}")
        env.update(extra)
    return env
