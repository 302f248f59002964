"""What a CORE-Bench agent can reach: its prepared workspace and the system, never another copy of its capsule
(preinstalled in the image, staged, a tarball in the store), and not the capsule's publication hosts by name.

The end-to-end tests give a hard capsule whose results/ holds the reference answers (as a ready report) to a
scripted agent that searches every path under / it can and copies what it finds to report.json: it must not
pass. The same command resolves the publication hosts (name resolution only: nothing is connected to)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks import corebench
from pytest_agentbench.benchmarks.corebench import dataset, reach
from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.envs.base import blocked_hosts_lines, check_host_names

from helpers.bench_runs import SHARED_DATA  # honours $AGENTBENCH_DATA_DIR
from helpers.capsule_factory import build_capsule_archive, corebench_options, write_capsule_tree

DATA = SHARED_DATA
CID = "capsule-7038571"
ANSWER_FILE = "results/answers.json"  # the reference answers, shipped with the capsule as a ready report

# Searches the whole file system (the kernel's folders aside; grep skips the system's program folders, which
# hold no capsule), unpacks every capsule tarball it finds, and copies any answers file it reaches to report.json.
CHEAT = r"""
value=VALUE
for n in codeocean.com www.codeocean.com api.codeocean.com doi.org dx.doi.org; do
  echo "resolved $n: $(getent ahosts $n | awk '{print $1}' | sort -u | tr '\n' ' ')"
done
skip='( -path /proc -o -path /sys -o -path /dev ) -prune -o'
mkdir -p /tmp/unpacked
for t in $(find / $skip -name 'capsule-*.tar.gz' -print 2>/dev/null); do
  echo "tarball: $t"; tar -xzf "$t" -C /tmp/unpacked 2>/dev/null
done
chmod -R u+rwX /tmp/unpacked
find / $skip -type f -path '*/results/*' -print 2>/dev/null | sed 's/^/results file: /'
for f in $(grep -rlF "$value" / --exclude-dir={proc,sys,dev,usr,lib,lib64,bin,sbin,site-packages} 2>/dev/null); do
  echo "value in: $f"; case "$f" in */answers.json) cp "$f" report.json;; esac
