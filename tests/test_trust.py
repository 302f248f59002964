"""Nothing a child can write is trusted later.

Checksum stamps are signed with a per-machine secret kept outside every child's view, so a stamp written
by anyone else is ignored; a file changed after its check (even with its mtime set back) is re-hashed;
rebuilt targets carry a signed manifest and are re-hashed against the digest held in memory before
every use.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.scicode import h5codec, locate
from pytest_agentbench.benchmarks.scicode import targets as targets_mod
from pytest_agentbench.benchmarks.scicode.locate import Targets, TargetTable, build_problem
from pytest_agentbench.core import data
from pytest_agentbench.core.data import DataError, DataFile, fingerprint, verify


def pinned(tmp_path: Path, content: bytes = b"official content") -> tuple[Path, DataFile]:
    path = tmp_path / "data" / "file.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path, DataFile("file.bin", "https://example.invalid/file.bin", hashlib.sha256(content).hexdigest(), "")


def count_hashes(monkeypatch) -> list[Path]:
    calls: list[Path] = []
    real = data.sha256_of

    def counting(path):
        calls.append(Path(path))
        return real(path)

    monkeypatch.setattr(data, "sha256_of", counting)
    return calls


def test_a_genuine_stamp_spares_the_rehash(tmp_path, monkeypatch):
    path, f = pinned(tmp_path)
    stamps = tmp_path / "cache"
    verify(path, f, stamps)
    calls = count_hashes(monkeypatch)
    verify(path, f, stamps)
    assert calls == []
    [stamp] = (stamps / "verified").iterdir()
    assert stamp.read_text() != f.sha256  # a MAC, not the checksum anyone can copy


def test_a_stamp_forged_for_a_fake_file_is_ignored(tmp_path):
    """The attack: replace the file, then write the stamp the old scheme accepted (its name derived from
    path/size/mtime, its content the pinned sha256) — and any other guess at the new scheme."""
    path, f = pinned(tmp_path)
    stamps = tmp_path / "cache"
    path.write_bytes(b"fake targets, same length")
    stat = path.stat()
    old_key = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:24]
    message = "|".join(str(p) for p in fingerprint(path)) + "|" + f.sha256
    new_key = hashlib.sha256(message.encode()).hexdigest()[:24]
    (stamps / "verified").mkdir(parents=True)
    for key, content in (
        (old_key, f.sha256),
        (new_key, f.sha256),
        (new_key + "x", hashlib.sha256(message.encode()).hexdigest()),
    ):
        (stamps / "verified" / f"{f.name}.{key}").write_text(content)
    (stamps / "verified" / f"{f.name}.{new_key}").write_text(hashlib.sha256(message.encode()).hexdigest())
    with pytest.raises(DataError, match="checksum mismatch"):
        verify(path, f, stamps)


def test_a_file_changed_with_its_mtime_set_back_is_rehashed(tmp_path):
    path, f = pinned(tmp_path, b"A" * 64)
    stamps = tmp_path / "cache"
    verify(path, f, stamps)
    stat = path.stat()
    path.write_bytes(b"B" * 64)  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime; the ctime moves anyway
    with pytest.raises(DataError, match="checksum mismatch"):
        verify(path, f, stamps)


def test_the_secret_is_created_private_and_reused(tmp_path, monkeypatch):
    secret = tmp_path / "state" / "secret"
    monkeypatch.setenv(data.SECRET_ENV, str(secret))
    first = data.sign("x")
    assert secret.is_file() and secret.stat().st_mode & 0o077 == 0
    assert data.sign("x") == first and data.signed("x", first) and not data.signed("y", first)


def test_without_a_secret_nothing_is_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv(data.SECRET_ENV, str(tmp_path / "not-a-dir" / "secret"))
    (tmp_path / "not-a-dir").write_text("a file where the folder should be")
    path, f = pinned(tmp_path)
    verify(path, f, tmp_path / "cache")
    calls = count_hashes(monkeypatch)
    verify(path, f, tmp_path / "cache")
    assert calls == [path]


# ---- targets ---------------------------------------------------------------------------------


def test_official_targets_rechecked_before_each_step(tmp_path):
    path, f = pinned(tmp_path, b"x" * 32)
    official = Targets(path, "official", sha256=f.sha256, stamp=fingerprint(path))
    table = TargetTable(official)
    assert table.for_step("1.1") is official
    path.write_bytes(b"y" * 32)
    moved = table.for_step("1.1")
    assert moved.path is None and moved.kind == "official"
    assert "changed after its checksum was checked" in moved.message and f.sha256 in moved.message


PROBLEM = {
    "problem_id": "900",
    "sub_steps": [
        {"step_number": "900.1", "test_cases": ["assert True"]},
        {"step_number": "900.2", "test_cases": ["assert True"]},
    ],
}


@pytest.fixture
def fake_rebuild(monkeypatch):
    """rebuild_targets replaced by a writer of known targets (no child runs); counts its calls."""
    calls = []

    def rebuild(problems, out_path, **kwargs):
        calls.append(out_path)
        for step in problems[0]["sub_steps"]:
            h5codec.write_step_targets(out_path, step["step_number"], [1.5])
        return {s["step_number"]: "ok" for s in problems[0]["sub_steps"]}

    monkeypatch.setattr(targets_mod, "rebuild_targets", rebuild)
    return calls


def build(folder: Path) -> dict[str, Targets]:
    folder.mkdir(parents=True, exist_ok=True)
    return build_problem(PROBLEM, folder, data_dir=None, limits=None, timeout=10, wait=True)


def test_rebuilt_targets_are_reused_only_with_a_signed_manifest(tmp_path, fake_rebuild):
    folder = tmp_path / "rebuilt"
    first = build(folder)
    assert len(fake_rebuild) == 1 and first["900.1"].read_step("900.1") == [1.5]
    again = build(folder)
    assert len(fake_rebuild) == 1 and again["900.1"].sha256 == first["900.1"].sha256  # the cache is used
    h5 = first["900.1"].path
    manifest = h5.with_suffix(".json")
    # a child rewrites the h5 and writes a manifest that matches it, without the machine secret
    h5codec.write_step_targets(h5, "900.1", [99.0])
    forged = json.loads(manifest.read_text())
    forged["sha256"] = hashlib.sha256(h5.read_bytes()).hexdigest()
    manifest.write_text(json.dumps(forged))
    rebuilt = build(folder)
    assert len(fake_rebuild) == 2 and rebuilt["900.1"].read_step("900.1") == [1.5]
    # an old-style manifest (just the report) is not trusted either
    manifest.write_text(json.dumps({"900.1": "ok", "900.2": "ok"}))
    build(folder)
    assert len(fake_rebuild) == 3


def test_rebuilt_targets_changed_during_the_run_are_refused(tmp_path, fake_rebuild):
    steps = build(tmp_path / "rebuilt")
    table = TargetTable(Targets(None, "rebuilt"), steps)
    assert table.for_step("900.1").path is not None
    h5codec.write_step_targets(steps["900.1"].path, "900.1", [99.0])
    refused = table.for_step("900.1")
    assert refused.path is None and "changed after its checksum was checked" in refused.message
    with pytest.raises(h5codec.TargetsError, match="changed after its checksum was checked"):
        steps["900.1"].read_step("900.1")


def test_rebuilt_targets_are_read_from_the_checked_bytes(tmp_path, fake_rebuild, monkeypatch):
    """No window between the check and the read: the decoder gets the bytes that were hashed."""
    steps = build(tmp_path / "rebuilt")
    opened = []
    real = h5codec.read_step_targets

    def spy(source, number):
        opened.append(source)
        return real(source, number)

    monkeypatch.setattr(h5codec, "read_step_targets", spy)
    assert steps["900.2"].read_step("900.2") == [1.5]
    assert not isinstance(opened[0], (str, Path))  # an in-memory h5py file, not the path


# ---- part 4: CORE-Bench's agent never sees the answers --------------------------------------


def corebench_settings(tmp_path, monkeypatch, **values):
    from pytest_agentbench.core.options import Settings

    from helpers.bench_runs import SHARED_DATA  # honours $AGENTBENCH_DATA_DIR
    from helpers.capsule_factory import corebench_options

    opts = corebench_options(SHARED_DATA, tmp_path)
    return Settings({**opts, **values})


def test_a_real_model_runs_the_agent_in_docker_by_default(tmp_path, monkeypatch):
    from pytest_agentbench.benchmarks.corebench.bench import CoreBench
    from pytest_agentbench.envs import build_env
    from pytest_agentbench.envs.docker import DockerFactory

    bench = CoreBench()
    opts = corebench_settings(tmp_path, monkeypatch, model="gpt-4o", env=None)
    settings = bench.configure(opts, "train")
    assert bench.default_env(opts) == "docker" and settings["env"] == "docker"
    assert settings["isolation"].startswith("docker container")
    oracle = corebench_settings(tmp_path, monkeypatch, model="oracle", env=None)
    assert bench.default_env(oracle) == "host" and bench.configure(oracle, "train")["env"] == "host"
    explicit = corebench_settings(tmp_path, monkeypatch, model="gpt-4o", env="host")
    assert bench.configure(explicit, "train")["env"] == "host"
    env_opts = {
        "env": None,
        "docker_image": "img",
        "docker_network": "none",
        "gpus": None,
        "env_memory": 1 << 30,
        "keep_workspaces": False,
    }
    assert isinstance(build_env(env_opts, default=bench.default_env(opts)), DockerFactory)  # connects lazily


def test_a_run_that_cannot_isolate_says_so(tmp_path, monkeypatch):
    from pytest_agentbench.benchmarks.corebench.bench import CoreBench, summarize
    from pytest_agentbench.sandbox import isolation

    monkeypatch.setenv("AGENTBENCH_ISOLATION", "off")
    isolation.probe(refresh=True)
    try:
        bench = CoreBench()
        settings = bench.configure(corebench_settings(tmp_path, monkeypatch, model="gpt-4o", env="host"), "train")
        assert settings["isolation"].startswith("none (")  # header (settings line) and summary.json settings
        head = summarize([], {**settings, "split": "train"})["terminal"][0]
        assert f"isolation: {settings['isolation']}" in head  # summary.md and the terminal summary
        dind = bench.configure(
            corebench_settings(
                tmp_path, monkeypatch, model="gpt-4o", env="docker", docker_dind=True, difficulty="medium"
            ),
            "train",
        )
        assert dind["isolation"] == "none (privileged)"
    finally:
        monkeypatch.delenv("AGENTBENCH_ISOLATION")
        isolation.probe(refresh=True)


SCAN_OWN_MEMORY = r"""
import ctypes, json
# each slice is looked for as two halves, so the whole slice never exists in this process's own objects
halves = [(bytes.fromhex(h[:24]), bytes.fromhex(h[24:])) for h in WANTED]
found = 0
for line in open("/proc/self/maps"):
    fields = line.split()
    if "r" not in fields[1] or (len(fields) > 5 and fields[5].startswith("[v")):
        continue
    start, end = (int(x, 16) for x in fields[0].split("-"))
    if end - start > 512 << 20:
        continue
    try:
        region = ctypes.string_at(start, end - start)
    except Exception:
        continue
    for head, tail in halves:
        at = region.find(head)
        while at >= 0:
            found += region[at + len(head):at + len(head) + len(tail)] == tail
            at = region.find(head, at + 1)
