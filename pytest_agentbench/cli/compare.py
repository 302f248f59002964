"""``python -m pytest_agentbench compare RUN_A RUN_B [--html OUT]``: two runs compared (``report.compare``),
printed as text or markdown, and with ``--html`` written as a page (``report.comparison``)."""

from __future__ import annotations

import argparse
import sys

from ..core.text import printable
from ..report.baseline import BaselineError, load_summary
from ..report.compare import RESAMPLES, SEED, Comparison, compare, render_markdown, render_text
from ..report.comparison import write_compare_page


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_agentbench compare",
        description="Compare two runs (run folders or summary.json files): metric deltas, flipped items, "
        "an exact McNemar test and bootstrap intervals that resample tasks.",
    )
    parser.add_argument("run_a", help="the reference run (e.g. the baseline)")
    parser.add_argument("run_b", help="the run compared with it")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    parser.add_argument("--seed", type=int, default=SEED, help="bootstrap seed (fixed by default)")
    parser.add_argument("--resamples", type=int, default=RESAMPLES, help=f"bootstrap resamples (default {RESAMPLES})")
    parser.add_argument("--markdown", action="store_true", help="print markdown instead of text")
    parser.add_argument("--force", action="store_true", help="compare even runs of different splits")
    parser.add_argument(
        "--html",
        metavar="OUT",
        help="also write the comparison as a self-contained HTML page "
        "(metrics with deltas, tests, flipped items linked to both runs' transcripts)",
    )
    return parser


def run_command(args: argparse.Namespace) -> tuple[int, Comparison | None]:
    """``compare A B`` without its page: prints the comparison; the exit code and the comparison (None on
    an error). ``main`` is the command, which also writes ``--html``."""
    try:
        a, b = load_summary(args.run_a), load_summary(args.run_b)
    except BaselineError as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2, None
    if a["settings"].get("benchmark") != b["settings"].get("benchmark"):
        print(
            f"compare: the runs are of different benchmarks ({a['settings'].get('benchmark')} vs "
            f"{b['settings'].get('benchmark')})",
            file=sys.stderr,
        )
        return 2, None
    split_a, split_b = a["settings"].get("split"), b["settings"].get("split")
    if split_a != split_b and not args.force:
        print(
            f"compare: the runs are of different splits ({split_a} vs {split_b}); their items are other "
            f"questions (add --force to compare the items they share anyway)",
            file=sys.stderr,
        )
        return 2, None
    c = compare(a, b, seed=args.seed, resamples=args.resamples)
    # the runs' files are read as they are: what they hold is shown through the one gate for outside text
    shown = [printable(line) for line in render_text(c, args.alpha)]
    print(render_markdown(c, args.alpha, "# Comparison") if args.markdown else "\n".join(shown))
    return 0, c


def main(argv: list[str] | None = None) -> int:
    """The comparison printed, and with ``--html`` written as a page too."""
    args = build_parser().parse_args(argv)
    code, comparison = run_command(args)
    if comparison is None or not args.html:
        return code
    try:
        page = write_compare_page(comparison, args.html, args.alpha)
    except OSError as exc:
        print(f"compare: cannot write --html {args.html}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {page} (open it in a browser)", file=sys.stderr)
    return code
