"""CORE-Bench task files: the plaintext train split, the encrypted test split, the prompts.

The test split is published encrypted (to keep it out of training crawls) with a passphrase
given in the upstream README; it is decrypted in memory and the plaintext never touches disk.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from ...core.data import DataFile, find_or_fetch

UPSTREAM_REV = "db8a3d00c25fc30cf091f6310203b7c715268084"
RAW_BASE = f"https://raw.githubusercontent.com/siegelz/core-bench/{UPSTREAM_REV}/benchmark"
SUBDIR = "core_bench"
TEST_PASSPHRASE = "reproducibility"  # public: printed in the upstream README
SPLITS = ("train", "test")
TASK_KEYS = frozenset({"field", "language", "capsule_title", "capsule_id", "capsule_doi", "task_prompt", "results"})


class DatasetError(Exception):
    """A CORE-Bench task file cannot be read; the message names the file and the fix."""


def data_files() -> dict[str, DataFile]:
    """The pinned upstream files, as the data module's ``DataFile`` records."""
    return {
        "train": DataFile(
            "core_train.json",
            f"{RAW_BASE}/dataset/core_train.json",
            "3df47f1b3fa1cb60045018eb1a0f1ad4ecf6a53f72318c845a879ce0313b0730",
            SUBDIR,
        ),
        "test": DataFile(
            "core_test.json.gpg",
            f"{RAW_BASE}/dataset/core_test.json.gpg",
            "cebf204bc8fd0b2e1b6e65ab762b7edbf906313ff3718780492633aeb4d972f2",
            SUBDIR,
        ),
        "prompts": DataFile(
            "benchmark_prompts.json",
            f"{RAW_BASE}/benchmark_prompts.json",
            "e70b63c40671f3924a8d71aac0e1c64a5dae3c8cf0bf391471c488581fff53b8",
            SUBDIR,
        ),
    }


def decrypt_test_split(ciphertext: bytes, passphrase: str = TEST_PASSPHRASE) -> bytes:
    """Decrypt ``core_test.json.gpg`` in memory with a throw-away GnuPG home."""
    try:
        import gnupg  # why: only the test split needs it; it is not imported at plugin start
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise DatasetError(
            "python-gnupg is required to read the CORE-Bench test split: pip install python-gnupg"
        ) from exc
    with tempfile.TemporaryDirectory(prefix="agentbench-gnupg-") as home:
        try:
            gpg = gnupg.GPG(gnupghome=home)
        except (OSError, RuntimeError) as exc:
            raise DatasetError(
                f"cannot start gpg to decrypt the CORE-Bench test split ({exc}); install GnuPG "
                "(apt-get install gnupg / brew install gnupg) or use --bench-split=train"
            ) from exc
        result = gpg.decrypt(ciphertext, passphrase=passphrase)
        if not result.ok:
            raise DatasetError(
                f"decrypting core_test.json.gpg failed ({result.status or 'unknown gpg error'}); "
                "the file is corrupt or not the official one: delete it so it is downloaded again"
            )
        return result.data


def validate_tasks(tasks: Any, source: str) -> list[dict[str, Any]]:
    """Check the fields the benchmark relies on; a bad entry is named with its index and capsule."""
    if not isinstance(tasks, list):
        raise DatasetError(f"{source}: expected a JSON list of tasks, got {type(tasks).__name__}")
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        where = f"{source}: task #{index}"
        if not isinstance(task, dict):
            raise DatasetError(f"{where} is not an object")
        missing = TASK_KEYS - task.keys()
        if missing:
            raise DatasetError(f"{where} ({task.get('capsule_id', '?')}) lacks {sorted(missing)}")
        cid = task["capsule_id"]
        where = f"{source}: {cid}"
        if cid in seen:
            raise DatasetError(f"{where} appears twice")
        seen.add(cid)
        runs = task["results"]
        if not isinstance(runs, list) or len(runs) < 2 or not all(isinstance(r, dict) for r in runs):
            raise DatasetError(f"{where}: 'results' must be a list of at least 2 reference runs (objects)")
        if any(r.keys() != runs[0].keys() for r in runs):
            raise DatasetError(f"{where}: the reference runs do not answer the same questions")
    return tasks


def parse_split(raw: bytes, split: str, source: str) -> list[dict[str, Any]]:
    """Tasks from the bytes of a split file (decrypting the test split)."""
    if split not in SPLITS:
        raise DatasetError(f"unknown CORE-Bench split {split!r}; valid: {', '.join(SPLITS)}")
    plaintext = decrypt_test_split(raw) if split == "test" else raw
    try:
        tasks = json.loads(plaintext)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: JSON errors, huge integers
        raise DatasetError(
            f"{source} is not valid JSON ({str(exc)[:200] or type(exc).__name__}); delete it so it is downloaded again"
        ) from exc
    return validate_tasks(tasks, source)


def is_encrypted(raw: bytes, name: str) -> bool:
    """A GPG file: by its name, or by its first byte (an OpenPGP packet tag has the high bit set)."""
    return name.endswith((".gpg", ".pgp", ".asc")) or (bool(raw) and raw[0] & 0x80 != 0)


def read_custom(path: Path) -> list[dict[str, Any]]:
    """Tasks from a user's metadata file (``--bench-set dataset_path``): JSON, or GPG-encrypted with the
    public passphrase; checked like the official files, with the file named in every error."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"--bench-set dataset_path {path}: cannot be read ({exc})") from exc
    source = f"--bench-set dataset_path {path}"
    plaintext = decrypt_test_split(raw) if is_encrypted(raw, path.name) else raw
    try:
        tasks = json.loads(plaintext)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DatasetError(f"{source} is not valid JSON ({str(exc)[:200] or type(exc).__name__})") from exc
    return validate_tasks(tasks, source)


def dataset_revision(custom: Path | None = None) -> str:
    """What the records call the metadata: the pinned upstream revision, or ``custom:<sha256>`` of a user's file."""
    if custom is None:
        return UPSTREAM_REV
    from ...core.data import sha256_of  # why: only custom metadata needs hashing

    return f"custom:{sha256_of(Path(custom))}"


def read_split(path: Path, split: str) -> list[dict[str, Any]]:
    path = Path(path)
    return parse_split(path.read_bytes(), split, str(path))


def load_split(data_dir: Path, split: str) -> list[dict[str, Any]]:
    """Every task of ``split`` in upstream order, fetching the pinned file when absent."""
    if split not in SPLITS:
        raise DatasetError(f"unknown CORE-Bench split {split!r}; valid: {', '.join(SPLITS)}")
    return read_split(find_or_fetch(Path(data_dir), data_files()[split]), split)


def load_prompts(data_dir: Path) -> dict[str, str]:
    """The upstream prompt templates keyed ``codeocean_easy|medium|hard``."""
    path = find_or_fetch(Path(data_dir), data_files()["prompts"])
    try:
        prompts = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path} is not valid JSON ({exc}); delete it so it is downloaded again") from exc
    needed = {f"codeocean_{d}" for d in ("easy", "medium", "hard")}
    if not isinstance(prompts, dict) or not needed <= prompts.keys():
        raise DatasetError(f"{path} lacks the prompt keys {sorted(needed)}; replace it with the official file")
    return prompts
