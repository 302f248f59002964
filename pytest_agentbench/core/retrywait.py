"""The pause before a retry: the model client's backoff and a server's ``Retry-After``, the pause between an item's
tries, the model preflight's second probe, a download's backoff.

``AGENTBENCH_RETRY_WAIT_SCALE`` multiplies every such pause (default 1: the wait as computed). The project's tests
set it to 0 so that a retry test does not sit out real backoff; a user has no reason to change it. Only the sleep
is scaled: each wait is still computed, and counted against ``--bench-set model_max_retry_time`` as if slept (the
pause returns what it did not sleep, which the model client adds to the retry time it has spent)."""

from __future__ import annotations

import math
import os
import time

from .errors import ConfigError

RETRY_WAIT_SCALE_ENV = "AGENTBENCH_RETRY_WAIT_SCALE"


def retry_wait_scale() -> float:
    """The factor of every retry pause (read at each pause, so a test can change it for one run)."""
    raw = os.environ.get(RETRY_WAIT_SCALE_ENV, "").strip()
    if not raw:
        return 1.0
    try:
        scale = float(raw)
    except ValueError:
        scale = math.nan
    if not math.isfinite(scale) or scale < 0:
        raise ConfigError(
            f"{RETRY_WAIT_SCALE_ENV}={raw!r} is not a factor of the retry waits: set it to a number >= 0 "
            "(1, the default, waits as computed; 0 does not wait), or unset it"
        )
    return scale


def pause_before_retry(seconds: float) -> float:
    """Sleep ``seconds`` (times the scale) before the next try; return the seconds of the wait not slept (0 at the
    default scale), which a retry-time budget counts as though they were."""
    wait = max(0.0, seconds)
    slept = wait * retry_wait_scale()
    time.sleep(slept)
    return max(0.0, wait - slept)
