"""What both comparison views share: how a rate, a difference and an interval read, and the page shell.

One place so the table across models and the comparison of two runs print a number the same way."""

from __future__ import annotations

from typing import Any

from ..highlight import esc
from ..html import CSS

NONE = "—"  # a cell with nothing to show (no cost, no gate, no such metric)


def pct(value: float | None) -> str:
    """``60.0%``; "n/a" when there is no value."""
    return "n/a" if value is None else f"{value:.1%}"


def pp(value: float | None) -> str:
    """A difference of two rates in percentage points: ``-12.5 pp``."""
    return "n/a" if value is None else f"{value * 100:+.1f} pp"


def interval(pair: Any, points: bool = False) -> str:
    """``[23.1%, 88.2%]``, or of a difference ``[-40.0, +10.0 pp]``; "" when there is none."""
    if not pair:
        return ""
    return f"[{pp(pair[0])[:-3]}, {pp(pair[1])}]" if points else f"[{pct(pair[0])}, {pct(pair[1])}]"


def wilson_text(value: float, k: int, n: int, ci: Any) -> str:
    """A headline metric with its Wilson interval: ``60.0% (3/5, 95% CI 23.1%–88.2%)``."""
    bounds = f", 95% CI {pct(ci[0])}–{pct(ci[1])}" if ci else ""
    return f"{pct(value)} ({k}/{n}{bounds})"


def delta_class(value: float | None) -> str:
    """The CSS class of a difference: red down, green up, none when it is zero."""
    return "" if value is None or abs(value) < 1e-12 else (" down" if value < 0 else " up")


def page(title: str, sub: str, body: str, script: str = "") -> str:
    """A self-contained page: the report's CSS, ``body`` in ``<main>``; nothing is fetched (no network), and no
    script runs but ``script``, inline."""
    scripts = " script-src 'unsafe-inline';" if script else ""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline';"
            f'{scripts} img-src data:">',
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
            f'<header><h1>{esc(title)}</h1><div class="sub">{esc(sub)}</div></header><main>',
            body,
            "</main>" + (f"<script>{script}</script>" if script else "") + "</body></html>",
        ]
    )
