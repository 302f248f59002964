"""Synthetic CORE-Bench capsules and a 127.0.0.1 file server for the capsule tests.

A capsule here is a tiny "paper": code that averages a CSV, its data, the shipped results,
REPRODUCING.md, environment/ and metadata/, in the official layout, packed as
``<capsule_id>.tar.gz`` with one top-level ``<capsule_id>/`` folder.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import io
import os
import shutil
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from helpers.serving import serve_in_background

CAPSULE_FILES = {
    "code/main.py": (
        "import csv, statistics\n"
        "rows = [float(r[0]) for r in csv.reader(open('../data/values.csv'))]\n"
        "open('../results/output.txt', 'w').write(f'mean accuracy: {statistics.mean(rows):.4f}\\n')\n"
    ),
    "code/run.sh": "#!/usr/bin/env bash\nset -e\npython main.py\n",
    "code/run": "#!/usr/bin/env bash\nbash run.sh\n",
    "code/README.md": "Run `python main.py` from code/.\n",
    "data/values.csv": "0.91\n0.93\n0.95\n",
    "results/output.txt": "mean accuracy: 0.9300\n",
    "environment/Dockerfile": "FROM python:3.11-slim\nRUN pip install numpy\n",
    "metadata/metadata.yml": "title: A tiny paper\n",
}
# A figure the code draws without any library (the test image has no matplotlib): a 4x4 PNG.
PLOT_SCRIPT = (
    "import struct, zlib\n"
    "def chunk(kind, data):\n"
    "    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))\n"
    "rows = b''.join(b'\\x00' + bytes([200, 30, 30] * 4) for _ in range(4))\n"
    "png = (b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 4, 4, 8, 2, 0, 0, 0))\n"
    "       + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b''))\n"
    "open('../results/figure.png', 'wb').write(png)\n"
)
REPRODUCING_CPU = "# Reproducing\n\nRun `bash code/run.sh` inside the image built from environment/.\n"
REPRODUCING_GPU = REPRODUCING_CPU + "\nThis capsule needs a gpu (CUDA 11).\n"


def capsule_files(gpu: bool = False, figure: bool = False) -> dict[str, str]:
    files = {**CAPSULE_FILES, "REPRODUCING.md": REPRODUCING_GPU if gpu else REPRODUCING_CPU}
    if figure:
        files["code/plot.py"] = PLOT_SCRIPT
    return files


def write_capsule_tree(parent: Path, capsule_id: str, gpu: bool = False) -> Path:
    """The unpacked capsule at ``parent/<capsule_id>``."""
    root = Path(parent) / capsule_id
    for rel, text in capsule_files(gpu).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def _add_special(tar: tarfile.TarFile, name: str, kind: bytes, linkname: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    tar.addfile(info)


def build_capsule_archive(
    dest_dir: Path, capsule_id: str, gpu: bool = False, extra: dict[str, str] | None = None, figure: bool = False
) -> Path:
    """``dest_dir/<capsule_id>.tar.gz`` with the official layout."""
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / f"{capsule_id}.tar.gz"
    # gzip stamps its header with the time: mtime=0 makes the same capsule the same bytes (and sha256) every time
    with gzip.GzipFile(path, "wb", mtime=0) as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        _add_special(tar, capsule_id, tarfile.DIRTYPE)
        for rel, text in {**capsule_files(gpu, figure), **(extra or {})}.items():
            _add_bytes(tar, f"{capsule_id}/{rel}", text.encode(), 0o755 if rel.startswith("code/run") else 0o644)
    return path


MALICIOUS_KINDS = (
    "absolute",
    "dotdot",
    "symlink_outside",
    "symlink_absolute",
    "hardlink_outside",
    "device",
    "fifo",
    "two_top_folders",
    "wrong_top_folder",
    "top_is_file",
)


def build_malicious_archive(dest_dir: Path, capsule_id: str, kind: str) -> Path:
    """A capsule archive with one hostile member of ``kind`` after a normal file."""
    path = Path(dest_dir) / f"{capsule_id}.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    top = "capsule-0000001" if kind == "wrong_top_folder" else capsule_id
    with tarfile.open(path, "w:gz") as tar:
        if kind == "top_is_file":
            _add_bytes(tar, top, b"not a folder")
            return path
        _add_bytes(tar, f"{top}/code/main.py", b"print('hi')\n")
        if kind == "absolute":
            _add_bytes(tar, "/tmp/agentbench-evil.txt", b"pwned")
        elif kind == "dotdot":
            _add_bytes(tar, f"{top}/../../agentbench-evil.txt", b"pwned")
        elif kind == "symlink_outside":
            _add_special(tar, f"{top}/data/escape", tarfile.SYMTYPE, "../../outside")
        elif kind == "symlink_absolute":
            _add_special(tar, f"{top}/data/passwd", tarfile.SYMTYPE, "/etc/passwd")
        elif kind == "hardlink_outside":
            _add_special(tar, f"{top}/data/shadow", tarfile.LNKTYPE, "etc/shadow")
        elif kind == "device":
            _add_special(tar, f"{top}/data/null", tarfile.CHRTYPE)
        elif kind == "fifo":
            _add_special(tar, f"{top}/data/pipe", tarfile.FIFOTYPE)
        elif kind == "two_top_folders":
            _add_bytes(tar, "other-folder/readme.txt", b"second top-level folder")
        elif kind != "wrong_top_folder":
            raise ValueError(f"unknown malicious archive kind {kind!r}; valid: {', '.join(MALICIOUS_KINDS)}")
    return path


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        owner = self.server.owner
        with owner.lock:
            number = len(owner.requests)
            entry = {"path": self.path, "range": self.headers.get("Range"), "status": None}
            owner.requests.append(entry)
        if number < owner.fail_first:
            entry["status"] = 500
            self.send_error(500, "synthetic failure")
            return
        target = (owner.root / self.path.lstrip("/")).resolve()
        if not target.is_relative_to(owner.root.resolve()) or not target.is_file():
            entry["status"] = 404
            self.send_error(404)
            return
        data = target.read_bytes()
        start = 0
        requested = self.headers.get("Range")
        if requested and owner.honour_range and requested.startswith("bytes=") and requested.endswith("-"):
            start = int(requested[len("bytes=") : -1])
        status = 206 if start else 200
        entry["status"] = status
        self.send_response(status)
        self.send_header("Content-Type", "application/gzip")
        self.send_header("Content-Length", str(len(data) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        self.wfile.write(data[start:])


class _Server(http.server.ThreadingHTTPServer):
    owner: CapsuleServer
    daemon_threads = True


class CapsuleServer:
    """Serve files of ``root`` on 127.0.0.1 from a thread.

    ``fail_first``: answer the first N requests with HTTP 500. ``honour_range``: when false, Range
    headers are ignored (a full 200 answer), as some servers do. ``requests`` logs every request
    with its path, Range header and answered status.
    """

    def __init__(self, root: Path, fail_first: int = 0, honour_range: bool = True) -> None:
        self.root = Path(root)
        self.fail_first = fail_first
        self.honour_range = honour_range
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> CapsuleServer:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = serve_in_background(self._server, "capsule-server")
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# --------------------------------------------------------------------------- Docker for the tests

STAGED_BY_LABEL = "agentbench.test-staged-by"  # the test process that made a container look like a dead run's


@contextlib.contextmanager
def committed_image(base: str, name: str, command: list[str], change: Callable[[Any], None]) -> Iterator[str]:
    """A Docker image: ``base`` as ``change(container)`` leaves a container made from it to run ``command``,
    committed as ``name:t<pid>``; its name, and the image removed afterwards."""
    import docker  # why: only the Docker tests build images

    client = docker.from_env()
    builder = client.containers.create(base, command)
    image = f"{name}:t{os.getpid()}"
    try:
        change(builder)
        builder.commit(repository=name, tag=f"t{os.getpid()}")
    finally:
        builder.remove(force=True)
    try:
        yield image
    finally:
        client.images.remove(image, force=True)


def image_with_inputs(base: str, inputs: Path, name: str) -> contextlib.AbstractContextManager[str]:
    """A Docker image: ``base`` with the folder ``inputs`` at /opt/inputs (a capsule preinstalled in the image,
    for --bench-set=preinstalled_input_dir=/opt/inputs); its name, and the image removed afterwards."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(inputs, arcname="inputs")
    return committed_image(base, name, ["true"], lambda builder: builder.put_archive("/opt", buffer.getvalue()))


