"""The CORE-Bench agent's default limits and the task's difficulties, which its options declare: a leaf module, so
that declaring the options (in every pytest run) imports no agent (its scorer imports numpy) nor the preparation."""

from __future__ import annotations

DEFAULT_STEPS = 40
DEFAULT_TIME = 8100.0  # seconds, as upstream
DEFAULT_COMMAND_TIMEOUT = 600.0
DIFFICULTIES = ("easy", "medium", "hard")  # the task's levels (--bench-difficulty)
