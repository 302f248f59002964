"""The one result type of running something: a scoring script, a tool call, an agent's command."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ExecResult:
    exit_code: int | None  # None when it was killed (timeout, a limit, a lost executor)
    stdout: str  # head and tail only when the stream was longer than the limit (sizes below)
    stderr: str
    duration: float = 0.0
    timed_out: bool = False
    limit: str | None = None  # which limit ended the run, when one did
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    files: dict[str, bytes] = field(default_factory=dict)  # files the run was asked to hand back (``collect``)
    text_repaired: int = 0  # undecodable bytes of stdout/stderr shown as U+FFFD (core.text.decode)

    @property
    def trimmed(self) -> bool:
        return self.stdout_bytes > len(self.stdout.encode()) or self.stderr_bytes > len(self.stderr.encode())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
