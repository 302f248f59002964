"""The power of the max-drop gate: the smallest drop its paired test could detect.

The gate compares a run with its baseline by the exact two-sided McNemar test over the units both
scored (items for item-level metrics, tasks for task-level ones). Model: of ``n`` shared units a
proportion ``c`` flips either way by chance (``c/2`` pass->fail and ``c/2`` fail->pass), and a true drop
``d`` adds ``d`` pass->fail flips. ``c`` is the discordant proportion seen against the baseline, at least
one unit (two identical runs still say nothing about noise being zero). The detectable drop is the
smallest ``d`` (on a 0.5-point grid) at which the test rejects at ``alpha`` with probability ``power``,
computed exactly (binomial sums, no simulation).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

POWER = 0.8
STEP = 0.005  # the grid of drops searched: half a percentage point


@dataclass(frozen=True)
class Detectable:
    units: int  # shared units (n)
    unit: str  # "item" or "task"
    noise: float  # the discordant proportion assumed (c)
    drop: float | None  # the smallest detectable drop, None when no drop up to 1 - c is

    @property
    def shown(self) -> str:
        """The smallest detectable drop as a report shows it: ``4.0 pp``, ``none up to 60 pp``, or ``none`` when
        the assumed noise leaves no room for a drop at all."""
        if self.drop is not None:
            return f"{self.drop * 100:.1f} pp"
        room = (1 - self.noise) * 100
        return f"none up to {room:.0f} pp" if round(room) >= 1 else "none (every unit may flip by chance)"

    def text(self, alpha: float) -> str:
        shown = self.shown
        return (
            f"smallest drop detectable with {POWER:.0%} power at {alpha:g} over {self.units} {self.unit}s "
            f"(assuming {self.noise:.1%} of them flip by chance): {shown}"
        )


@lru_cache(maxsize=64)
def _reject_from(units: int, alpha: float) -> Any:
    """For every count of flipped units 0..units: the fewest pass->fail flips with which the two-sided exact
    test rejects at ``alpha`` (units + 1 where none does)."""
    import numpy as np  # why: the report layer imports numpy lazily; only a power check needs this
    from scipy.stats import binom  # why: scipy.stats takes over a second to import; only a power check needs it

    need = np.full(units + 1, units + 1)
    for flips in range(1, units + 1):
        worse = np.arange(flips // 2 + 1, flips + 1)
        rejects = worse[2 * binom.sf(worse - 1, flips, 0.5) < alpha]
        if rejects.size:
            need[flips] = rejects[0]
    return need


def power_at(units: int, noise: float, drop: float, alpha: float) -> float:
    """Probability that the exact McNemar test rejects at ``alpha`` when the true drop is ``drop``."""
    import numpy as np  # why: as above
    from scipy.stats import binom  # why: as above

    discordant = noise + drop  # noise/2 better, noise/2 + drop worse
    if discordant <= 0 or discordant > 1 + 1e-12:
        return 0.0
    share_worse = (noise / 2 + drop) / discordant
    flips = np.arange(units + 1)
    need = _reject_from(units, alpha)
    return float(np.sum(binom.pmf(flips, units, min(discordant, 1.0)) * binom.sf(need - 1, flips, share_worse)))


def detectable_drop(units: int, discordant: int, alpha: float, unit: str = "item", power: float = POWER) -> Detectable:
    """The smallest drop the gate's test detects over ``units`` shared units, ``discordant`` of which flipped.

    Power grows with the drop, so the grid is searched by bisection."""
    noise = max(discordant, 1) / units if units else 1.0
    low, high = 0, int((1 - noise) / STEP + 1e-9)  # power(low) < power <= power(high), if anywhere
    if high < 1 or power_at(units, noise, high * STEP, alpha) < power:
        return Detectable(units, unit, noise, None)
    while high - low > 1:
        middle = (low + high) // 2
        if power_at(units, noise, middle * STEP, alpha) >= power:
            high = middle
        else:
            low = middle
    return Detectable(units, unit, noise, round(high * STEP, 4))
