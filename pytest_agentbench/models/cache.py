"""On-disk response cache for model calls.

One JSON file per entry under ``<root>/<key[:2]>/<key>.json``. Entries are written to a temporary
file in the same directory and renamed into place, so concurrent pytest-xdist workers never see a
half-written file and two workers writing the same key simply race to an identical result.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

CACHE_MODES = ("rw", "ro", "off", "replay")
DEFAULT_CACHE_DIR = ".agentbench_cache"
# entries live in a versioned subfolder so a format change never reads stale records
CACHE_SUBDIR = "responses-v1"


def canonical_json(value) -> str:
    """The one serialisation used for keys: sorted keys, no whitespace, unicode kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def cache_key(*, base_url: str, model: str, protocol: str, messages: list, tools: list | None,
              params: dict, sample_index: int, tool_choice: str | None = None) -> str:
    payload = {
        "base_url": base_url, "model": model, "protocol": protocol, "messages": messages,
        "tools": tools, "params": params, "sample_index": sample_index,
    }
    if tool_choice is not None:  # only part of the key when used, so plain calls keep stable keys
        payload["tool_choice"] = tool_choice
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


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

    @property
    def reads(self) -> bool:
        return self.mode in ("rw", "ro", "replay")

    @property
    def writes(self) -> bool:
        return self.mode == "rw"

    def path_for(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
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

    def put(self, key: str, record: dict) -> None:
        if not self.writes:
            return
        path = self.path_for(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(canonical_json(record))
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
