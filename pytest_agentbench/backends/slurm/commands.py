"""Slurm, driven through its commands (``sbatch``, ``squeue``, ``scancel``) by subprocess: no Python binding tied
to one Slurm version, no accounting needed. Plain functions and the Slurm options (``--bench-slurm-*``,
``--bench-set=detach=true``; the choice of back-end and the engine-neutral ``JobRequest`` are ``core/jobs.py``);
the pytest side is ``pytest_plugin/slurm/``.

A run's tasks go out as job arrays, one per distinct request (CPUs, memory, GPU, time): element ``i`` of an
array runs the ``i``-th line of the array's unit list. What was submitted is kept in ``spool/jobs.json`` so a
later ``collect`` can tell a job that ended without a package (lost) from one still running.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ...core.io import write_atomic
from ...core.jobs import JobRequest
from ...core.options import Option
from .spool import SECRET_FILE

KEY_SOURCES = ("file", "node-env")
JOBS_FILE = "jobs.json"
# Job states after which an array element does nothing more (a requeued element goes back to PENDING).
ENDED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
WHY = {
    "TIMEOUT": "it hit its time limit",
    "CANCELLED": "it was cancelled",
    "NODE_FAIL": "its node failed",
    "OUT_OF_MEMORY": "it ran out of memory",
    "PREEMPTED": "it was preempted",
    "FAILED": "it failed",
    "COMPLETED": "it ended",
    "BOOT_FAIL": "its node did not boot",
    "DEADLINE": "it passed its deadline",
}

SLURM_OPTIONS: tuple[Option, ...] = (
    Option(
        "slurm_partition",
        "--bench-slurm-partition",
        ini="agentbench_slurm_partition",
        metavar="NAME",
        help="Slurm partition for the run's jobs (sbatch --partition; default: the cluster's).",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "slurm_account",
        "--bench-slurm-account",
        ini="agentbench_slurm_account",
        metavar="NAME",
        help="Slurm account charged for the run's jobs (sbatch --account).",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "slurm_max_running",
        "--bench-slurm-max-running",
        kind="int",
        default=None,
        minimum=1,
        ini="agentbench_slurm_max_running",
        metavar="N",
        help="at most N of the run's tasks run at once (the job array's %N; default: no limit).",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "slurm_args",
        "--bench-slurm-args",
        ini="agentbench_slurm_args",
        metavar="ARGS",
        help="further sbatch arguments for every task's job, shell-quoted (e.g. '--qos=long --constraint=a100'); "
        "they come after the requests pytest-agentbench makes, so they win.",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "slurm_key",
        "--bench-slurm-key",
        kind="choice",
        choices=KEY_SOURCES,
        default="file",
        ini="agentbench_slurm_key",
        help="how a job gets the API key: file (a file in the run's spool only you can read, mode 0600, "
        "removed by collect) or node-env (the job's own $OPENAI_API_KEY on the node; nothing is written). "
        "The key is never in a job script or in the environment Slurm stores.",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "detach",
        "--bench-detach",
        kind="bool",
        default=False,
        negatable=True,
        ini="agentbench_detach",
        help="with --bench-backend=slurm: exit 0 once the tasks are submitted, printing the job ids and the "
        "collect command; a dependent job runs `python -m pytest_agentbench collect RUN_DIR` when they end.",
        free_on_resume=True,
        shown=False,
    ),
)


@dataclass(frozen=True)
class SlurmOptions:
    """The backend's settings, typed (``view(SlurmOptions, opts)``); one field per option of SLURM_OPTIONS."""

    OPTIONS: ClassVar[tuple[Option, ...]] = SLURM_OPTIONS
    slurm_partition: str | None
    slurm_account: str | None
    slurm_max_running: int | None
    slurm_args: str | None
    slurm_key: str
    detach: bool


class SlurmError(RuntimeError):
    """A Slurm command failed; the message is Slurm's own."""


def sbatch_args(request: JobRequest) -> list[str]:
    """A task's request in sbatch's terms."""
    minutes = max(1, math.ceil(request.seconds / 60))
    args = [f"--cpus-per-task={request.cpus}", f"--mem={request.memory_mib}M", f"--time={minutes}"]
    return args + (["--gres=gpu:1"] if request.gpu else [])


