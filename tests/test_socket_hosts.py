"""A lost socket-gateway host: ``--tx socket=HOST:PORT`` workers (execnet's own socket server,
``python -m execnet.script.socketserver``) on 127.0.0.1, one of which goes silent mid-item without closing its
connection (its server process, in which the worker runs, is stopped with SIGSTOP: no FIN, no RST, as when a
host drops off the network). The run must end like one that lost an ssh host: lost records for the silent
host's items in flight, every other item run on the other host, the incomplete-run message with the resume
command, exit 1 naming the host; the other host's server stays up for the next run.

The socket servers run as this user with this checkout (PYTHONPATH) and the staged data, so the host probe
finds the same build and data; no ssh set-up is needed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading

import execnet
import pytest

from helpers.bench_runs import SHARED_DATA, SocketHost, read_jsonl, wait_for, worker_host_env
from helpers.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.e2e, pytest.mark.remote, pytest.mark.slow]

IDS = "1,3,19"  # three validation problems, four steps (19 has two): each worker is in an item when one stops
STEPS = ["1.1", "19.1", "19.2", "3.1"]
HOST_TIMEOUT = (
    8  # --bench-set host_timeout: the silent host is declared lost within 10 s (a healthy one answers in time)
)


@pytest.fixture
def socket_hosts(tmp_path, shared_cache):
    hosts: list[SocketHost] = []
    try:
        for name in ("host-a", "host-b"):
            hosts.append(SocketHost(tmp_path / name, worker_host_env(tmp_path / name, shared_cache)))
        yield hosts
    finally:
        for host in hosts:
            host.stop()


WATCH_THREAD = "agentbench-controller-watch"  # a remote worker's thread (distribution/remote.py)
# run in the socket server's process, where its earlier worker ran: that worker's threads, once its watch is gone
WATCH_ENDED = f"""
import threading, time
deadline = time.monotonic() + 60  # the watch sees its channel closed within a ping interval; this ends a hang
while any(t.name == {WATCH_THREAD!r} for t in threading.enumerate()) and time.monotonic() < deadline:
    time.sleep(0.1)
channel.send(sorted(t.name for t in threading.enumerate()))
"""


def ground_truth_replies() -> dict[str, str]:
    """Each selected step's ground-truth code by the text of its step description (what its prompt asks)."""
    problems = read_jsonl(SHARED_DATA / "scicode" / "problems_dev.jsonl")
    wanted = set(IDS.split(","))
    return {
        s["step_description_prompt"]: s["ground_truth_code"]
        for p in problems
        if str(p["problem_id"]) in wanted
        for s in p["sub_steps"]
    }


def answer_of(body: dict, truths: dict[str, str]) -> str:
    """The ground truth of the step a request asks for: the step whose description comes last in its prompt
    (the prompt repeats the earlier steps before the one asked)."""
    prompt = json.dumps(body)
    asked = max(truths, key=lambda description: prompt.rfind(json.dumps(description)[1:-1]))
    return f"```python\n{truths[asked]}\n```"


def test_a_silent_socket_host_is_lost_and_the_run_finishes_on_the_other(pytester, socket_hosts, shared_cache):
    """Both socket workers are inside an item (their model request is held) when host-b's server is stopped;
    the heartbeat declares it lost within the host timeout, its in-flight task gets lost records naming the
    host, the rest runs (and passes) on host-a, and the session ends with the incomplete-run message, the
    resume command and exit 1 naming the lost host."""
    host_a, host_b = socket_hosts
    truths = ground_truth_replies()
    gate = threading.Event()

    def held(body):  # every model request waits until the test lets it through, then answers right
        gate.wait(120)
        return {"text": answer_of(body, truths)}

    reports = pytester.path / "reports"
    with FakeOpenAI() as server:
        for _ in range(len(STEPS) * 3):
            server.reply_with(held)
        args = [
            "-p",
            "no:cacheprovider",
            "--bench=scicode",
            "--bench-split=validation",
            "--model=fake-model",
            f"--model-base-url={server.base_url}",
            "--model-api-key=sk-socket-test",
            "--bench-set=model_max_retries=0",
            f"--bench-ids={IDS}",
            f"--bench-set=host_timeout={HOST_TIMEOUT}",
            f"--bench-report-dir={reports}",
            f"--bench-cache-dir={shared_cache}",
            "--bench-run-id=silent",
            "-d",
            "--tx",
            f"socket={host_a.address}",
            "--tx",
            f"socket={host_b.address}",
        ]
        proc = pytester.popen(
            [sys.executable, "-m", "pytest", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_for(
                lambda: len(server.requests) >= 2 or proc.poll() is not None, 240, "a model request from each worker"
            )
            assert proc.poll() is None, proc.communicate()[0][-4000:]
            os.kill(host_b.proc.pid, signal.SIGSTOP)  # gw1's host goes silent; its connection stays open
            gate.set()
            try:
                out, _ = proc.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                proc.kill()
                pytest.fail(
                    "the run hung after its socket host went silent:\n" + proc.communicate(timeout=30)[0][-4000:]
                )
        finally:
            gate.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    tail = out[-4000:] + "".join(host_a.output)[-1500:]
    assert proc.returncode == 1, tail
    assert "INTERNALERROR" not in out and "replacing crashed worker" not in out, tail
    label = f"socket {host_b.address}"
    declared = re.search(rf"agentbench: lost host {re.escape(label)} \(.*\), worker gw1: no answer for (\d+) s", out)
    assert declared, tail
    # declared by the heartbeat once the host timeout had passed (ten times it only ends a hung wait)
    assert HOST_TIMEOUT <= int(declared.group(1)) < HOST_TIMEOUT * 10, tail

    run_dir = reports / "scicode" / "fake-model" / "silent"
    records = (
        read_jsonl(run_dir / "records.jsonl")
        if (run_dir / "records.jsonl").is_file()
        else read_jsonl(run_dir / "steps.jsonl")
    )
    assert sorted(r["id"] for r in records) == STEPS, tail  # every selected item once
    lost = [r for r in records if r.get("lost")]
    assert lost and len({r["id"].split(".")[0] for r in lost}) == 1, (lost, tail)  # the in-flight task only
    for record in lost:
        assert record["status"] == "error" and record["worker"] == "gw1", record
        assert f"worker 'gw1' on host {label}" in record["message"], record["message"]
    others = [r for r in records if not r.get("lost")]
    assert others and all(r["worker"] == "gw0" and r["status"] == "pass" for r in others), (others, tail)

    # the session ends as an incomplete run does: what is missing, and the command that runs it
    assert f"incomplete run: {len(lost)} item(s) not run; resume with:" in out, tail
    assert f"--bench-resume={run_dir}" in out, tail

    # the healthy host's server outlives its worker and serves the next run: the worker's watch on its
    # controller ended with the gateway (it is no longer among the server's threads), so it can never stop
    # the server once the host timeout has run out
    assert host_a.proc.poll() is None, "".join(host_a.output)[-3000:]
    gateway = execnet.makegateway(f"socket={host_a.address}")
    try:
        threads = gateway.remote_exec(WATCH_ENDED).receive(timeout=120)
        assert WATCH_THREAD not in threads, threads
        assert gateway.remote_exec("channel.send(6 * 7)").receive(timeout=30) == 42
    finally:
        gateway.exit()
    assert host_a.proc.poll() is None, "".join(host_a.output)[-3000:]
