"""Small file and text helpers every layer shares: one atomic writer, one natural sort key, one trimmer."""
from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str, *, durable: bool = False) -> None:
    """Write ``text`` so that a reader sees the old file or the new one, never half of it.

    ``durable``: fsync the new file before it replaces the old one (it survives a crash of the machine)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def natural_key(text: object) -> list:
    """Sort key that puts 77.3 before 77.10 and capsule-2 before capsule-10."""
    return [int(p) if p.isdigit() else p for p in str(text).replace("-", ".").split(".")]


def trim_parts(head: bytes, tail: bytes, size: int) -> str:
    """Text of a stream of ``size`` bytes of which only ``head`` and ``tail`` were kept."""
    if size <= len(head) + len(tail):
        return (head + tail)[:size].decode("utf-8", "replace")
    dropped = size - len(head) - len(tail)
    return (head.decode("utf-8", "replace") + f"\n... [{dropped} bytes trimmed of {size}] ...\n"
            + tail.decode("utf-8", "replace"))


def trim(data: bytes | str, limit: int) -> str:
    """Keep the head and the tail of a long output (``limit`` bytes in all) and say how much was dropped."""
    raw = data.encode("utf-8", "replace") if isinstance(data, str) else data
    if len(raw) <= limit:
        return raw.decode("utf-8", "replace")
    half = limit // 2
    return trim_parts(raw[:half], raw[len(raw) - half:], len(raw))