def group_requests(requests: Mapping[str, JobRequest]) -> dict[JobRequest, list[str]]:
    """Units by the array they go out in: one array per CPUs/memory/GPU shape (so --bench-set slurm_max_running
    limits as few arrays as possible), each with the longest time any of its tasks needs."""
    shapes: dict[tuple[int, int, bool], list[str]] = {}
    for unit, request in requests.items():
        shapes.setdefault((request.cpus, request.memory_mib, request.gpu), []).append(unit)
    return {
        JobRequest(cpus, memory, gpu, max(requests[u].seconds for u in units)): units
        for (cpus, memory, gpu), units in shapes.items()
    }


def run(args: list[str], *, env: Mapping[str, str] | None = None, timeout: float = 60.0) -> str:
    """A Slurm command's stdout; SlurmError with its stderr when it fails or is missing."""
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, env=dict(env) if env is not None else None, timeout=timeout
        )
    except FileNotFoundError:
        raise SlurmError(
            f"{args[0]} is not installed here: --bench-backend=slurm submits from a machine with "
            f"the Slurm commands (a login node)"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(args[:2])} did not answer within {timeout:.0f} s") from None
    if done.returncode != 0:
        text = done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}"
        raise SlurmError(text)
    return done.stdout


def clean_env(secrets: Iterable[str | None], names: Iterable[str]) -> dict[str, str]:
    """This process's environment without the secret options' variables (``names``) and any variable holding a
    secret's value: what sbatch exports is stored by Slurm."""
    values = {s for s in secrets if s}
    drop = set(names)
    return {k: v for k, v in os.environ.items() if k not in drop and v not in values}


def common_args(partition: str | None, account: str | None, extra: str | None) -> tuple[list[str], list[str]]:
    """(before, after): partition/account, and the user's own arguments (last, so they win)."""
    before = ([f"--partition={partition}"] if partition else []) + ([f"--account={account}"] if account else [])
    return before, shlex.split(extra or "")


def job_script(python: str, run_dir: Path, unit_list: Path, login: bool = False) -> str:
    """The array's job script: names only the run folder and the unit list (never a secret). ``login``
    (``--bench-set=slurm_key=node-env``): a login shell, so the user's own start-up files on the node set the key."""
    shell = "#!/bin/bash -l" if login else "#!/bin/sh"
    return (
        f"{shell}\n# pytest-agentbench: one element of this array runs one task of the run\n"
        f"exec {shlex.quote(python)} -m pytest_agentbench run-task {shlex.quote(str(run_dir))} "
        f'--list {shlex.quote(str(unit_list))} --index "$SLURM_ARRAY_TASK_ID"\n'
    )


def submit_array(
    script: Path,
    count: int,
    request: JobRequest,
    *,
    name: str,
    log_dir: Path,
    cwd: str,
    max_running: int | None,
    before: list[str],
    after: list[str],
    env: Mapping[str, str],
) -> str:
    """Submit one array of ``count`` elements; its job id."""
    array = f"--array=0-{count - 1}" + (f"%{max_running}" if max_running else "")
    args = [
        "sbatch",
        "--parsable",
        array,
        f"--job-name={name}",
        "--requeue",
        "--open-mode=append",
        f"--output={log_dir}/%A_%a.out",
        f"--chdir={cwd}",
        "--export=ALL",
        *before,
        *sbatch_args(request),
        *after,
        str(script),
    ]
    return run(args, env=env).strip().split(";")[0]


def submit_wrap(
    command: str,
    *,
    name: str,
    output: str,
    cwd: str,
    before: list[str],
    env: Mapping[str, str],
    dependency: str | None = None,
) -> str:
    args = [
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        f"--output={output}",
        f"--chdir={cwd}",
        "--export=ALL",
        "--time=10",
        "--mem=1024M",
        *before,
    ]
    if dependency:
        args.append(f"--dependency={dependency}")
    return run([*args, "--wrap", command], env=env).strip().split(";")[0]


