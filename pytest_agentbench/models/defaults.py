"""Model-layer constants, importable without the openai SDK (the plugin loads in every pytest run)."""

PROTOCOLS = ("chat", "responses")
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = 600.0
DEFAULT_MAX_RETRIES = 6
DEFAULT_RETRY_BASE_DELAY = 1.0
DEFAULT_RETRY_MAX_DELAY = 60.0
