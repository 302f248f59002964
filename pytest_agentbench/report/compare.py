"""Compare two runs: metric deltas, the items that flipped, and whether the difference is more than noise.

What ``python -m pytest_agentbench compare RUN_A RUN_B`` (``cli/compare.py``) prints for two summary.json
files (or run folders). A is the reference (the baseline), B the new run; "pass -> fail" means the item passed in A
and not in B.

Noise: an exact McNemar test (two-sided binomial test on the discordant pairs) over the flipped units,
and 95% percentile bootstrap intervals that resample whole tasks (a problem, a capsule), never
single items, since the items (steps) of one task are not independent. The bootstrap is
paired (the same resampled tasks for A and B) and seeded, so the same inputs print the same numbers.
Which metrics are compared and in which unit comes from the benchmark (``Declared``), as the newer
summary states it, so this module knows no benchmark.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.io import natural_key
from ..core.records import PASS, record_key
from ..core.text import printable
from ..core.types import attempt_key
from . import comparability
from .baseline import settings_diff, settings_differences
from .subject import run_subject

if TYPE_CHECKING:
    import numpy as np
from .declared import Declared, declared_in

SEED = 20240607
RESAMPLES = 2000


@dataclass
class Comparison:
    a: dict[str, Any]
    b: dict[str, Any]
    settings_diff: list[str]
    metrics: list[tuple[str, float | None, float | None]]  # name, A, B
    flipped: list[dict[str, Any]]  # id, task, a, b (statuses), direction
    only_a: list[str]
    only_b: list[str]
    mcnemar: dict[str, dict[str, Any]]  # unit -> {worse, better, p}
    bootstrap: dict[str, dict[str, Any]] = field(default_factory=dict)  # metric -> {unit, a, b, delta}
    shared: int = 0  # scored items both runs have: the metrics are compared on these when the selections differ
    same_responses: int = 0  # shared items scored on the very same model responses in both runs
    replayed: int = 0  # shared items whose answers this run (B) took from the response cache
    settings_table: list[tuple[str, str, str]] = field(default_factory=list)  # every setting that differs: key, A, B
    declared: Declared = field(default_factory=Declared)  # the benchmark's gate metrics, headlines, free settings
    incomparable: list[str] = field(default_factory=list)  # dataset, grading environments, harness that differ
    unknown: str | None = None  # what a run older than the comparability keys leaves unchecked

    @property
    def benchmark(self) -> str:
        return str(self.a["settings"].get("benchmark", "?"))

    def unit_of(self, metric: str) -> str:
        return self.declared.unit_of(metric)


def scored_items(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Scored items by key: the id, or ``id[attemptN]`` with --bench-attempts (pairs are (id, attempt))."""
    return {
        record_key(i): i for i in summary.get("items", []) if i.get("scored", True) and i.get("status") != "skipped"
    }


def passed(item: Mapping[str, Any] | None) -> bool:
    return item is not None and item.get("status") == PASS


