"""The official targets from the data archive (--bench-set data_url), served on 127.0.0.1 only."""

from __future__ import annotations

import functools
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.scicode import archive, dataset
from pytest_agentbench.core.data import DataError, sha256_of

from helpers.scicode_builders import MODEL_CONFTEST, TARGETS, write_dataset
from helpers.serving import serve_in_background

pytestmark = pytest.mark.e2e


class Served:
    """Files of a folder served over HTTP on 127.0.0.1; ``paths`` lists the requested paths."""

    def __init__(self, folder: Path) -> None:
        self.paths: list[str] = []
        served = self

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                served.paths.append(self.path)
                super().do_GET()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/scicode.zip"

    def __enter__(self) -> Served:
        serve_in_background(self.server, "download-server")
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_archive(www: Path, data: Path, h5: Path, extra: dict[str, str] | None = None):
    """Serve ``www/scicode.zip`` holding ``h5`` as the official file (and ``extra`` members) for a fixture."""
    www.mkdir()
    with zipfile.ZipFile(www / "scicode.zip", "w") as zf:
        zf.write(h5, "scicode/data/test_data.h5")
        for name, text in (extra or {}).items():
            zf.writestr(name, text)
    with Served(www) as served:
        served.data = data
        served.h5_sha = sha256_of(h5)
        yield served


@pytest.fixture
def archived(pytester, shared_data, tmp_path):
    """The tiny problems as the test split, without any h5; the archive holds a hand-made h5 (and a hostile
    member that must never be written)."""
    pytester.makeconftest(MODEL_CONFTEST)
    data, h5 = write_dataset(pytester.path, shared_data)
    (data / "scicode" / "problems_test.jsonl").write_bytes((data / "scicode" / "problems_dev.jsonl").read_bytes())
    yield from serve_archive(tmp_path / "www", data, h5, {"../escaped.txt": "must not be written"})


def args(served: Served, *extra: str) -> list[str]:
    return [
        "--bench=scicode",
        "--bench-split=test",
        "--model=mutant",
        f"--bench-data-dir={served.data}",
        f"--bench-set=data_url={served.url}",
        "--bench-timeout=20",
        *extra,
    ]


@pytest.mark.slow
def test_archive_supplies_the_missing_targets(bench, pytester, archived, monkeypatch):
    monkeypatch.delenv("AGENTBENCH_OFFLINE")
    result = bench(*args(archived, "--bench-set=allow_custom_data=true"))
    assert result.ret == 0, result.stdout.str()[-3000:] + result.stderr.str()[-2000:]
    result.stdout.fnmatch_lines(["test: main problems resolved 3/3 (100.0%), subproblems passed 5/5 (100.0%)"])
    extracted = archived.data / "scicode" / "test_data.h5"
    assert sha256_of(extracted) == archived.h5_sha
    assert archived.paths == ["/scicode.zip"]
    assert not (archived.data / "scicode" / archive.ARCHIVE_NAME).exists()
    assert not list(pytester.path.rglob("escaped.txt")) and not (archived.data / "escaped.txt").exists()
    again = bench(*args(archived, "--bench-set=allow_custom_data=true", "--collect-only", "-q"))
    assert again.ret == 0 and archived.paths == ["/scicode.zip"]  # found in the data dir: no second download


def test_an_archive_h5_that_is_not_the_official_file_is_refused(bench, archived, monkeypatch):
    monkeypatch.delenv("AGENTBENCH_OFFLINE")
    result = bench(*args(archived))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert archived.h5_sha in text and dataset.H5_FILE.sha256 in text and "not the official file" in text
    assert not (archived.data / "scicode" / "test_data.h5").exists()


@pytest.mark.slow
def test_listing_the_items_never_fetches_the_archive(bench, archived, monkeypatch):
    """--collect-only lists the test split's items without the official targets: nothing is scored, so the
    1 GB archive is not downloaded for it (online, with the file missing)."""
    monkeypatch.delenv("AGENTBENCH_OFFLINE")
    listed = bench(*args(archived, "--bench-set=allow_custom_data=true", "--collect-only", "-q"))
    assert listed.ret == 0, listed.stdout.str()[-3000:] + listed.stderr.str()[-2000:]
    assert archived.paths == [] and not (archived.data / "scicode" / "test_data.h5").exists()
    assert len([line for line in listed.stdout.lines if "::" in line]) == 5  # the 5 steps of the tiny problems


