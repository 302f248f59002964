"""Options every run shares: which benchmark, split and items, where data, cache and reports live."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .options import Option

CACHE_APP = "pytest-agentbench"  # the per-user cache folder's name under $XDG_CACHE_HOME (~/.cache)
LEGACY_CACHE_DIR = ".agentbench_cache"  # the default of earlier releases, in the rootdir


def user_cache_dir(env: Mapping[str, str]) -> Path:
    """The per-user cache folder: ``$XDG_CACHE_HOME/pytest-agentbench`` (an absolute ``XDG_CACHE_HOME`` only, as
    the XDG base directory specification says), else ``~/.cache/pytest-agentbench``. One folder for every run
    of the user, wherever pytest starts: a run file run from another folder reuses its targets and answers."""
    xdg = env.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / CACHE_APP
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".cache" / CACHE_APP


def default_cache_dir(env: Mapping[str, str], rootdir: Path) -> Path:
    """``--bench-cache-dir``'s default: a ``.agentbench_cache/`` an earlier release made in the rootdir while it
    is there (its rebuilt targets and answers stay usable; the run says so), else the per-user folder."""
    legacy = Path(rootdir) / LEGACY_CACHE_DIR
    if legacy.is_dir():
        return legacy
    return user_cache_dir(env)


def legacy_cache_note(cache_dir: Path, origin: str, rootdir: Path) -> str | None:
    """What the run says when it uses an earlier release's folder-local cache by default, else None."""
    if origin != "default" or Path(cache_dir) != Path(rootdir) / LEGACY_CACHE_DIR:
        return None
    return (
        f"cache: using {cache_dir}, the folder-local cache of an earlier release; the default is now one "
        f"folder per user ($XDG_CACHE_HOME/{CACHE_APP}, else ~/.cache/{CACHE_APP}): move it there to share it "
        f"with runs started elsewhere, or keep it with --bench-cache-dir"
    )


