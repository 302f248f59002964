"""CORE-Bench from plain Python: load a split's tasks (scoring is ``scorer.score_report``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...core.data import DATA_DIR_ENV
from . import dataset


def load_tasks(split: str = "train", data_dir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The tasks of ``split`` (train or test; test is decrypted with upstream's published passphrase) in
    upstream order; the data folder is the one given, else $AGENTBENCH_DATA_DIR, else ./data."""
    folder = Path(data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV) or "data")
    return dataset.load_split(folder, split)