done
ls -A /opt/inputs 2>&1 | sed 's/^/opt inputs: /'
true
"""


def _answers() -> dict:
    return next(t for t in dataset.load_split(DATA, "train") if t["capsule_id"] == CID)["results"][0]


def _cheat() -> str:
    value = repr(next(iter(_answers().values())))[:12]  # the reference value's leading digits
    return CHEAT.replace("VALUE", f'"{value[:6]}""{value[6:]}"')  # (spelt apart: this script does not hold it)


def _capsule_with_answers(parent: Path) -> Path:
    root = write_capsule_tree(parent, CID)
    (root / ANSWER_FILE).write_text(json.dumps(_answers()))
    return root


def _manifest(folder: Path) -> None:
    fields = {
        "schema_version": 1,
        "task_id": CID,
        "split": "train",
        "difficulty": "hard",
        "dataset_revision": dataset.UPSTREAM_REV,
        "uses_gpu": False,
    }
    (folder / "input.json").write_text(json.dumps(fields))


def _run_cheat(pytester, tmp_path, server, run_id: str, *args: str) -> tuple[dict, str]:
    """One scripted step (the search), then the step limit ends the agent: the record and what it saw."""
    server.reply(tool_calls=[("bash", {"command": _cheat(), "timeout": 600})])
    pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--bench-split=train",
        f"--bench-ids={CID}",
        "--model=agent-model",
        f"--model-base-url={server.base_url}",
        "--model-api-key=x",
        "--bench-cache=off",
        "--bench-difficulty=hard",
        "--bench-set=agent_steps=1",
        f"--bench-report-dir={tmp_path / 'r'}",
        f"--bench-run-id={run_id}",
        "-p",
        "no:cacheprovider",
        *args,
    )
    run_dir = tmp_path / "r" / "core-bench" / "agent-model" / run_id
    record = json.loads((run_dir / "records.jsonl").read_text())
    messages = json.loads((run_dir / record["trajectory"]).read_text())["messages"]
    return record, "\n".join(m["content"] for m in messages if m["role"] == "tool")


def _check_nothing_reached(record: dict, seen: str) -> None:
    assert record["status"] == "fail", (record["status"], record["message"], seen[-3000:])
    assert record["report_status"] == "missing" and record["correct_written"] == 0, seen[-3000:]
    for found in ("value in: ", "results file: ", "tarball: "):
        assert found not in seen, seen[-3000:]
    for name in ("codeocean.com", "www.codeocean.com", "api.codeocean.com", "doi.org", "dx.doi.org"):
        assert f"resolved {name}: 0.0.0.0 :: \n" in seen, seen[:2000]


# --------------------------------------------------------------------------- Docker: inputs preinstalled in the image


@pytest.mark.docker
@pytest.mark.e2e
@pytest.mark.slow
def test_hard_capsule_preinstalled_in_the_image_keeps_its_answers_from_the_agent(pytester, tmp_path, monkeypatch):
    from helpers.capabilities import needs
    from helpers.capsule_factory import image_with_inputs, labelled_containers
    from helpers.fake_openai import FakeOpenAI

    base = needs("docker")
    inputs = tmp_path / "inputs"
    _capsule_with_answers(inputs)
    _manifest(inputs)
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(DATA))
    empty = tmp_path / "no-capsules"
    empty.mkdir()
    with image_with_inputs(base, inputs, "agentbench-reach") as image:
        with FakeOpenAI() as server:
            record, seen = _run_cheat(
                pytester,
                tmp_path,
                server,
                "docker-pre",
                f"--bench-capsules-dir={empty}",
                "--bench-env=docker",
                f"--bench-set=docker_image={image}",
                "--bench-set=docker_network=bridge",  # the network on: the publication hosts must still not resolve
                "--bench-set=preinstalled_input_dir=/opt/inputs",
            )
    _check_nothing_reached(record, seen)
    assert "opt inputs: ls: cannot access '/opt/inputs'" in seen  # deleted before the agent's first command
    assert record["capsule_source"] == "preinstalled" and not labelled_containers()


# --------------------------------------------------------------------------- the host: staged, tarball, preinstalled


@pytest.mark.isolation
@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("copy", ["staged", "tarball", "preinstalled"])
def test_no_copy_of_a_hard_capsule_on_this_machine_reaches_the_host_agent(pytester, tmp_path, monkeypatch, copy):
    """The copies lie in a folder every sandbox sees (on $PYTHONPATH, so bound into the sandbox as Python's;
    outside /tmp, which is the sandbox's own): without the masks the agent reads the answers there."""
    from helpers.capabilities import needs

    needs("bwrap")
    needs("slirp4netns")  # the default host network: outbound on
    visible = Path(
        tempfile.mkdtemp(prefix="agentbench-reach-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else None)
    )
    visible.chmod(0o755)  # (a sandbox user may enter it, as any folder of Python's)
    try:
        _host_cheat(pytester, tmp_path, monkeypatch, copy, visible)
    finally:
        shutil.rmtree(visible, ignore_errors=True)


def _host_cheat(pytester, tmp_path, monkeypatch, copy: str, visible: Path) -> None:
    from helpers.fake_openai import FakeOpenAI

    store = visible / "store"
    store.mkdir(parents=True)
    args = [f"--bench-capsules-dir={store}", "--bench-env=host"]
    if copy == "staged":
        _capsule_with_answers(store)
    elif copy == "tarball":
        build_capsule_archive(store, CID, extra={ANSWER_FILE: json.dumps(_answers())})
    else:
        inputs = visible / "inputs"
        _capsule_with_answers(inputs)
        _manifest(inputs)
        args.append(f"--bench-set=preinstalled_input_dir={inputs}")
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(DATA))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(visible), os.environ.get("PYTHONPATH")) if p))
    with FakeOpenAI() as server:
        record, seen = _run_cheat(pytester, tmp_path, server, f"host-{copy}", *args)
    _check_nothing_reached(record, seen)
    assert record["isolation"].startswith("bwrap (")
    assert (
        record["capsule_source"] == {"staged": "staged", "tarball": "extracted", "preinstalled": "preinstalled"}[copy]
    )


# --------------------------------------------------------------------------- the parts


def test_blocked_hosts_name_code_ocean_the_doi_resolvers_and_the_capsules_doi_host():
    names = reach.blocked_hosts({"capsule_doi": "https://doi.example.org/10.24433/CO.9707317.v1"})
    assert {"codeocean.com", "www.codeocean.com", "doi.org", "dx.doi.org", "doi.example.org"} <= set(names)
    assert reach.blocked_hosts({"capsule_doi": "https://evil host/x"}) == reach.blocked_hosts({})  # not a name
    assert blocked_hosts_lines(["doi.org"]) == "0.0.0.0\tdoi.org\n::\tdoi.org\n"
    with pytest.raises(ValueError, match="not a DNS name"):
        check_host_names(["codeocean.com\n1.2.3.4 pypi.org"])


@pytest.mark.parametrize("root, inputs", [("/opt/inputs/ws", "/opt/inputs"), ("/capsule", "/capsule/in")])
def test_a_workspace_root_overlapping_the_preinstalled_folder_is_a_usage_error(tmp_path, root, inputs):
    opts = corebench_options(DATA, tmp_path, cli={"workspace_root": root, "preinstalled_input_dir": inputs})
    with pytest.raises(ConfigError, match="overlap"):
        corebench.benchmark.configure(opts, "train")
    assert reach.overlap("/capsule/environment", "/opt/inputs") is None