RUN_OPTIONS: tuple[Option, ...] = (
    Option(
        "bench",
        "--bench",
        "benchmark to run (an installed benchmark's name); without it the plugin does nothing.",
        ini="agentbench_bench",
        metavar="NAME",
        help_group="selection",
    ),
    Option(
        "config",
        "--bench-config",
        "run file (YAML or JSON) with the run's options, models, agents, gates and pytest selection "
        "(sections bench, models, agents, gates, pytest; `python -m pytest_agentbench init` writes an example); "
        "several models or agents run in one session, each (model, agent) pair its own run, unless --model "
        "and --bench-agent pick one; "
        "the command line and the environment win over it, it wins over the ini file.",
        kind="path",
        exists="file",
        ini="agentbench_config",
        env="AGENTBENCH_CONFIG",
        metavar="FILE",
        runfile_group=None,
        stored=False,
        help_group="selection",
    ),
    Option(
        "split",
        "--bench-split",
        "benchmark split (default: the benchmark's own default split).",
        ini="agentbench_split",
        metavar="SPLIT",
        help_group="selection",
    ),
    Option(
        "dataset",
        "--bench-dataset",
        "which data set of the benchmark (default: the benchmark's own default); each benchmark declares its choices.",
        ini="agentbench_dataset",
        metavar="NAME",
        help_group="selection",
    ),
    Option(
        "ids",
        "--bench-ids",
        "exact selection, comma separated: a task id (77) or a sample id (77.3). Unlike -k, 7 does not match 17 or 70.",
        kind="list",
        ini="agentbench_ids",
        metavar="IDS",
        help_group="selection",
    ),
    Option(
        "data_dir",
        "--bench-data-dir",
        "folder holding the upstream data files (default $AGENTBENCH_DATA_DIR, else ./data); "
        "missing files are downloaded into it from pinned URLs and checked by sha256.",
        kind="path",
        default="data",
        ini="agentbench_data_dir",
        env="AGENTBENCH_DATA_DIR",
        metavar="DIR",
        free_on_resume=True,
        private=True,
        help_group="selection",
    ),
    Option(
        "cache_dir",
        "--bench-cache-dir",
        "cache folder (a relative path is taken from the rootdir): model responses, files a benchmark derives "
        "from its data, checksum stamps (default $AGENTBENCH_CACHE_DIR, else one folder per user: "
        "$XDG_CACHE_HOME/pytest-agentbench, else ~/.cache/pytest-agentbench; a .agentbench_cache/ folder "
        "an earlier release left in the rootdir is used while it is there).",
        kind="path",
        default=default_cache_dir,
        relative_to="rootdir",
        ini="agentbench_cache_dir",
        env="AGENTBENCH_CACHE_DIR",
        metavar="DIR",
        free_on_resume=True,
        private=True,
    ),
    Option(
        "report_dir",
        "--bench-report-dir",
        "folder for run reports: <dir>/<benchmark>/<model>/<run-id>/ (default reports/).",
        kind="path",
        default="reports",
        ini="agentbench_report_dir",
        metavar="DIR",
        free_on_resume=True,
        private=True,
        help_group="gates",
    ),
    Option(
        "run_id",
        "--bench-run-id",
        "name of this run's report folder (default: UTC timestamp plus a random suffix).",
        ini="agentbench_run_id",
        metavar="ID",
        stored=False,
        help_group="gates",
    ),
    Option(
        "timeout",
        "--bench-timeout",
        "seconds allowed for scoring one item in its child process (default 1800, as upstream).",
        kind="float",
        default=1800.0,
        minimum=0,
        exclusive_minimum=True,
        ini="agentbench_timeout",
        metavar="SECONDS",
        free_on_resume=True,
    ),
    Option(
        "max_consecutive_errors",
        "--bench-max-consecutive-errors",
        "stop the run (as -x does, writing complete reports of what finished, labelled incomplete) after N "
        "items in a row ended in model_error, counted across all workers under -n in the order they finish "
        "(no more work is handed out; workers finish the items they hold); eval_error and env_error never stop "
        "a run; 0 never stops (default 10).",
        kind="int",
        default=10,
        minimum=0,
        ini="agentbench_max_consecutive_errors",
        metavar="N",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "allow_custom_data",
        "--bench-allow-custom-data",
        "accept data files whose sha256 differs from the pinned upstream files (a hand-made dataset, "
        "a custom test_data.h5); the report says so.",
        kind="bool",
        default=False,
        ini="agentbench_allow_custom_data",
        help_group="selection",
        shown=False,
    ),
    Option(
        "allow_version_skew",
        "--bench-allow-version-skew",
        "let a remote worker host take part although its pytest, pytest-xdist, execnet, numpy, scipy or h5py "
        "version differs from the controller's (by default such a host is refused with the difference "
        "named: the first three speak the worker protocol, the last three can change verdicts).",
        kind="bool",
        default=False,
        ini="agentbench_allow_version_skew",
        help_group="distribution",
        shown=False,
    ),
    Option(
        "host_timeout",
        "--bench-host-timeout",
        "seconds after which a remote worker host that stopped answering is declared lost (default 40): its "
        "in-flight items get lost records and its tasks not begun go to the other hosts; a worker that hears "
        "nothing from its controller for as long stops, its sandboxes with it.",
        kind="float",
        default=40.0,
        minimum=4,
        maximum=600,
        ini="agentbench_host_timeout",
        metavar="SECONDS",
        help_group="distribution",
        shown=False,
    ),
    Option(
        "attempts",
        "--bench-attempts",
        "run every task K times as independent samples (default 1): items are named <id>[attemptN], "
        "attempt N replays the same cached responses, and the summary gives the mean of each headline "
        "metric over attempts with its standard error and pass@k for k = 1..K.",
        kind="int",
        default=1,
        minimum=1,
        ini="agentbench_attempts",
        metavar="K",
    ),
    Option(
        "max_retries",
        "--bench-max-retries",
        "run an item again, up to N times, when it ends in an infrastructure failure (model_error, "
        "env_error, eval_error, error, blocked); cached model answers are reused and the record keeps every try "
        "(default 0).",
        kind="int",
        default=0,
        minimum=0,
        ini="agentbench_max_retries",
        metavar="N",
        shown=False,
    ),
)


@dataclass(frozen=True)
class RunOptions:
    """The run's shared settings, typed (``view(RunOptions, opts)``); one field per option of RUN_OPTIONS."""

    OPTIONS: ClassVar[tuple[Option, ...]] = RUN_OPTIONS
    bench: str | None
    config: Path | None
    split: str | None
    dataset: str | None
    ids: tuple[str, ...]
    data_dir: Path
    cache_dir: Path
    report_dir: Path
    run_id: str | None
    timeout: float
    max_consecutive_errors: int
    allow_custom_data: bool
    allow_version_skew: bool
    host_timeout: float
    attempts: int
    max_retries: int
