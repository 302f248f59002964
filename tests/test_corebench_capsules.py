"""Capsule download, safe extraction and per-difficulty workspaces, against a 127.0.0.1 server."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.corebench import capsules, prepare
from pytest_agentbench.benchmarks.corebench.capsules import CapsuleError, ensure_capsule, safe_extract
from pytest_agentbench.benchmarks.corebench.checks import check_capsules
from pytest_agentbench.core.errors import ConfigError

from helpers.capsule_factory import (
    MALICIOUS_KINDS,
    CapsuleServer,
    build_capsule_archive,
    build_malicious_archive,
    capsule_files,
    write_capsule_tree,
)

CID = "capsule-1234567"


@pytest.fixture
def served(tmp_path, monkeypatch):
    """(server root with the archive, store, extract root); the capsule URL points at 127.0.0.1."""
    root = tmp_path / "www"
    build_capsule_archive(root, CID)
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "placeholder")  # replaced once the server has a port
    return root, tmp_path / "store", tmp_path / "extracted"


def _serve(monkeypatch, server: CapsuleServer) -> None:
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, server.url + "/")


def _files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_capsule_url_default_and_override(monkeypatch):
    monkeypatch.delenv(capsules.CAPSULE_URL_ENV, raising=False)
    assert capsules.capsule_url(CID) == f"https://corebench.cs.princeton.edu/capsules/{CID}.tar.gz"
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "http://127.0.0.1:9/mirror/")
    assert capsules.capsule_url(CID) == f"http://127.0.0.1:9/mirror/{CID}.tar.gz"


def test_download_and_extract(served, monkeypatch):
    root, store, extracted = served
    with CapsuleServer(root) as server:
        _serve(monkeypatch, server)
        folder = ensure_capsule(CID, store, extracted, backoff=0.01)
        assert [r["status"] for r in server.requests] == [200]
        assert server.requests[0]["path"] == f"/{CID}.tar.gz"
        # a second call uses the unpacked copy: no new request
        assert ensure_capsule(CID, store, extracted, backoff=0.01) == folder
        assert len(server.requests) == 1
    digest = hashlib.sha256((store / f"{CID}.tar.gz").read_bytes()).hexdigest()
    assert folder == extracted / capsules.entry_name(CID, digest)  # keyed by the tarball's sha256
    assert _files_under(folder) == set(capsule_files())
    assert (store / f"{CID}.tar.gz").is_file()
    assert not list(extracted.glob(".capsule-*"))  # no staging folder left behind


def test_retry_after_server_errors(served, monkeypatch):
    root, store, extracted = served
    with CapsuleServer(root, fail_first=2) as server:
        _serve(monkeypatch, server)
        folder = ensure_capsule(CID, store, extracted, retries=3, backoff=0.01)
        assert [r["status"] for r in server.requests] == [500, 500, 200]
    assert (folder / "code" / "main.py").is_file()


def test_gives_up_after_retries_with_clear_message(served, monkeypatch):
    root, store, extracted = served
    with CapsuleServer(root, fail_first=10) as server:
        _serve(monkeypatch, server)
        with pytest.raises(CapsuleError) as info:
            ensure_capsule(CID, store, extracted, retries=1, backoff=0.01)
        assert len(server.requests) == 2
        message = str(info.value)
        assert f"{server.url}/{CID}.tar.gz" in message and str(store) in message
    assert not (store / f"{CID}.tar.gz").exists()


@pytest.mark.parametrize("honour_range", [True, False])
def test_resume_of_partial_download(served, monkeypatch, honour_range):
    root, store, extracted = served
    archive = (root / f"{CID}.tar.gz").read_bytes()
    half = len(archive) // 2
    store.mkdir()
    (store / f"{CID}.tar.gz.part").write_bytes(archive[:half])  # an interrupted earlier download
    sha = hashlib.sha256(archive).hexdigest()
    with CapsuleServer(root, honour_range=honour_range) as server:
        _serve(monkeypatch, server)
        folder = ensure_capsule(CID, store, extracted, sha256=sha, backoff=0.01)
        assert server.requests[0]["range"] == f"bytes={half}-"
        assert server.requests[0]["status"] == (206 if honour_range else 200)
    assert (store / f"{CID}.tar.gz").read_bytes() == archive
    assert _files_under(folder) == set(capsule_files())


def test_bad_checksum_is_an_error_and_leaves_nothing(served, monkeypatch):
    root, store, extracted = served
    with CapsuleServer(root) as server:
        _serve(monkeypatch, server)
        with pytest.raises(CapsuleError, match="checksum mismatch") as info:
            ensure_capsule(CID, store, extracted, sha256="0" * 64, backoff=0.01)
        assert f"{server.url}/{CID}.tar.gz" in str(info.value)
    assert not (store / f"{CID}.tar.gz").exists()
    assert not list(extracted.glob(f"{CID}*"))


def test_missing_capsule_names_url_and_folder(served, monkeypatch):
    root, store, extracted = served
    with CapsuleServer(root) as server:
        _serve(monkeypatch, server)
        with pytest.raises(CapsuleError) as info:
            ensure_capsule("capsule-7654321", store, extracted, backoff=0.01)
        assert [r["status"] for r in server.requests] == [404]  # a 404 is not retried
    message = str(info.value)
    assert "/capsule-7654321.tar.gz" in message and f"put it in {store}/" in message
    assert "--bench-capsules-dir" in message


def test_offline_a_capsule_is_not_downloaded(served, monkeypatch):
    root, store, extracted = served
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    with CapsuleServer(root) as server:
        _serve(monkeypatch, server)
        with pytest.raises(CapsuleError, match=r"downloads are off \(\$AGENTBENCH_OFFLINE\)") as info:
            ensure_capsule(CID, store, extracted, backoff=0.01)
        assert server.requests == []
    assert f"put it in {store}/" in str(info.value) and not (store / f"{CID}.tar.gz").exists()


def test_the_check_before_items_names_every_capsule_it_cannot_have(tmp_path, monkeypatch):
    """Staged capsules pass; missing ones are one error (offline: without a request; online: an unreachable host)."""
    store = tmp_path / "store"
    build_capsule_archive(store, CID)
    opts = {"data_dir": str(tmp_path / "data"), "cache_dir": str(tmp_path / "cache"), "capsules_dir": str(store)}
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "http://127.0.0.1:9")  # nothing listens there
    check_capsules(opts, [CID])  # staged: nothing to fetch
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    with pytest.raises(ConfigError) as offline:
        check_capsules(opts, [CID, "capsule-1", "capsule-2"])
    assert f"2 selected capsule(s) are not in {store} and downloads are off" in str(offline.value)
    assert "capsule-1, capsule-2." in str(offline.value) and CID not in str(offline.value)
    monkeypatch.delenv("AGENTBENCH_OFFLINE")
    with pytest.raises(ConfigError) as online:
        check_capsules(opts, [CID, "capsule-1"])
    assert f"1 selected capsule(s) are not in {store} and cannot be downloaded (" in str(online.value)
    assert "): capsule-1. Put each in" in str(online.value)


def test_prestaged_archive_and_folder_need_no_network(tmp_path, monkeypatch):
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "http://127.0.0.1:9")  # nothing listens there
    store = tmp_path / "store"
    build_capsule_archive(store, CID)
    folder = ensure_capsule(CID, store, tmp_path / "x", retries=0)
    assert _files_under(folder) == set(capsule_files())
    # upstream's own layout: an unpacked <store>/<id>/ folder is used as it is
    other = "capsule-2222222"
    unpacked = write_capsule_tree(store, other)
    assert ensure_capsule(other, store, tmp_path / "x", retries=0) == unpacked


def test_invalid_capsule_id_is_rejected(tmp_path):
    with pytest.raises(CapsuleError, match="invalid capsule id"):
        ensure_capsule("../capsule-1", tmp_path, tmp_path / "x")


@pytest.mark.parametrize("kind", MALICIOUS_KINDS)
def test_malicious_archives_are_rejected(tmp_path, kind):
    archive = build_malicious_archive(tmp_path / "store", CID, kind)
    dest = tmp_path / "deep" / "er" / "extract"
    with pytest.raises(CapsuleError) as info:
        safe_extract(archive, dest, CID)
    message = str(info.value)
    expected = {
        "absolute": "absolute path",
        "dotdot": "'..'",
        "symlink_outside": "points outside the capsule",
        "symlink_absolute": "link to absolute path",
        "hardlink_outside": "points outside the capsule",
        "device": "device or special file",
        "fifo": "device or special file",
        "two_top_folders": f"outside the single top-level folder {CID}/",
        "wrong_top_folder": f"outside the single top-level folder {CID}/",
        "top_is_file": "is not a folder",
    }[kind]
    assert expected in message and str(archive) in message
    assert not (dest / CID).exists()  # nothing extracted, not even the harmless file
    assert not (tmp_path / "agentbench-evil.txt").exists() and not (tmp_path / "deep" / "agentbench-evil.txt").exists()


def test_symlink_inside_capsule_is_allowed(tmp_path):
    import io
    import tarfile

    archive = tmp_path / f"{CID}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = b"1,2\n"
        info = tarfile.TarInfo(f"{CID}/data/values.csv")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo(f"{CID}/code/values.csv")
        link.type, link.linkname = tarfile.SYMTYPE, "../data/values.csv"
        tar.addfile(link)
    folder = safe_extract(archive, tmp_path / "x", CID)
    assert (folder / "code" / "values.csv").is_symlink()
    assert (folder / "code" / "values.csv").read_bytes() == b"1,2\n"


def test_corrupt_archive_is_a_clear_error(tmp_path):
    archive = tmp_path / f"{CID}.tar.gz"
    archive.write_bytes(b"this is not gzip")
    with pytest.raises(CapsuleError, match="not a readable tar archive"):
        safe_extract(archive, tmp_path / "x", CID)


def test_archive_store_prefers_writable_data_dir(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    assert capsules.archive_store(data, tmp_path / "cache") == data / "core_bench" / "capsules"
    assert capsules.archive_store(data, tmp_path / "cache", tmp_path / "mine") == tmp_path / "mine"
    data.chmod(0o555)  # read-only (also for root: the mode bits decide)
    try:
        assert capsules.archive_store(data, tmp_path / "cache") == tmp_path / "cache" / "capsules"
    finally:
        data.chmod(0o755)


# --------------------------------------------------------------------------- difficulty preparation

BASE_FILES = set(capsule_files())
HIDDEN_FOR_EASY_AND_HARD = {"REPRODUCING.md", "environment/Dockerfile", "code/run", "code/run.sh"}
RESULT_FILES = {f for f in BASE_FILES if f.startswith("results/")}


@pytest.mark.parametrize(
    "difficulty, expected",
    [
        ("easy", BASE_FILES - HIDDEN_FOR_EASY_AND_HARD),
        ("medium", BASE_FILES - RESULT_FILES),
        ("hard", BASE_FILES - HIDDEN_FOR_EASY_AND_HARD - RESULT_FILES),
    ],
)
def test_workspace_file_set_per_difficulty(tmp_path, difficulty, expected):
    source = write_capsule_tree(tmp_path / "cache", CID)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    copy = prepare.prepare_workspace(source, workspace, CID, difficulty)
    assert copy == workspace  # the capsule's folders sit directly in the workspace root
    assert _files_under(copy) == expected
    assert (copy / "results").is_dir()  # emptied, never removed
    assert (copy / "environment").exists() == (difficulty == "medium")
    assert _files_under(source) == BASE_FILES  # the cached capsule is untouched


def test_unknown_difficulty(tmp_path):
    with pytest.raises(ValueError, match="valid: easy, medium, hard"):
        prepare.prepare_workspace(tmp_path, tmp_path / "ws", CID, "expert")


def test_gpu_rule_is_lowercase_mention(tmp_path):
    assert prepare.capsule_needs_gpu(write_capsule_tree(tmp_path / "a", CID, gpu=True)) is True
    assert prepare.capsule_needs_gpu(write_capsule_tree(tmp_path / "b", CID, gpu=False)) is False
    assert prepare.needs_gpu("Requires a GPU") is False  # upstream's check is case-sensitive
    assert prepare.capsule_needs_gpu(tmp_path / "nowhere") is None
