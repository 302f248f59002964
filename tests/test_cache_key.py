"""The key that signs a cache folder's stamps and manifests lives in that folder (``secret``, mode 0600, this
user's alone), so what a run stored is trusted by the next run wherever the folder is kept; a key file that is
not the user's alone signs nothing."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from pytest_agentbench.core import data


@pytest.fixture
def no_key_override(monkeypatch):
    monkeypatch.delenv(data.SECRET_ENV, raising=False)
    monkeypatch.setattr(data, "_SECRET", {})


def test_the_key_is_made_once_in_the_cache_folder(tmp_path, no_key_override):
    cache = tmp_path / "cache"
    mac = data.sign("entry", cache)
    key = cache / data.SECRET_NAME
    assert mac is not None and key.is_file() and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert [p.name for p in cache.iterdir()] == [data.SECRET_NAME]  # no draft left behind
    data._SECRET.clear()  # a new process: reads the same key
    assert data.signed("entry", mac, cache) and not data.signed("entry", mac, tmp_path / "other-cache")


def test_without_a_folder_the_per_user_cache_folder_holds_it(tmp_path, no_key_override, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data.secret_path() == tmp_path / "xdg" / "pytest-agentbench" / data.SECRET_NAME
    monkeypatch.setenv(data.SECRET_ENV, str(tmp_path / "elsewhere"))
    assert data.secret_path(tmp_path / "cache") == tmp_path / "elsewhere"


@pytest.mark.parametrize("mode", [0o640, 0o604])
def test_a_key_others_can_read_signs_nothing(tmp_path, no_key_override, mode):
    cache = tmp_path / "cache"
    cache.mkdir()
    key = cache / data.SECRET_NAME
    key.write_bytes(b"k" * 32)
    key.chmod(mode)
    assert data.sign("entry", cache) is None


def test_a_planted_link_signs_nothing(tmp_path, no_key_override):
    cache = tmp_path / "cache"
    cache.mkdir()
    real = tmp_path / "known-key"
    real.write_bytes(b"k" * 32)
    real.chmod(0o600)
    (cache / data.SECRET_NAME).symlink_to(real)
    assert data.sign("entry", cache) is None


def _sign_in_child(cache: str, queue) -> None:
    data._SECRET.clear()
    queue.put(data.sign("entry", Path(cache)))


def test_processes_creating_the_key_at_once_all_use_one_key(tmp_path, no_key_override):
    cache = tmp_path / "cache"
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    children = [context.Process(target=_sign_in_child, args=(str(cache), queue)) for _ in range(6)]
    for child in children:
        child.start()
    macs = [queue.get(timeout=60) for _ in children]
    for child in children:
        child.join(timeout=60)
    assert None not in macs and len(set(macs)) == 1
    assert sorted(os.listdir(cache)) == [data.SECRET_NAME]