print(json.dumps(found))
"""


def test_a_scoring_child_cannot_find_rebuilt_targets_in_its_inherited_memory(tmp_path):
    """Targets are rebuilt by running ground truth and taking back the file it recorded. Were that done by the
    fork server that later forks the model's scoring children, the recorded bytes would stay in its heap and
    every later child could read them from its own memory. A child forked after a rebuild finds none, though
    the process's shared fork server may have scored the oracle (whose outputs are the targets' values) for
    another test before: the server never holds what its children wrote."""
    import h5py
    import numpy as np

    from pytest_agentbench.sandbox.executors import Limits, run_python

    assert run_python("print('up')", limits=Limits(timeout=60), executor="fork").stdout.strip() == "up"
    data_dir = Path(os.environ["AGENTBENCH_DATA_DIR"]) / "scicode"
    problems = [json.loads(line) for line in (data_dir / "problems_dev.jsonl").read_text().splitlines()]
    problem = next(p for p in problems if str(p["problem_id"]) == "1")
    table = locate.rebuilt_table([problem], tmp_path / "cache", data_dir=data_dir, limits=None, timeout=120)
    path = table.steps["1.1"].path
    values: list[bytes] = []
    with h5py.File(path, "r") as h5:
        h5.visititems(lambda _n, o: values.append(np.asarray(o[()]).tobytes()) if isinstance(o, h5py.Dataset) else None)
    wanted = [v[:24].hex() for v in values if len(v) >= 24 and len(set(v[:24])) > 8]  # distinctive slices
    assert wanted, [len(v) for v in values]
    found = run_python(f"WANTED = {wanted!r}\n" + SCAN_OWN_MEMORY, limits=Limits(timeout=120), executor="fork")
    assert found.exit_code == 0, found
    assert json.loads(found.stdout) == 0


# A model's answer that looks for what an earlier run held: the ground truth's return value (its period, found as
# two halves, so the whole never exists in this process's own objects) and the ground truth's code. Found, it
# returns the value the period makes; not found, an answer that fails. It prints what it found.
LOOTING_ANSWER = r"""
def secret():
    ctypes = __import__("ctypes")  # (an import statement would be taken out of the answer, as upstream does)
    value, value_tail = bytes.fromhex("{value}"), bytes.fromhex("{value_tail}")
    code, code_tail = bytes.fromhex("{code}"), bytes.fromhex("{code_tail}")
    loot, code_hits = b"", 0
    for line in open("/proc/self/maps"):
        fields = line.split()
        if "r" not in fields[1] or (len(fields) > 5 and fields[5].startswith("[v")):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        for offset in range(start, end, 1 << 20):  # a window at a time: the address space is limited
            try:
                region = ctypes.string_at(offset, min(end, offset + (1 << 20) + {size}) - offset)
            except Exception:
                continue
            for head, tail, hits in ((value, value_tail, "value"), (code, code_tail, "code")):
                at = region.find(head)
                while 0 <= at < 1 << 20:
                    if region[at + len(head):at + len(head) + len(tail)] == tail:
                        if hits == "code":
                            code_hits += 1
                        elif len(region) >= at + {size}:
                            loot = loot or region[at:at + {size}]
                    at = region.find(head, at + 1)
    print(f"found: value {{bool(loot)}}, code {{code_hits}}")
    if loot:
        return np.tile(np.frombuffer(loot, dtype=np.float64), {repeat})
    return np.zeros({count})