def compare(
    a: dict[str, Any],
    b: dict[str, Any],
    *,
    declared: Declared | None = None,
    seed: int = SEED,
    resamples: int = RESAMPLES,
) -> Comparison:
    """Compare run B with the reference A. ``declared``: the benchmark's declarations (the plugin passes
    ``Declared.of(benchmark)``); by default those stored in B's summary (see ``declared_in``)."""
    declared = declared if declared is not None else declared_in(b)
    items_a, items_b = scored_items(a), scored_items(b)
    common = [i for i in items_a if i in items_b]
    flipped = []
    for item_id in common:
        left, right = items_a[item_id], items_b[item_id]
        if passed(left) != passed(right):
            flipped.append(
                {
                    "id": item_id,
                    "task": str(left.get("task")),
                    "a": left["status"],
                    "b": right["status"],
                    "direction": "pass -> fail" if passed(left) else "fail -> pass",
                }
            )
    flipped.sort(key=lambda f: natural_key(f["id"]))
    comparison = Comparison(
        a=a,
        b=b,
        settings_diff=settings_differences(a["settings"], b["settings"], declared.free_settings),
        metrics=metric_rows(a, b, declared.gate_metrics),
        flipped=flipped,
        only_a=sorted((i for i in items_a if i not in items_b), key=natural_key),
        only_b=sorted((i for i in items_b if i not in items_a), key=natural_key),
        mcnemar={"item": mcnemar_counts([(passed(items_a[i]), passed(items_b[i])) for i in common])},
        declared=declared,
    )
    tasks = task_table(items_a, items_b, common)
    comparison.mcnemar["task"] = mcnemar_counts([(t["ra"], t["rb"]) for t in tasks])
    comparison.bootstrap = bootstrap(tasks, declared.units, seed=seed, resamples=resamples)
    comparison.shared = len(common)
    comparison.same_responses = sum(
        1 for i in common if items_a[i].get("responses") and items_a[i].get("responses") == items_b[i].get("responses")
    )
    comparison.replayed = sum(1 for i in common if items_b[i].get("answers") == "replayed")
    keys = comparability.of(a), comparability.of(b)
    comparison.settings_table = settings_table(a["settings"], b["settings"]) + comparability.differences(*keys)
    comparison.incomparable = comparability.incomparable(*keys)
    comparison.unknown = comparability.unknown_note(*keys, what="A")
    if comparison.only_a or comparison.only_b:  # other selections: score both on the items they share
        comparison.metrics = [(name, boot["a"], boot["b"]) for name, boot in comparison.bootstrap.items()]
    return comparison


HIDDEN_SETTINGS = frozenset({"run_id", "notes", "cache_dir", "_run", comparability.KEY})
# How long a start-up check took ("self-test passed (...; 2.3 s)") says nothing of how the runs differ
TIMINGS = re.compile(r";\s*\d+(?:\.\d+)?\s*s\)")
TIMED_SETTINGS = frozenset({"isolation"})
TABLE_COLUMN = 22  # a value of A longer than this is shown on lines of its own, whole


