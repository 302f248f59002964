"""On-disk response cache for model calls.

One JSON file per entry under ``<root>/<key[:2]>/<key>.json``. Entries are written to a temporary
file in the same directory and renamed into place, so concurrent pytest-xdist workers never see a
half-written file and two workers writing the same key simply race to an identical result.

On an xdist worker the plugin attaches a ``CacheJournal``: every entry written is also kept there, so it
can travel to the controller with the item's record (``add_entry`` puts it into the controller's cache), and
replay and resume work from the controller's cache alone, wherever the worker ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

CACHE_MODES = ("rw", "ro", "off", "replay")
DEFAULT_CACHE_DIR = ".agentbench_cache"
# entries live in a versioned subfolder so a format change never reads stale records
CACHE_SUBDIR = "responses-v1"
KEY_PATTERN = re.compile(r"[0-9a-f]{64}")  # a sha256 hex digest (cache_key): the only names an entry may have


def canonical_json(value: object) -> str:
    """The one serialisation used for keys: sorted keys, no whitespace, unicode kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def cache_key(
    *,
    base_url: str,
    model: str,
    protocol: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    params: dict[str, Any],
    sample_index: int,
    tool_choice: str | None = None,
) -> str:
    payload = {
        "base_url": base_url,
        "model": model,
        "protocol": protocol,
        "messages": messages,
        "tools": tools,
        "params": params,
        "sample_index": sample_index,
    }
    if tool_choice is not None:  # only part of the key when used, so plain calls keep stable keys
        payload["tool_choice"] = tool_choice
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


class CacheJournal:
    """The entries written since the last ``take()`` (thread-safe: a prefetch thread may write one)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[str, str] = {}  # key -> the entry's JSON text

    def note(self, key: str, text: str) -> None:
        with self.lock:
            self.entries[key] = text

    def take(self) -> dict[str, str]:
        with self.lock:
            entries, self.entries = self.entries, {}
        return entries


class ResponseCache:
    """Read/write policy over the entry files.

    rw: read and write; ro: read only; off: neither; replay: read only, and the caller treats a
    miss as an error (re-scoring a run without a model).
    """

    def __init__(self, root: Path | str, mode: str = "rw"):
        if mode not in CACHE_MODES:
            raise ValueError(f"cache mode {mode!r} is not one of {', '.join(CACHE_MODES)}")
        self.root = Path(root) / CACHE_SUBDIR
        self.mode = mode
        self.journal: CacheJournal | None = None  # set on an xdist worker: new entries also go to the controller

    @property
    def reads(self) -> bool:
        return self.mode in ("rw", "ro", "replay")

    @property
    def writes(self) -> bool:
        return self.mode == "rw"

    def path_for(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        if not self.reads:
            return None
        path = self.path_for(key)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            # a damaged entry is a miss; the next successful call overwrites it
            return None
        return record if isinstance(record, dict) else None

    def put(self, key: str, record: dict[str, Any]) -> None:
        if not self.writes:
            return
        text = canonical_json(record)
        self.write_entry(key, text)
        if self.journal is not None:
            self.journal.note(key, text)

    def add_entry(self, key: str, text: str) -> bool:
        """Store an entry made elsewhere (an xdist worker's) unless this cache has it already; True when written.

        The key and the text come from another process: a key that is no sha256 digest, or text that is no
        JSON object, is a ValueError (nothing is written)."""
        if not KEY_PATTERN.fullmatch(str(key)):
            raise ValueError(f"cache entry key {str(key)[:80]!r} is not a sha256 hex digest")
        if not isinstance(json.loads(text), dict):
            raise ValueError(f"cache entry {key[:16]}...: not a JSON object")
        if not self.writes or self.path_for(key).exists():
            return False
        self.write_entry(key, text)
        return True

    def write_entry(self, key: str, text: str) -> None:
        path = self.path_for(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
