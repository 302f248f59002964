"""Which back-end runs a run's tasks, and what one task asks of it: engine-neutral, so a benchmark states its
tasks' needs (``Benchmark.job_request``) without knowing any scheduler. A back-end (``backends/slurm/``) turns a
``JobRequest`` into its own terms (sbatch arguments, for Slurm).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .options import Option

BACKENDS = ("local", "slurm")
TIME_MARGIN = 600.0  # seconds a job gets beyond its items' limits: start-up, data checks, model calls' slack
HARNESS_MIB = 1024  # memory the job's own Python needs beyond what it allows the code it runs

BACKEND_OPTIONS: tuple[Option, ...] = (
    Option(
        "backend",
        "--bench-backend",
        kind="choice",
        choices=BACKENDS,
        default="local",
        ini="agentbench_backend",
        env="AGENTBENCH_BACKEND",
        metavar="BACKEND",
        help="where tasks run: local (this pytest session and its xdist workers) or slurm (one job array "
        "element per task; the run folder must be on a file system the nodes share; see docs/distributed.md).",
        free_on_resume=True,
    ),
)


@dataclass(frozen=True)
class BackendOptions:
    """The back-end choice, typed (``view(BackendOptions, opts)``); one field per option of BACKEND_OPTIONS."""

    OPTIONS: ClassVar[tuple[Option, ...]] = BACKEND_OPTIONS
    backend: str


@dataclass(frozen=True)
class JobRequest:
    """What one task (its samples, in order) asks of the engine that runs it: CPUs, memory, a GPU, time."""

    cpus: int = 1
    memory_mib: int = 4096
    gpu: bool = False
    seconds: float = 3600.0
