"""Helpers for reading what a pytester run of a benchmark left behind (plain functions, no fixtures)."""
from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("AGENTBENCH_DATA_DIR") or REPO.parent / "shared" / "data").resolve()


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def run_dirs(root: Path, bench: str = "scicode") -> list[Path]:
    """The run folders under ``root/reports/<bench>/<model>/``, sorted."""
    return sorted(p for p in (Path(root) / "reports" / bench).glob("*/*") if p.is_dir())