def labelled_containers() -> list:
    """Labelled containers made by this process, or left by a process that is gone.

    Containers of other live processes (the other xdist worker's tests) are not ours to judge."""
    import os

    import docker

    def orphan_or_mine(container) -> bool:
        staged_by = container.labels.get(STAGED_BY_LABEL)
        if staged_by is not None and staged_by != str(os.getpid()):
            return False  # a fake orphan another worker's test made on purpose (and removes itself)
        try:
            pid = int(container.labels.get("agentbench.pid", "0"))
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError):
            return True
        except PermissionError:
            return False
        return pid == os.getpid()

    # (the other worker's containers come and go meanwhile)
    found = docker.from_env().containers.list(all=True, filters={"label": "agentbench=1"}, ignore_removed=True)
    return [c for c in found if orphan_or_mine(c)]


def host_network_ready() -> None:
    """A CORE-Bench host run of a real model refuses to configure when bubblewrap isolates its agent but
    slirp4netns, which gives the agent's commands their network, is missing (a usage error naming the fix):
    on such a machine a test that configures one needs slirp4netns, and skips (or fails under CI) without it.
    Imports nothing of pytest while slirp4netns is there (a test's plain-Python script calls it too)."""
    from pytest_agentbench.sandbox.isolation import probe

    if shutil.which("slirp4netns") is None and probe().active:
        from helpers.capabilities import needs

        needs("slirp4netns")


def corebench_options(
    data_dir: Path,
    cache_dir: Path,
    *,
    cli: dict[str, Any] | None = None,
    ini: dict[str, Any] | None = None,
    base: Path | None = None,
):
    """CORE-Bench's options resolved as the plugin resolves them (command line > ini > default), without
    pytest, plus the run-wide values a benchmark reads (``data_dir``, ``cache_dir``, ``env``). On a machine
    whose host environment would need slirp4netns to configure (see ``host_network_ready``) the test ends
    through ``needs``."""
    from pytest_agentbench.benchmarks.corebench import CORE_BENCH_OPTIONS
    from pytest_agentbench.core.options import Settings, Sources, resolve

    if ((cli or {}).get("host_network") or (ini or {}).get("host_network") or "user") == "user":
        host_network_ready()
    base = Path(base or cache_dir)
    own = resolve(
        CORE_BENCH_OPTIONS, Sources(cli=dict(cli or {}), ini=dict(ini or {}), env={}, invocation_dir=base, rootdir=base)
    )
    return Settings({**own, "data_dir": Path(data_dir), "cache_dir": Path(cache_dir), "env": "host"})