"""


@pytest.mark.e2e
def test_a_run_files_second_model_finds_none_of_the_oracles_values_or_code(
    pytester, shared_data, shared_cache, monkeypatch
):
    """A run file scores the oracle, then a model whose scoring child scans its own memory for the oracle's return
    value and code, and returns the value it finds. Every scoring child is forked from the same fork server, but
    the server never holds what a child ran or wrote: the second model finds nothing and fails its step."""
    import numpy as np

    from helpers.bench_runs import read_jsonl
    from helpers.fake_openai import FakeOpenAI
    from helpers.scicode_builders import CLOSE, problem, step, write_dataset

    period, repeat = 4, 16
    truth = np.tile(np.random.default_rng(20261203).random(period), repeat)
    ground_truth = f"def secret():\n    return np.tile(np.random.default_rng(20261203).random({period}), {repeat})"
    raw, code_text = truth[:period].tobytes(), b"default_rng(20261203).random"
    answer = LOOTING_ANSWER.format(
        value=raw[:8].hex(),
        value_tail=raw[8:16].hex(),
        code=code_text[:14].hex(),
        code_tail=code_text[14:].hex(),
        size=len(raw),
        repeat=repeat,
        count=len(truth),
    )
    problems = [problem("1", [step("1.1", ground_truth, [CLOSE.format(call="secret()")], header="def secret():")])]
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTBENCH_CONFIG", "AGENTBENCH_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    monkeypatch.setenv("LOOTER_KEY", "sk-looter")
    data, h5 = write_dataset(pytester.path, shared_data, targets={"1.1": [truth]}, problems=problems)
    with FakeOpenAI() as looter:
        looter.reply(f"```python\n{answer}\n```")
        (pytester.path / "agentbench.yaml").write_text(
            f"bench: {{bench: scicode, split: validation, data_dir: {data.name}, h5: {h5.name},\n"
            "        allow_custom_data: true, mode: naive, timeout: 120}\n"
            "models:\n"
            "  - name: oracle\n"
            f"  - {{name: looter, base_url: '{looter.base_url}', api_key_env: LOOTER_KEY}}\n"
        )
        result = pytester.runpytest(
            "-p", "no:cacheprovider", f"--bench-cache-dir={shared_cache}", "--bench-config=agentbench.yaml",
            "--bench-run-id=loot",
        )  # fmt: skip
    out = result.stdout.str()
    folder = pytester.path / "reports" / "scicode"
    records = {model: read_jsonl(folder / model / "loot" / "steps.jsonl") for model in ("oracle", "looter")}
    assert [r["status"] for r in records["oracle"]] == ["pass"], out
    [looted] = records["looter"]
    assert looted["stdout"] == "found: value False, code 0\n", looted  # the scan ran and found nothing
    assert looted["status"] == "fail", looted
