"""SciCode's options, declared once (flag, ini key, type, default, help).

The plugin reads these declarations in every pytest run, to register the flags and ini keys: this module imports
nothing of the benchmark's runtime (``bench.py`` and what it uses do).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...core.options import Option
from . import verified

DEFAULT_DATA_URL = "http://opencompass.oss-cn-shanghai.aliyuncs.com/datasets/agentcompass/scicode.zip"
MODES = ("tool_use", "naive")  # of the chat harness (generate.py)
OWNER = "scicode"
AUTO, OFFICIAL, REBUILT, VERIFIED = "auto", "official", "rebuilt", "verified"  # --bench-targets
TARGET_CHOICES = (AUTO, OFFICIAL, REBUILT, VERIFIED)
DATASETS = (OFFICIAL, VERIFIED)  # --bench-dataset
ALL_CATEGORIES = "all"
# bytes of one decoded operand: the codec's own bound (``sandbox.codec.DEFAULT_MAX_BYTES``), not imported from it
# (declaring the options must not load the codec; a test keeps the two equal)
OPERAND_CAP = 256 << 20

OPTIONS = (
    Option(
        "h5",
        "--bench-h5",
        kind="path",
        ini="agentbench_h5",
        owner=OWNER,
        metavar="PATH",
        help="SciCode: path to the official test_data.h5 (default: looked up in the data dir).",
        shown=False,
    ),
    Option(
        "background",
        "--bench-background",
        kind="bool",
        default=True,
        negatable=True,
        ini="agentbench_background",
        owner=OWNER,
        help="SciCode: include the scientific background in prompts (default on; "
        "--no-bench-background leaves it out and the model is asked to write it).",
    ),
    Option(
        "mode",
        "--bench-mode",
        kind="choice",
        choices=MODES,
        default="tool_use",
        ini="agentbench_mode",
        owner=OWNER,
        help="SciCode harness: tool_use (default; the model may run code) or naive (one call per step).",
    ),
    Option(
        "tool_loops",
        "--bench-tool-loops",
        kind="int",
        default=15,
        minimum=0,
        ini="agentbench_tool_loops",
        owner=OWNER,
        help="SciCode tool_use: most rounds of tool calls per step (default 15).",
        shown=False,
    ),
    Option(
        "tool_timeout",
        "--bench-tool-timeout",
        kind="float",
        default=180.0,
        minimum=0,
        exclusive_minimum=True,
        ini="agentbench_tool_timeout",
        owner=OWNER,
        help="SciCode tool_use: seconds per code_interpreter call (default 180).",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "overlap",
        "--bench-overlap",
        kind="bool",
        default=True,
        negatable=True,
        ini="agentbench_overlap",
        owner=OWNER,
        help="SciCode: generate the next step while the current one is scored (default on; "
        "--bench-set=overlap=false generates each step only when its item starts).",
        shown=False,
    ),
    Option(
        "tool_concurrency",
        "--bench-tool-concurrency",
        kind="int",
        minimum=1,
        ini="agentbench_tool_concurrency",
        owner=OWNER,
        metavar="N",
        help="SciCode tool_use: code_interpreter runs at once in the session, over the chains generated "
        "concurrently (each its own sandboxed run; divided over the xdist workers, at least 1 each; "
        "default: the number of cores).",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "operand_cap",
        "--bench-operand-cap",
        kind="size",
        default=OPERAND_CAP,
        ini="agentbench_operand_cap",
        owner=OWNER,
        metavar="SIZE",
        help="SciCode: most bytes of operand values a step's scoring child may send to be compared "
        "(default 256m); a test whose values exceed it fails with the reason.",
        shown=False,
    ),
    Option(
        "data_url",
        "--bench-data-url",
        ini="agentbench_data_url",
        owner=OWNER,
        metavar="URL",
        default=DEFAULT_DATA_URL,
        help="SciCode: ZIP archive holding the official test_data.h5, downloaded (and only that file "
        "extracted, checked against its pinned sha256) when the file is missing and the official targets "
        f"are needed (a test-split item is selected, or --bench-targets=official; default {DEFAULT_DATA_URL}).",
        shown=False,
    ),
    Option(
        "targets",
        "--bench-targets",
        kind="choice",
        choices=TARGET_CHOICES,
        default=AUTO,
        ini="agentbench_targets",
        owner=OWNER,
        help="SciCode: where the targets come from: auto (default: the dataset's own; official data: the "
        "official test_data.h5 when it is present or a test-split item is selected, fetched from --bench-set data_url "
        "when missing, else rebuilt from the ground truth), official (the official file even for a "
        "validation-only run, fetched when missing; a usage error offline), rebuilt (rebuilt from the ground "
        "truth even when the official file is present; validation split only) or verified (SciCode-Verified's "
        f"corrected {verified.H5_NAME}, checked against its manifest: with --bench-replay, re-grades a run's "
        "answers against the corrected targets without a model call).",
    ),
    Option(
        "category",
        "--bench-category",
        kind="list",
        default=(ALL_CATEGORIES,),
        ini="agentbench_category",
        owner=OWNER,
        metavar="NAME[,NAME...]",
        help="SciCode: run only the problems of these categories (exact match on a problem's category "
        "field; a problem without one is 'unclassified'; a list takes the union; default all).",
        shown=False,
    ),
    Option(
        "grading_envs",
        "--bench-grading-envs",
        kind="list",
        default=(),
        ini="agentbench_grading_envs",
        owner=OWNER,
        metavar="NAME[,NAME...]",
        help="SciCode: grade every step in each of these Python environments; a step passes when it passes in "
        "any, each environment's verdict kept. NAME is a built-in pinned spec (2024: NumPy 1.26 / SciPy 1.13; "
        "2025: NumPy 2.2 / SciPy 1.15), built on first use as a venv in $AGENTBENCH_GRADING_ENVS or the cache "
        "dir, or NAME=/path/to/python. No simps shim is applied in them (default: the running interpreter "
        "alone, with the shim).",
        shown=False,
    ),
    Option(
        "grading_envs_all",
        "--bench-grading-envs-all",
        kind="bool",
        default=False,
        ini="agentbench_grading_envs_all",
        owner=OWNER,
        help="SciCode: with --bench-set grading_envs, grade in every environment even after one passed (default: the "
        "next environments are skipped once one passes).",
        shown=False,
    ),
)


@dataclass(frozen=True)
class SciCodeOptions:
    """SciCode's settings, typed (``view(SciCodeOptions, opts)``); one field per option of OPTIONS. The benchmark
    reads its own settings through this view only (the shared ones through ``RunOptions``, ``ModelOptions`` and
    ``SandboxOptions``)."""

    OPTIONS: ClassVar[tuple[Option, ...]] = OPTIONS
    h5: Path | None
    background: bool
    mode: str
    tool_loops: int
    tool_timeout: float
    overlap: bool
    tool_concurrency: int | None
    operand_cap: int
    data_url: str
    targets: str
    category: tuple[str, ...]
    grading_envs: tuple[str, ...]
    grading_envs_all: bool