@pytest.mark.slow
def test_offline_mode_forbids_the_archive_and_validation_runs_never_fetch_it(bench, archived, monkeypatch):
    offline = bench(*args(archived, "--bench-set=allow_custom_data=true", "--bench-ids=3"))
    assert offline.ret == 1 and archived.paths == []  # no download: the step says where to get the file
    offline.stdout.fnmatch_lines(["*eval_error*the official test_data.h5 is missing*"])
    with pytest.raises(DataError, match=r"downloads are off \(\$AGENTBENCH_OFFLINE\)"):
        archive.fetch_h5(archived.url, archived.data, None, verified=False)
    monkeypatch.delenv("AGENTBENCH_OFFLINE")
    validation = bench(
        "--bench=scicode",
        "--bench-split=validation",
        "--model=mutant",
        f"--bench-data-dir={archived.data}",
        f"--bench-set=data_url={archived.url}",
        "--bench-set=allow_custom_data=true",
        "--collect-only",
    )
    assert validation.ret == 0 and "targets=rebuilt" in validation.stdout.str()
    assert archived.paths == []


@pytest.mark.slow
def test_a_read_only_data_dir_extracts_into_the_cache(archived, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setattr(archive, "writable", lambda folder: not str(folder).startswith(str(archived.data)))
    path = archive.fetch_h5(archived.url, archived.data, cache, verified=False)
    assert path == cache / "scicode" / "test_data.h5" and sha256_of(path) == archived.h5_sha
    with pytest.raises(DataError, match=f"sha256 {archived.h5_sha}, expected {dataset.H5_FILE.sha256}"):
        archive.fetch_h5(archived.url, archived.data, tmp_path / "other-cache", verified=True)


# ---------------------------------------------------------------- --bench-targets


@pytest.fixture
def wrong_on_3_1(pytester, shared_data, tmp_path):
    """The tiny problems (validation split only, no h5 anywhere in the data dir); the served archive's h5
    disagrees with the ground truth on step 3.1, so a run shows which targets it scored against."""
    pytester.makeconftest(MODEL_CONFTEST)
    data, _ = write_dataset(pytester.path, shared_data)
    _, h5 = write_dataset(pytester.path, shared_data, targets={**TARGETS, "3.1": [7]})
    yield from serve_archive(tmp_path / "www", data, h5)


def validation_args(served: Served, *extra: str) -> list[str]:
    return [
        "--bench=scicode",
        "--bench-split=validation",
        "--model=mutant",
        f"--bench-data-dir={served.data}",
        f"--bench-set=data_url={served.url}",
        "--bench-timeout=20",
        "--bench-set=allow_custom_data=true",
        *extra,
    ]


@pytest.mark.slow
def test_official_targets_are_fetched_for_a_validation_run(bench, pytester, wrong_on_3_1, monkeypatch):
    monkeypatch.delenv("AGENTBENCH_OFFLINE")
    auto = bench(*validation_args(wrong_on_3_1, "--collect-only"))  # auto: a validation run rebuilds
    assert auto.ret == 0 and "targets=rebuilt" in auto.stdout.str() and wrong_on_3_1.paths == []

    result = bench(*validation_args(wrong_on_3_1, "--bench-targets=official"))
    assert result.ret == 1, result.stdout.str()[-3000:] + result.stderr.str()[-2000:]
    assert wrong_on_3_1.paths == ["/scicode.zip"]
    extracted = wrong_on_3_1.data / "scicode" / "test_data.h5"
    assert sha256_of(extracted) == wrong_on_3_1.h5_sha  # into the data dir, and scored against it:
    result.stdout.fnmatch_lines(
        [
            "validation: main problems resolved 2/3 (66.7%), subproblems passed 4/5 (80.0%)",
            "FAILED scicode/3::3.1 - *AssertionError*",
        ]
    )
    assert not (wrong_on_3_1.data / "scicode" / archive.ARCHIVE_NAME).exists()

    # the official file now present: auto scores against it too, rebuilt ignores it (ground truth: all pass)
    present = bench(*validation_args(wrong_on_3_1, "--bench-ids=3"))
    assert present.ret == 1 and "targets=custom" in present.stdout.str()
    rebuilt = bench(*validation_args(wrong_on_3_1, "--bench-ids=3", "--bench-targets=rebuilt"))
    assert rebuilt.ret == 0, rebuilt.stdout.str()[-3000:]
    rebuilt.stdout.fnmatch_lines(
        ["*targets=rebuilt*", "validation: main problems resolved 1/1 (100.0%), subproblems passed 1/1 (100.0%)"]
    )
    assert wrong_on_3_1.paths == ["/scicode.zip"]


@pytest.mark.slow
def test_official_targets_of_a_read_only_data_dir_go_to_the_cache(bench, pytester, wrong_on_3_1, monkeypatch, tmp_path):
    monkeypatch.delenv("AGENTBENCH_OFFLINE")
    # root writes anywhere: the data dir is made read-only to the plugin's writability probe
    monkeypatch.setattr(archive, "writable", lambda folder: not str(folder).startswith(str(wrong_on_3_1.data)))
    cache = tmp_path / "own-cache"  # not the session's shared cache: an h5 there would be found by other tests
    args = validation_args(wrong_on_3_1, "--bench-targets=official", "--bench-ids=3", f"--bench-cache-dir={cache}")
    result = bench(*args)
    assert result.ret == 1, result.stdout.str()[-3000:] + result.stderr.str()[-2000:]
    result.stdout.fnmatch_lines(["validation: main problems resolved 0/1 (0.0%), subproblems passed 0/1 (0.0%)"])
    assert sha256_of(cache / "scicode" / "test_data.h5") == wrong_on_3_1.h5_sha
    assert not (wrong_on_3_1.data / "scicode" / "test_data.h5").exists()
    again = bench(*args, "--collect-only")
    assert again.ret == 0 and wrong_on_3_1.paths == ["/scicode.zip"]  # found in the cache: no second download


@pytest.mark.slow
def test_official_targets_checked_against_the_pinned_sha256(bench, wrong_on_3_1, monkeypatch):
    monkeypatch.delenv("AGENTBENCH_OFFLINE")
    args = [
        a
        for a in validation_args(wrong_on_3_1, "--bench-targets=official")
        if a != "--bench-set=allow_custom_data=true"
    ]
    result = bench(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert (
        f"sha256 {wrong_on_3_1.h5_sha}, expected {dataset.H5_FILE.sha256}" in text
        and "--bench-targets=official" in text
    )
    assert not (wrong_on_3_1.data / "scicode" / "test_data.h5").exists()


@pytest.mark.slow
def test_official_targets_offline_are_a_usage_error(bench, pytester, wrong_on_3_1):
    result = bench(*validation_args(wrong_on_3_1, "--bench-targets=official"))  # AGENTBENCH_OFFLINE=1
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--bench-targets=official: the official test_data.h5 is missing and downloads are "
            "off ($AGENTBENCH_OFFLINE): download http://127.0.0.1:*/scicode.zip and extract*"
        ]
    )
    assert "--bench-targets=auto rebuilds the targets" in result.stderr.str()
    assert wrong_on_3_1.paths == [] and not list(pytester.path.glob("reports"))
    pytester.makeini("[pytest]\nagentbench_targets = official\n")  # the ini key asks the same
    from_ini = bench(*validation_args(wrong_on_3_1))
    assert from_ini.ret == pytest.ExitCode.USAGE_ERROR and "--bench-targets=official" in from_ini.stderr.str()


@pytest.mark.slow
def test_rebuilt_targets_refuse_the_test_split_and_an_h5(bench, archived):
    test = bench(*args(archived, "--bench-targets=rebuilt", "--collect-only"))
    assert test.ret == pytest.ExitCode.USAGE_ERROR
    assert "--bench-targets=rebuilt: the test split has no public ground truth" in test.stderr.str()
    h5 = bench(
        *validation_args(archived, "--bench-targets=rebuilt", f"--bench-set=h5={archived.data}/x.h5", "--collect-only")
    )
    assert h5.ret == pytest.ExitCode.USAGE_ERROR and "leave out --bench-set h5" in h5.stderr.str()
    assert archived.paths == []


@pytest.mark.slow
def test_targets_option_in_help(bench):
    shown = " ".join(bench("--help").stdout.str().split())
    assert "--bench-targets={auto,official,rebuilt,verified}" in shown and "agentbench_targets" in shown
    assert "official (the official file even for a validation-only run" in shown
