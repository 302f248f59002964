"""CORE-Bench task files: the plaintext train split, the encrypted test split, the prompts.

The test split is published encrypted (to keep it out of training crawls) with a passphrase
given in the upstream README; it is decrypted in memory and the plaintext never touches disk.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
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


# --------------------------------------------------------------------------- data sets (--bench-dataset)

V1, V11, V11_OOD = "v1", "v1.1", "v1.1-ood"
DATASETS = (V1, V11, V11_OOD)
HF_DATASETS = "https://huggingface.co/datasets/agent-evals"
MANIFEST_NAME = "core_test.json"  # each v1.1 set's manifest, uploaded under this name whatever its split


@dataclass(frozen=True)
class DataSet:
    """One CORE-Bench data set: its name (the --bench-dataset value), what reports call it, its grading rules and,
    for the v1.1 sets, the manifest (pinned by sha256) and where its capsules are published."""

    name: str
    label: str
    version: str  # the release: "v1" or "v1.1"
    grading: str  # the grading rules: "v1" or "v1.1"
    manifest: DataFile | None = None  # None: v1's split files (data_files())
    capsule_url: str | None = None  # None: v1's host (capsules.DEFAULT_CAPSULE_URL)
    capsule_ids: tuple[str, ...] = ()  # the published set, in the manifest's order

    @property
    def capsule_folder(self) -> str:
        """Where the set's capsules are stored under the data dir (v1: ``core_bench/capsules``)."""
        return f"{SUBDIR}/capsules" if self.manifest is None else f"{self.manifest.subdir}/capsules"


def _ids(numbers: str) -> tuple[str, ...]:
    return tuple(f"capsule-{n}" for n in numbers.split())


# The 39 mainline and 19 out-of-distribution capsules of v1.1, in the published order.
V11_MAINLINE_IDS = _ids(
    "5507257 3449234 8807709 6049678 2804717 3418007 1624349 9832712 2816027 3821950 9054015 3301293 1724988 "
    "4299879 0851068 1394704 0504157 3593259 3639589 2345790 7716865 4933686 9240688 1175539 2708693 4252248 "
    "4671827 7186268 5136217 7800694 8412128 7655932 9294029 6295990 9477017 0201673 0152700 2242462 3762736"
)
V11_OOD_IDS = _ids(
    "9026204 8467067 9419423 6724161 8610546 0811394 4320893 8185407 5360076 2675546 0571975 5007288 8353473 "
    "4407237 6562149 2151475 5172670 7350043 3990498"
)


def _v11_set(name: str, split: str, sha256: str, ids: tuple[str, ...]) -> DataSet:
    repo = f"{HF_DATASETS}/core-bench-v1.1-{split}/resolve/main"
    return DataSet(
        name=name,
        label=f"CORE-Bench v1.1 {split}",
        version="v1.1",
        grading="v1.1",
        manifest=DataFile(MANIFEST_NAME, f"{repo}/{MANIFEST_NAME}", sha256, f"{SUBDIR}/{name}"),
        capsule_url=f"{repo}/capsules",
        capsule_ids=ids,
    )


DATA_SETS = {
    V1: DataSet(V1, "CORE-Bench v1", "v1", "v1"),
    V11: _v11_set(
        V11, "mainline", "d4aa5ebb984df7f293e04f2dd120722f172fddea6fcb54a0c928e09bc6ef837d", V11_MAINLINE_IDS
    ),
    V11_OOD: _v11_set(V11_OOD, "ood", "ad09c0cc164fd6d73b3891e2c42e8e04eee28aed861cb5a8e57a2a9f74f668c5", V11_OOD_IDS),
}


def data_set(name: str | None) -> DataSet:
    """The data set named by --bench-dataset (None: v1, the default)."""
    found = DATA_SETS.get(name or V1)
    if found is None:
        raise DatasetError(f"unknown CORE-Bench data set {name!r}; valid: {', '.join(DATASETS)}")
    return found


def validate_gpu_flags(tasks: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """A manifest's ``gpu`` field, where present, is true or false (it decides where the capsule runs)."""
    for task in tasks:
        if "gpu" in task and not isinstance(task["gpu"], bool):
            raise DatasetError(f"{source}: {task['capsule_id']}: 'gpu' must be true or false, got {task['gpu']!r}")
    return tasks


def load_manifest(data_dir: Path, chosen: DataSet, *, verify: bool = True) -> tuple[list[dict[str, Any]], str]:
    """A v1.1 set's tasks in manifest order and the manifest's sha256. The manifest is looked up in
    ``<data dir>/core_bench/<set>/`` and downloaded there when missing; it must match its pinned sha256 unless
    ``verify`` is off (--bench-set allow_custom_data=true: a hand-made manifest in the same layout)."""
    from ...core.data import sha256_of  # why: hashing only a v1.1 run needs

    pinned = chosen.manifest
    if pinned is None:
        raise DatasetError(f"{chosen.label} has no manifest: its tasks are the split files")
    wanted = pinned if verify else replace(pinned, sha256=None)
    path = find_or_fetch(Path(data_dir), wanted)
    source = str(path)
    try:
        tasks = json.loads(path.read_bytes())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DatasetError(
            f"{source} is not valid JSON ({str(exc)[:200] or type(exc).__name__}); delete it so it is downloaded "
            f"again from {pinned.url}"
        ) from exc
    return validate_gpu_flags(validate_tasks(tasks, source), source), sha256_of(path)


def record_fields(settings: Mapping[str, Any]) -> dict[str, Any]:
    """What every record says of its data: the set (v1, v1.1, v1.1-ood), its release and its manifest's sha256
    (v1: the split file's pinned sha256, or a custom file's revision)."""
    name = settings.get("dataset") or V1
    if name != V1:
        manifest = (settings.get("data_hashes") or {}).get("manifest")
        return {"dataset": name, "dataset_version": settings.get("dataset_version"), "manifest_sha256": manifest}
    revision = str(settings.get("dataset_revision") or UPSTREAM_REV)
    split = settings.get("split")
    pinned = data_files()[split].sha256 if split in SPLITS else None
    manifest = revision.removeprefix("custom:") if revision.startswith("custom:") else pinned
    return {"dataset": V1, "dataset_version": "v1", "manifest_sha256": manifest}
