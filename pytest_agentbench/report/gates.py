"""Score gates: turn a run's summary into a pass/fail verdict for CI.

Only exit codes 0 and 1 are ever rewritten; 2 (interrupted), 3 (internal error), 4 (usage error) and
5 (no tests) say the run itself did not complete and stay as pytest set them.

An incomplete run (selected items not run: ``summary["incomplete"]``) fails its gates (the ``incomplete``
gate) unless ``--bench-allow-incomplete``; without gates, one that ended normally ends with exit 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.records import INFRA_STATUSES
from .compare import Comparison, drop_p_value
from .options import GateConfig, Threshold
from .power import detectable_drop

# pytest's exit codes (pytest.ExitCode values; this layer does not import pytest).
OK, TESTS_FAILED = 0, 1
REWRITABLE = (OK, TESTS_FAILED)
EPSILON = 1e-9  # 0.4 must pass --bench-fail-under main=40% despite float rounding


@dataclass
class GateResult:
    gate: str  # e.g. "--bench-fail-under main=40%"
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'} {self.gate}: {self.detail}"


def infra_errors(summary: dict[str, Any]) -> int:
    return sum(1 for i in summary.get("items", []) if i.get("scored", True) and i.get("status") in INFRA_STATUSES)


def evaluate(
    cfg: GateConfig, summary: dict[str, Any], comparison: Comparison | None, baseline_note: str | None = None
) -> list[GateResult]:
    results: list[GateResult] = []
    if summary.get("incomplete"):
        results.append(incomplete_gate(summary["incomplete"], cfg.allow_incomplete))
    metrics = summary.get("metrics", {})
    for t in cfg.fail_under:
        gate = f"--bench-fail-under {t.name}={t.text}"
        value = metrics.get(t.metric)
        if not isinstance(value, (int, float)):
            results.append(GateResult(gate, False, f"metric {t.name} ({t.metric}) is not in this run's summary"))
            continue
        ok = value + EPSILON >= t.value
        results.append(GateResult(gate, ok, f"{t.name} = {value:.1%} {'>=' if ok else '<'} {t.value:.1%}"))
    if cfg.max_errors is not None:
        errors = infra_errors(summary)
        ok = errors <= cfg.max_errors
        results.append(
            GateResult(
                f"--bench-max-errors {cfg.max_errors}",
                ok,
                f"{errors} item(s) ended in {'/'.join(INFRA_STATUSES)} "
                f"({'within' if ok else 'over'} the budget of {cfg.max_errors})",
            )
        )
    for t in cfg.max_drop:
        results.append(drop_gate(cfg, t, metrics, comparison, baseline_note))
    results += [cost_gate(t, summary.get("cost") or {}) for t in cfg.fail_over]
    return results


def cost_gate(t: Threshold, cost: dict[str, Any]) -> GateResult:
    """``--bench-set fail_over cost=USD``: what the run spent (or spent per solved task) must not exceed the limit;
    an unknown amount fails (no price, or replies without token usage)."""
    gate = f"--bench-set fail_over {t.name}={t.text}"
    value = cost.get(t.metric)
    if not isinstance(value, (int, float)):
        why = (
            "the run has no price (--model-price)"
            if not cost.get("priced")
            else "no task was solved"
            if t.metric == "per_solved_usd" and not cost.get("solved")
            else "some model replies reported no token usage"
        )
        return GateResult(gate, False, f"{t.name} is unknown: {why}")
    ok = value <= t.value + EPSILON
    return GateResult(gate, ok, f"{t.name} = ${value:.4f} {'<=' if ok else '>'} ${t.value:g}")


def incomplete_gate(incomplete: dict[str, Any], allowed: bool) -> GateResult:
    """The gate every incomplete run has: failed, unless --bench-allow-incomplete accepts it."""
    text = f"{incomplete['not_run']} of {incomplete['selected']} items not run (counted as not passed)"
    if allowed:
        return GateResult("incomplete", True, f"{text}; accepted by --bench-allow-incomplete")
    return GateResult("incomplete", False, f"{text}; resume the run, or accept it with --bench-allow-incomplete")


def incomplete_exit(exitstatus: int) -> int:
    """Without gates: an incomplete run that ended normally (a lost host, a crashed worker) is a failed run;
    2-5 stay."""
    return TESTS_FAILED if exitstatus == OK else int(exitstatus)


def no_items_results() -> list[GateResult]:
    """The verdict of a gated run in which no benchmark item ran."""
    return [GateResult("gates", False, "no benchmark item ran, so no gate can hold")]


def drop_gate(
    cfg: GateConfig, t: Threshold, metrics: dict[str, Any], comparison: Comparison | None, baseline_note: str | None
) -> GateResult:
    gate = f"--bench-max-drop {t.name}={t.text}"
    if comparison is None:
        return GateResult(gate, True, baseline_note or "no baseline to compare with")
    if comparison.incomparable and not cfg.allow_incomparable:  # known only at the end (who answered)
        return GateResult(
            gate,
            False,
            f"refused: the baseline is not comparable with this run ({'; '.join(comparison.incomparable)}); "
            f"compare anyway with --bench-set allow_incomparable=true",
        )
    if comparison.only_a or comparison.only_b:
        return GateResult(
            gate,
            False,
            f"this run and the baseline scored different items "
            f"({len(comparison.only_a)} only in the baseline, {len(comparison.only_b)} "
            f"only in this run): select the same items, or update the baseline",
        )
    before = comparison.a["metrics"].get(t.metric)
    after = metrics.get(t.metric)
    if not isinstance(before, (int, float)) or not isinstance(after, (int, float)):
        return GateResult(
            gate, False, f"metric {t.name} is missing from {'the baseline' if after is not None else 'this run'}"
        )
    drop = before - after
    text = f"{t.name} {before:.1%} -> {after:.1%} (drop {drop * 100:.1f} pp, limit {t.value * 100:.1f} pp)"
    if cfg.significance is None:
        return GateResult(gate, drop <= t.value + EPSILON, text)
    return tested_drop_gate(cfg, cfg.significance, t, comparison, gate, text, drop)


def tested_drop_gate(
    cfg: GateConfig, alpha: float, t: Threshold, comparison: Comparison, gate: str, text: str, drop: float
) -> GateResult:
    """A max-drop gate with --bench-set significance, its reasons in the order that matters: a drop within the limit
    holds (the test can only excuse a drop, never make one; a weak test is a note), a significant drop beyond it
    fails as such, and a drop beyond it that the test could not tell from noise fails as underpowered when the test
    could not have seen a drop as small as the limit (else it holds as not significant)."""
    power = power_note(cfg, t, comparison)
    if drop <= t.value + EPSILON:
        if power is not None:
            text += (
                f"; {power.detail}"
                if power.ok
                else f"; note: this gate cannot see a drop as small as its limit: {power.detail}"
            )
        return GateResult(gate, True, text)
    p = drop_p_value(comparison, t.name)
    test = f"McNemar over {comparison.unit_of(t.name)}s p = {p:.3g}"
    if p < alpha:
        return GateResult(gate, False, f"significant drop: {text}; significant ({test} < {alpha:g})")
    if power is not None and not power.ok and not cfg.allow_underpowered:
        return GateResult(
            gate,
            False,
            f"underpowered: {text}; not significant ({test}), but this gate cannot see a drop as small as its "
            f"limit: {power.detail}",
        )
    shown = ""
    if power is not None:
        shown = (
            f"{power.detail}{'' if power.ok else ' (underpowered, allowed by --bench-set=allow_underpowered=true)'}; "
        )
    return GateResult(gate, True, f"{text}; {shown}not significant ({test} >= {alpha:g}), so not counted")


def power_note(cfg: GateConfig, t: Threshold, comparison: Comparison) -> GateResult | None:
    """Whether the gate's paired test could detect a drop as small as its limit (``ok``), with the smallest drop it
    detects and, when it cannot, what would give it the power."""
    unit = comparison.unit_of(t.name)
    counts = comparison.mcnemar.get(unit) or {}
    units = int(counts.get("n", 0))
    if not units:
        return None
    found = detectable_drop(units, int(counts.get("worse", 0)) + int(counts.get("better", 0)), cfg.alpha, unit)
    detail = found.text(cfg.alpha)
    if found.drop is not None and found.drop <= t.value + EPSILON:
        return GateResult("power", True, detail)
    return GateResult(
        "power",
        False,
        f"{detail} > the limit; select more {unit}s (the whole split) or add --bench-attempts, or raise the limit",
    )


def decide_exit(exitstatus: int, results: list[GateResult], other_failures: int) -> int:
    """The exit code under gates: 0 when every gate holds (failing benchmark items are expected), else 1.

    Failures of non-benchmark tests collected in the same session still fail the run.
    """
    if exitstatus not in REWRITABLE:
        return int(exitstatus)
    if other_failures:
        return TESTS_FAILED
    return OK if all(r.ok for r in results) else TESTS_FAILED


def render_markdown(results: list[GateResult], exit_code: int) -> str:
    verdict = "passed" if all(r.ok for r in results) else "FAILED"
    out = [f"## Gates: {verdict} (exit code {int(exit_code)})", "", "| gate | result | detail |", "|---|---|---|"]
    out += [f"| `{r.gate}` | {'pass' if r.ok else '**FAIL**'} | {r.detail} |" for r in results]
    return "\n".join(out) + "\n"
