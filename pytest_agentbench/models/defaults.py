"""Model-layer constants and the retry backoff, importable without the openai SDK (the plugin loads in every
pytest run)."""

import random

PROTOCOLS = ("chat", "responses")
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = 600.0
DEFAULT_MAX_RETRIES = 6
DEFAULT_RETRY_BASE_DELAY = 1.0
DEFAULT_RETRY_MAX_DELAY = 60.0
DEFAULT_MAX_RETRY_TIME = 120.0  # seconds one request may spend on retries before its item is a model_error


def backoff_delay(attempt: int, base: float = DEFAULT_RETRY_BASE_DELAY, cap: float = DEFAULT_RETRY_MAX_DELAY) -> float:
    """Seconds to wait before retry ``attempt + 1`` (0-based ``attempt``): exponential from ``base``, capped,
    with jitter over its upper half, which spreads the retries of many xdist workers hitting the same rate
    limit. The model client waits it between requests, the run loop between the tries of an item."""
    delay = min(cap, base * (2**attempt))
    return random.uniform(delay / 2, delay)