def job_state(job: str) -> str:
    """The job's state as squeue gives it (``COMPLETED``, ``PENDING``, ...), or "" once Slurm no longer knows it."""
    out = run(["squeue", "-h", "--states=all", "-j", job, "-o", "%T"]).split()
    return out[0] if out else ""


def save_jobs(spool: Path, arrays: list[dict[str, Any]]) -> None:
    """Append this submission's arrays (job id, units in element order) to the spool's jobs file."""
    known = load_jobs(spool)
    write_atomic(spool / JOBS_FILE, json.dumps(known + arrays, indent=1), durable=True)


def load_jobs(spool: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads((Path(spool) / JOBS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, list):
        return []
    return [a for a in data if isinstance(a, dict) and isinstance(a.get("units"), list)]


def latest_elements(arrays: list[dict[str, Any]]) -> dict[str, tuple[str, int]]:
    """unit -> (array job id, element index) of its latest submission."""
    out: dict[str, tuple[str, int]] = {}
    for array in arrays:
        for index, unit in enumerate(array["units"]):
            out[str(unit)] = (str(array["job"]), index)
    return out


def element_states(job_ids: Iterable[str]) -> dict[tuple[str, int], tuple[str, str, str]]:
    """(array job id, index) -> (state, nodes, reason) of every element squeue still knows."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    out = run(["squeue", "-h", "-r", "--states=all", "-j", ",".join(ids), "-o", "%F|%K|%T|%N|%r"])
    found: dict[tuple[str, int], tuple[str, str, str]] = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 5 or not parts[1].isdigit():
            continue
        found[(parts[0], int(parts[1]))] = (parts[2], parts[3], parts[4])
    return found


def log_says(log_dir: Path | None, label: str) -> str:
    """The last error line of an element's job log (a usage error on the node, Slurm's own cancel line), or ""."""
    if log_dir is None:
        return ""
    try:
        with open(Path(log_dir) / f"{label}.out", "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 65536))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    found = [line.strip() for line in lines if line.startswith("ERROR:") or "error: " in line]
    return f"; its log says: {found[-1][:400]}" if found else ""


def ended_without_package(
    units: set[str], arrays: list[dict[str, Any]], log_dir: Path | None = None
) -> dict[str, tuple[str, str, str]]:
    """unit -> (lost message, worker, host) for each of ``units`` whose job element has ended (or is no longer
    known to Slurm); the caller has checked that no package came."""
    latest = {u: e for u, e in latest_elements(arrays).items() if u in units}
    states = element_states(job for job, _ in latest.values())
    out = {}
    for unit, (job, index) in latest.items():
        state, node, reason = states.get((job, index), ("", "", ""))
        base = state.split()[0] if state else ""
        if state and base not in ENDED_STATES:
            continue
        label = f"{job}_{index}"
        if not state:
            message = (
                f"Slurm job {label} is no longer known to Slurm and wrote no package (it ended before "
                f"squeue was asked); no result reached the controller: --bench-resume submits it again"
            )
        else:
            why = WHY.get(base, base.lower())
            message = (
                f"Slurm job {label} ended {base} on node {node or '?'} ({why}"
                + (f"; reason {reason}" if reason and reason != "None" else "")
                + f") without a package{log_says(log_dir, label)}; no result reached the controller: "
                f"--bench-resume submits it again"
            )
        out[unit] = (message, f"slurm {label}", node or "?")
    return out


def write_secret(spool: Path, secrets: Mapping[str, str]) -> Path:
    """The run's secret option values (``{option name: value}``, JSON) in a file only its owner can read
    (created 0600, never widened)."""
    path = Path(spool) / SECRET_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, json.dumps({"secrets": dict(secrets)}).encode("utf-8"))
    finally:
        os.close(fd)
    return path


def read_secret(path: Path, legacy_names: Sequence[str]) -> dict[str, str]:
    """What ``write_secret`` wrote: ``{option name: value}``; nothing when there is no file. A file of an earlier
    release holds one bare value, its only secret option's: it is given to ``legacy_names`` (the secret options
    that read an environment variable, as that one did)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("secrets"), dict):
        return {str(k): str(v) for k, v in data["secrets"].items() if v}
    return {name: text for name in legacy_names} if text else {}