def settings_table(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Every setting whose value differs between the two runs (nested dicts key by key), as text; the settings
    that carry a check's duration (``isolation``) are compared without it."""

    def text(value: Any) -> str:
        return "(not set)" if value is None else str(value)

    def untimed(settings: Mapping[str, Any]) -> dict[str, Any]:
        return {
            k: TIMINGS.sub(")", v) if k in TIMED_SETTINGS and isinstance(v, str) else v for k, v in settings.items()
        }

    return [
        (key, text(left), text(right)) for key, left, right in settings_diff(untimed(a), untimed(b), HIDDEN_SETTINGS)
    ]


def settings_lines(table: list[tuple[str, str, str]]) -> list[str]:
    """The differing settings as a table of three columns; a setting whose value of A does not fit its column
    is given whole on lines of its own (A and B), never cut."""
    width = max(len("setting"), *(len(k) for k, _, _ in table)) + 2  # a short key never runs into the heading
    lines = ["", "settings that differ:", f"  {'setting':<{width}}{'A':<{TABLE_COLUMN + 2}}B"]
    for key, left, right in table:
        if len(left) <= TABLE_COLUMN:
            lines.append(f"  {key:<{width}}{left:<{TABLE_COLUMN + 2}}{right}")
        else:
            lines += [f"  {key}", f"    A: {left}", f"    B: {right}"]
    return lines


def min_flips(alpha: float) -> int:
    """The fewest flipped units with which the two-sided exact McNemar test can reject at ``alpha``
    (every flip in one direction: p = 2 * 0.5**n); 6 at 0.05."""
    n = 1
    while 2 * 0.5**n >= alpha:
        n += 1
    return n


def too_small(units: Mapping[str, int], alpha: float) -> list[str]:
    """Warnings for units (``{"item": n, "task": m}``) too few for the exact McNemar test to ever reject."""
    need = min_flips(alpha)
    return [
        f"only {n} {unit}s: the exact McNemar test can never reach p < {alpha:g} (it needs at least {need} "
        f"flipped {unit}s); a drop in a {unit}-level metric cannot be significant"
        for unit, n in units.items()
        if n < need
    ]


def metric_rows(
    a: dict[str, Any], b: dict[str, Any], gate_metrics: Mapping[str, str] | None = None
) -> list[tuple[str, float | None, float | None]]:
    """The benchmark's gate metrics by their short names, as each summary states them (without declared
    gate metrics: every float metric of the two summaries, by its key)."""
    names = dict(gate_metrics or {}) or {
        k: k for k in {**a["metrics"], **b["metrics"]} if isinstance(a["metrics"].get(k, b["metrics"].get(k)), float)
    }
    rows = []
    for short, key in names.items():
        left, right = a["metrics"].get(key), b["metrics"].get(key)
        if left is None and right is None:
            continue
        rows.append((short, left, right))
    return rows


def task_table(
    items_a: Mapping[str, Mapping[str, Any]], items_b: Mapping[str, Mapping[str, Any]], common: list[str]
) -> list[dict[str, Any]]:
    """Per task (over the items both runs scored): item count, passes and resolution on each side.
    With --bench-attempts each attempt of a task is a unit of its own (so rates are per-attempt means)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for item_id in common:
        groups[attempt_key(str(items_a[item_id].get("task")), items_a[item_id].get("attempt"))].append(item_id)
    rows = []
    for task, ids in sorted(groups.items(), key=lambda kv: natural_key(kv[0])):
        pa = sum(passed(items_a[i]) for i in ids)
        pb = sum(passed(items_b[i]) for i in ids)
        rows.append({"task": task, "n": len(ids), "pa": pa, "pb": pb, "ra": pa == len(ids), "rb": pb == len(ids)})
    return rows


def mcnemar_counts(pairs: list[tuple[bool, bool]]) -> dict[str, Any]:
    """Exact McNemar: under no difference each discordant pair is pass->fail or fail->pass with p = 1/2."""
    from scipy.stats import binomtest  # why: scipy.stats takes over a second to import; only a comparison needs it

    worse = sum(1 for left, right in pairs if left and not right)
    better = sum(1 for left, right in pairs if right and not left)
    p = binomtest(worse, worse + better, 0.5).pvalue if worse + better else 1.0
    return {"worse": worse, "better": better, "n": len(pairs), "p": float(p)}


def bootstrap(
    tasks: list[dict[str, Any]], heads: dict[str, str], *, seed: int, resamples: int
) -> dict[str, dict[str, Any]]:
    """Paired percentile bootstrap over tasks for each headline metric: 95% intervals of A, B and B - A."""
    if not tasks:
        return {}
    import numpy as np  # why: only a comparison bootstraps; a run without a baseline reports without numpy

    rng = np.random.default_rng(seed)
    n = np.array([t["n"] for t in tasks], dtype=float)
    values = {
        "item": (np.array([t["pa"] for t in tasks], float), np.array([t["pb"] for t in tasks], float)),
        "task": (np.array([t["ra"] for t in tasks], float), np.array([t["rb"] for t in tasks], float)),
    }
    picks = rng.integers(0, len(tasks), size=(resamples, len(tasks)))
    out = {}
    for metric, unit in heads.items():
        left, right = values[unit]
        if unit == "item":
            denominator = n[picks].sum(axis=1)
            sample_a, sample_b = left[picks].sum(axis=1) / denominator, right[picks].sum(axis=1) / denominator
            point_a, point_b = left.sum() / n.sum(), right.sum() / n.sum()
        else:
            sample_a, sample_b = left[picks].mean(axis=1), right[picks].mean(axis=1)
            point_a, point_b = left.mean(), right.mean()
        out[metric] = {
            "unit": unit,
            "a": float(point_a),
            "b": float(point_b),
            "a_ci": _interval(sample_a),
            "b_ci": _interval(sample_b),
            "delta": float(point_b - point_a),
            "delta_ci": _interval(sample_b - sample_a),
        }
    return out


def _interval(samples: np.ndarray) -> tuple[float, float]:
    import numpy as np  # why: as in bootstrap (already loaded there)

    low, high = np.percentile(samples, [2.5, 97.5])
    return float(low), float(high)


def drop_p_value(comparison: Comparison, metric: str) -> float:
    """p-value of the exact McNemar test over the units of ``metric`` (tasks for a task-level metric)."""
    return float(comparison.mcnemar[comparison.unit_of(metric)]["p"])


# ---- rendering ---------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _pp(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f} pp"


def _ci(pair: tuple[float, float], points: bool = False) -> str:
    if points:
        return f"[{pair[0] * 100:+.1f}, {pair[1] * 100:+.1f}] pp"
    return f"[{pair[0]:.1%}, {pair[1]:.1%}]"


def _label(summary: dict[str, Any]) -> str:
    s = summary["settings"]
    return f"{summary.get('_path', 'this run')} (model {run_subject(s)}, run {s.get('run_id')})"


def _verdict(p: float, alpha: float) -> str:
    return f"significant at {alpha:g}" if p < alpha else f"not significant at {alpha:g}: within noise"


def shared_line(c: Comparison) -> str | None:
    if not (c.only_a or c.only_b):
        return None
    return (
        f"compared on the {c.shared} scored items both runs share "
        f"(A has {len(c.only_a)} more, B has {len(c.only_b)} more)"
    )


def responses_lines(c: Comparison) -> list[str]:
    """How many shared items were scored on the same answers, and a warning when most of B's were replayed from
    the response cache: such a comparison re-scores old generations and measures nothing new about the model.
    Fresh answers equal to A's are no such thing (a deterministic model at temperature 0 gives them)."""
    if not c.shared:
        return []
    lines = [
        f"{c.same_responses} of {c.shared} shared items have the same model responses in both runs; "
        f"{c.replayed} of B's were replayed from the response cache"
        + (" (fresh answers equal to A's: normal for a deterministic model)" if c.same_responses > c.replayed else "")
    ]
    if 2 * c.replayed > c.shared:
        lines.append(
            "WARNING: this comparison rests mostly on replayed answers: it re-scores old generations "
            "and says little about the model (run with --bench-cache=off or a new --bench-attempts "
            "sample for fresh answers)"
        )
    return lines


def units_of(c: Comparison) -> dict[str, int]:
    return {"item": c.mcnemar["item"]["n"], "task": c.mcnemar["task"]["n"]}


def comparability_warnings(c: Comparison) -> list[str]:
    """The runs are not comparable (dataset, grading environments, harness or served model differ), or one of them
    cannot say."""
    out = []
    if c.incomparable:
        out.append(
            "the runs are NOT comparable (their dataset, grading environments, harness or served model differ): "
            + "; ".join(c.incomparable)
        )
    if c.unknown:
        out.append(c.unknown)
    return out


def render_text(c: Comparison, alpha: float = 0.05) -> list[str]:
    lines = [f"A: {_label(c.a)}", f"B: {_label(c.b)}"]
    if c.settings_table:
        lines += settings_lines(c.settings_table)
    if c.settings_diff:
        lines.append("WARNING: these settings change what is asked or how it is scored: " + "; ".join(c.settings_diff))
    lines += [f"WARNING: {w}" for w in comparability_warnings(c)]
    shared = shared_line(c)
    if shared:
        lines.append(shared)
    lines += responses_lines(c)
    lines += [f"WARNING: {w}" for w in too_small(units_of(c), alpha)]
    lines.append("")
    lines.append(f"{'metric':<24}{'A':>9}{'B':>9}{'B - A':>12}")
    for name, left, right in c.metrics:
        delta = None if left is None or right is None else right - left
        lines.append(f"{name:<24}{_pct(left):>9}{_pct(right):>9}{_pp(delta):>12}")
    lines.append("")
    lines.append(f"flipped items ({len(c.flipped)}):")
    for f in c.flipped:
        lines.append(f"  {f['id']:<16}{f['direction']:<14}A: {f['a']:<12}B: {f['b']}")
    if not c.flipped:
        lines.append("  none")
    if c.only_a or c.only_b:
        lines.append(f"items only in A: {', '.join(c.only_a) or 'none'}; only in B: {', '.join(c.only_b) or 'none'}")
    lines.append("")
    for unit in ("item", "task"):
        m = c.mcnemar[unit]
        lines.append(
            f"McNemar exact test over {unit}s: {m['worse']} pass -> fail, {m['better']} fail -> pass, "
            f"p = {m['p']:.4g} ({_verdict(m['p'], alpha)})"
        )
    for metric, b in c.bootstrap.items():
        lines.append(
            f"bootstrap 95% ({metric}, resampling tasks): A {_pct(b['a'])} {_ci(b['a_ci'])}, "
            f"B {_pct(b['b'])} {_ci(b['b_ci'])}, B - A {_pp(b['delta'])} {_ci(b['delta_ci'], True)}"
        )
    return lines


def render_markdown(c: Comparison, alpha: float = 0.05, title: str = "## Comparison with the baseline") -> str:
    out = [
        title,
        "",
        f"A (baseline): {_md(c.a.get('_path', '?'))} — model {_md(run_subject(c.a['settings']))}, "
        f"run {_md(c.a['settings'].get('run_id'))}  ",
        f"B (this run): model {_md(run_subject(c.b['settings']))}, run {_md(c.b['settings'].get('run_id'))}",
        "",
    ]
    if c.settings_table:
        out += ["| setting | A | B |", "|---|---|---|"]
        out += [f"| {_md(k)} | {_md(a)} | {_md(b)} |" for k, a, b in c.settings_table] + [""]
    if c.settings_diff:
        out += ["**Settings differ:** " + _md("; ".join(c.settings_diff)), ""]
    out += [f"**Warning:** {_md(w)}  " for w in comparability_warnings(c)]
    if shared_line(c):
        out += [f"Scores are {shared_line(c)}.", ""]
    out += [f"{_md(line).replace('WARNING:', '**Warning:**')}  " for line in responses_lines(c)]
    out += [f"**Warning:** {_md(w)}" for w in too_small(units_of(c), alpha)]
    out += ["| metric | A | B | B − A | 95% CI of B − A (tasks resampled) |", "|---|---|---|---|---|"]
    for name, left, right in c.metrics:
        delta = None if left is None or right is None else right - left
        ci = c.bootstrap.get(name)
        out.append(
            f"| {name} | {_pct(left)} | {_pct(right)} | {_pp(delta)} | {_ci(ci['delta_ci'], True) if ci else ''} |"
        )
    out += [""]
    for unit in ("item", "task"):
        m = c.mcnemar[unit]
        out.append(
            f"- McNemar exact test over {unit}s: {m['worse']} pass → fail, {m['better']} fail → pass, "
            f"p = {m['p']:.4g} ({_verdict(m['p'], alpha)})"
        )
    out += ["", f"### Flipped items ({len(c.flipped)})", ""]
    if c.flipped:
        out += ["| item | task | change | A | B |", "|---|---|---|---|---|"]
        out += [
            f"| {_md(f['id'])} | {_md(f['task'])} | {_md(f['direction'])} | {_md(f['a'])} | {_md(f['b'])} |"
            for f in c.flipped
        ]
    else:
        out.append("None.")
    if c.only_a or c.only_b:
        only_a, only_b = _md(", ".join(c.only_a) or "none"), _md(", ".join(c.only_b) or "none")
        out += ["", f"Items only in A: {only_a}; only in B: {only_b}"]
    return "\n".join(out) + "\n"


def _md(value: Any) -> str:
    """A value from a run's files as one inert line of Markdown."""
    return printable(value, markdown=True)
