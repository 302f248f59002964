"""Held-out red team (helper H3): hostile model replies scored as a user runs pytest.

Written without reading tests/test_redteam.py, test_isolation.py or test_trust.py. A scripted
OpenAI-compatible model (tests/helpers/fake_openai.py) answers each attacked validation step with the code
of one attack (tests/helpers/heldout_attacks.py) and every other step with its ground truth. One
``pytest --bench=scicode`` process holds every attack of an executor (fork, subprocess); the attacks on
the trusted process's time and memory (D1-D3), the unparseable reply (R1) and the tool-use attack (T1)
get a process each. All start together and each is stopped at its own time limit.

Every attack must end as a non-pass with its reason, leave no file, process or secret behind, and not
stop honest code scored after it from passing. The file needs OS isolation: it skips without it, and
fails instead under CI=true.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import heldout_attacks as H
from helpers.bench_runs import SHARED_DATA, read_jsonl, run_dirs
from helpers.capabilities import needs
from helpers.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.e2e, pytest.mark.isolation, pytest.mark.slow]

EXECUTORS = ("fork", "subprocess")
RUN_TIMEOUT = 900  # seconds for a grouped run (targets rebuilt when the session's cache is cold)
DOS_TIMEOUT = 300  # seconds for a one-step run (--bench-timeout=20): a backstop against a hung scoring process
OUTPUT_FILE = "pytest-output.txt"  # in the run's project folder
DOS_MEMORY = 1 << 30  # most bytes of resident memory the scoring process may reach on a 64 KB operand

# Attacks that still get a `pass`, as they do upstream (strict: a change turns them into failures). None today.
OPEN_FINDINGS: dict[str, str] = {}

# The wrapper reports the peak resident memory of the pytest process it waits for.
RUSAGE_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "print('HELDOUT-MAXRSS-KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True)\n"
    "sys.exit(code)\n"
)


@pytest.fixture(scope="module")
def isolation():
    return needs("bwrap")  # skipped without isolation, failed in CI (CI=true)


@dataclass
class Outcome:
    context: H.Context
    secret: str
    returncode: int | None
    output: str
    seconds: float
    records: dict[str, dict] = field(default_factory=dict)
    isolation: str = ""  # as the run's summary.json says
    maxrss_kb: int | None = None
    timed_out: bool = False
    leftovers: list[str] = field(default_factory=list)  # files, processes, secrets found after the run

    def to_json(self) -> dict:
        context = {
            "mark": self.context.mark,
            "cache": str(self.context.cache),
            "reports": str(self.context.reports),
            "project": str(self.context.project),
            "attacks": {step: attack.key for step, attack in self.context.attacks.items()},
        }
        fields = {k: v for k, v in vars(self).items() if k != "context"}
        return {**fields, "context": context}

    @classmethod
    def from_json(cls, data: dict) -> Outcome:
        known = {a.key: a for a in (*H.ATTACKS, *H.SOLO_ATTACKS, H.TOOL_ATTACK)}
        raw = data["context"]
        context = H.Context(
            mark=raw["mark"],
            cache=Path(raw["cache"]),
            reports=Path(raw["reports"]),
            project=Path(raw["project"]),
            attacks={step: known[key] for step, key in raw["attacks"].items()},
        )
        return cls(**{**data, "context": context})

    def record(self, step: str) -> dict:
        assert step in self.records, f"no record for step {step}; the run said:\n{self.output[-3000:]}"
        return self.records[step]


def new_context(root: Path, shared_cache: Path, attacks: dict[str, H.Attack]) -> H.Context:
    shutil.rmtree(root, ignore_errors=True)  # (left by an interrupted session)
    root.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    cache = root / "cache"
    cache.mkdir()
    (shared_cache / "scicode").mkdir(exist_ok=True)
    (cache / "scicode").symlink_to(shared_cache / "scicode")  # rebuilt targets shared by the session
    context = H.Context(mark=f"h3{secrets.token_hex(6)}", cache=cache, reports=root / "reports", project=root)
    context.attacks = dict(attacks)
    return context


def start_run(
    context: H.Context,
    server: FakeOpenAI,
    secret: str,
    executor: str,
    steps: list[str],
    bench_timeout: int,
    mode: str = "naive",
) -> subprocess.Popen:
    """``pytest --bench=scicode`` as a user runs it, under a wrapper that reports its peak memory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(AGENTBENCH_DATA_DIR=str(SHARED_DATA), AGENTBENCH_OFFLINE="1", OPENAI_API_KEY=secret)
    argv = [
        sys.executable,
        "-c",
        RUSAGE_WRAPPER,
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--bench=scicode",
        "--bench-split=validation",
        "--model=heldout-attacker",
        f"--bench-mode={mode}",
        f"--model-base-url={server.base_url}",
        f"--model-api-key={secret}",
        f"--bench-set=executor={executor}",
        f"--bench-timeout={bench_timeout}",
        f"--bench-cache-dir={context.cache}",
        f"--bench-ids={','.join(steps)}",
    ]
    with open(context.project / OUTPUT_FILE, "wb") as output:  # a file: runs side by side never block on a pipe
        return subprocess.Popen(
            argv,
            cwd=context.project,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def finish_run(proc: subprocess.Popen, context: H.Context, secret: str, started: float, timeout: float) -> Outcome:
    timed_out = False
    try:
        proc.wait(timeout=max(1.0, started + timeout - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)  # the wrapper's session: the wrapper and pytest under it
        proc.wait()
    output = (context.project / OUTPUT_FILE).read_text(errors="replace")
    outcome = Outcome(context, secret, proc.returncode, output, time.monotonic() - started, timed_out=timed_out)
    for line in outcome.output.splitlines():
        if line.startswith("HELDOUT-MAXRSS-KB "):
            outcome.maxrss_kb = int(line.split()[1])
    for run in run_dirs(context.project):
        if (run / "steps.jsonl").is_file():
            outcome.records.update({r["id"]: r for r in read_jsonl(run / "steps.jsonl")})
        if (run / "summary.json").is_file():
            outcome.isolation = json.loads((run / "summary.json").read_text()).get("settings", {}).get("isolation", "")
    outcome.leftovers = leftovers(context)
    return outcome


def leftovers(context: H.Context) -> list[str]:
    """Everything the run's children left on this machine: files, processes, a poisoned cache or report."""
    found = [f"file {p}" for p in context.persistence_targets() if p.exists()]
    found += [f"file {p}" for p in (Path(f"/tmp/{context.mark}-unpickled"),) if p.exists()]
    time.sleep(0.2)  # a daemon that survived would still be running: the attack's lives 20 s
    found += [f"process {p}" for p in H.daemons_alive(context.mark)]
    poison = "POISON-" + context.mark
    for root in (context.cache, context.reports):
        found += [f"poisoned {p}" for p in H.files_containing(root, poison)]
    return found


def clean(context: H.Context) -> None:
    """Remove what an attack that got through left behind (only files holding its own marker)."""
    poison = ("POISON-" + context.mark).encode()
    for path in context.persistence_targets():
        try:
            if path.is_file() and poison in path.read_bytes():
                path.unlink()
        except OSError:
            pass
    Path(f"/tmp/{context.mark}-unpickled").unlink(missing_ok=True)


def scripted_server(context: H.Context, mode: str = "naive") -> FakeOpenAI:
    server = FakeOpenAI().start()
    make = H.reply_for(context) if mode == "naive" else H.tool_reply_for(context, *context.attacks.values())
    for _ in range(400):
        server.reply_with(make)
    return server


@dataclass(frozen=True)
class Plan:
    """One pytest process: the attacks it answers with, the steps it selects, its limits."""

    key: str
    executor: str
    attacks: dict
    steps: tuple
    bench_timeout: int
    timeout: float
    mode: str = "naive"


def plans() -> list[Plan]:
    out = []
    for executor in EXECUTORS:
        attacks = H.by_executor(executor)
        out.append(Plan(executor, executor, attacks, tuple(sorted({*attacks, *H.CANARIES})), 60, RUN_TIMEOUT))
    for attack in H.SOLO_ATTACKS:
        out.append(Plan(attack.key, "fork", {attack.step: attack}, (attack.step,), 20, DOS_TIMEOUT))
    tool = H.TOOL_ATTACK
    out.append(Plan(tool.key, "fork", {tool.step: tool}, (tool.step,), 60, RUN_TIMEOUT, mode="tool_use"))
    return out


def run_all(base: Path, shared_cache: Path) -> dict[str, Outcome]:
    """key (an executor, D1-D3, R1, T1) -> the Outcome of its pytest process. All start together (the
    file then takes about as long as its longest run) and each is stopped at its own time limit."""
    started, servers, procs, contexts = time.monotonic(), [], {}, {}
    outcomes: dict[str, Outcome] = {}
    try:
        for plan in plans():
            context = new_context(base / f"heldout-{plan.key}", shared_cache, plan.attacks)
            secret = H.SECRET_PREFIX + secrets.token_hex(12)
            server = scripted_server(context, plan.mode)
            servers.append(server)
            contexts[plan.key] = (context, secret, plan)
            procs[plan.key] = start_run(
                context, server, secret, plan.executor, list(plan.steps), plan.bench_timeout, plan.mode
            )
        for key, proc in procs.items():
            context, secret, plan = contexts[key]
            outcomes[key] = finish_run(proc, context, secret, started, plan.timeout)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for server in servers:
            server.stop()
        for context, _, _ in contexts.values():
            clean(context)
    return outcomes


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shared_cache, isolation) -> dict[str, Outcome]:
    """The outcomes of ``run_all``, once per test session: under xdist the first worker that needs them runs
    them (the others wait on a lock) and every worker reads them from the session's shared folder."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    results = root / "heldout-runs.json"
    with open(root / "heldout-runs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not results.is_file():
            outcomes = run_all(root / "heldout", shared_cache)
            results.write_text(json.dumps({key: outcome.to_json() for key, outcome in outcomes.items()}))
    return {key: Outcome.from_json(value) for key, value in json.loads(results.read_text()).items()}


def describe(record: dict) -> str:
    keys = ("status", "failure_kind", "message", "stream_error", "limit", "returncode", "stdout", "stderr")
    return "; ".join(f"{k}={str(record.get(k))[:300]!r}" for k in keys if k in record)


def attack_params():
    for executor in EXECUTORS:
        for attack in H.ATTACKS:
            if executor in attack.executors:
                marks = ()
                if attack.key in OPEN_FINDINGS:
                    marks = (pytest.mark.xfail(strict=True, reason=OPEN_FINDINGS[attack.key]),)
                yield pytest.param(executor, attack, id=f"{executor}-{attack.key}-{attack.step}", marks=marks)


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("executor,attack", list(attack_params()))
def test_attack_does_not_pass(runs, executor, attack):
    """The attacked step ends with the attack's status (never `pass`) and, where it is exact, its kind."""
    record = runs[executor].record(attack.step)
    assert record["status"] == attack.status, f"{attack.key} ({attack.title}): {describe(record)}"
    if attack.failure_kind:
        assert record.get("failure_kind") == attack.failure_kind, f"{attack.key}: {describe(record)}"
    if attack.message:
        assert attack.message in record.get("message", ""), f"{attack.key}: {describe(record)}"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_the_run_survives_and_honest_code_still_passes(runs, executor):
    """After every attack of the run (signals, fd garbage, daemons, patching), the ground truth scored
    later in the same process still passes and pytest ends normally (exit 1: some items failed)."""
    outcome = runs[executor]
    assert not outcome.timed_out, outcome.output[-3000:]
    assert outcome.returncode == 1, outcome.output[-3000:]
    assert outcome.isolation.startswith("bwrap"), outcome.isolation
    for step in H.CANARIES:
        record = outcome.record(step)
        assert record["status"] == "pass", f"canary {step} after the attacks: {describe(record)}"
    attacked = {step for step in outcome.context.attacks}
    assert attacked <= set(outcome.records), sorted(attacked - set(outcome.records))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_nothing_outlives_the_step(runs, executor):
    """No file on the host, no daemon, no poisoned cache or report."""
    outcome = runs[executor]
    assert outcome.leftovers == [], outcome.leftovers


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_daemon_cannot_write_the_channel_after_the_script_ends(runs, executor):
    """A17's daemon waits for the script to end and then appends garbage to the operand channel: the
    stream the parent reads is the script's own (no stream error), the verdict the wrong answer's."""
    record = runs[executor].record("44.3")
    assert "stream_error" not in record, describe(record)
    assert record.get("failure_kind") == "assertion", describe(record)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_the_api_key_is_out_of_reach(runs, executor):
    """A18 searched the environment, every /proc entry it can see and its own memory for the key."""
    outcome = runs[executor]
    record = outcome.record("19.1")
    assert "SECRETS []" in record.get("message", ""), describe(record)
    for field_name in ("message", "stdout", "stderr"):
        assert outcome.secret not in str(record.get(field_name, "")), field_name


@pytest.mark.parametrize("executor", EXECUTORS)
def test_the_api_key_is_never_written_to_the_reports(runs, executor):
    """The key (given as $OPENAI_API_KEY and --model-api-key) appears in no file of the run's reports."""
    outcome = runs[executor]
    assert H.files_containing(outcome.context.reports, outcome.secret) == []


@pytest.mark.parametrize("key", ["D1", "D2", "D3"])
def test_the_parent_is_not_an_attack_surface(runs, key):
    """The trusted process decodes and compares what the child sent: that work must stay bounded in time
    (D1: a dict whose keys all collide; D2: sympy arithmetic that explodes) and in memory (D3: a
    64 KB operand that broadcasts against the target), and the step must fail."""
    outcome = runs[key]
    attack = next(a for a in H.SOLO_ATTACKS if a.key == key)  # D1-D3 of the runs started alone
    assert not outcome.timed_out, (
        f"{key} ({attack.title}): the run did not end within {DOS_TIMEOUT} s; "
        f"the scoring process is stuck on the child's values:\n{outcome.output[-2000:]}"
    )
    record = outcome.record(attack.step)
    assert record["status"] != "pass", describe(record)
    if key == "D3":
        assert outcome.maxrss_kb is not None, outcome.output[-2000:]
        assert outcome.maxrss_kb * 1024 < DOS_MEMORY, (
            f"{key}: the scoring process reached {outcome.maxrss_kb // 1024} MiB comparing a 64 KB operand"
        )
    assert outcome.leftovers == [], outcome.leftovers


def test_code_interpreter_cannot_reach_the_answers(runs):
    """Tool-use mode: the model's code_interpreter searches the data dir, the cache, the project and the
    usual folders for the ground truth and the targets, and for the key, and leaves a daemon; the final
    answer is the ground truth it found. It finds nothing, the step fails and the daemon is gone."""
    outcome = runs["T1"]
    record = outcome.record("29.1")
    assert record["status"] == "fail", describe(record)
    [run] = [r for r in run_dirs(outcome.context.project) if (r / "steps.jsonl").is_file()]
    trajectory = (run / record["trajectory"]).read_text()
    assert "FOUND []" in trajectory and "KEYS []" in trajectory, trajectory[-3000:]
    step = H.STEPS["29.1"]
    own = [
        line.strip()
        for line in step["ground_truth_code"].splitlines()
        if len(line.strip()) > 8 and line.strip() not in step["function_header"]
    ]  # not in the prompt
    assert own and not any(line in trajectory or line in record["code"] for line in own), record["code"]
    assert outcome.leftovers == [], outcome.leftovers
    assert H.files_containing(outcome.context.reports, outcome.secret) == []


def test_model_text_cannot_forge_the_reports_or_the_terminal(runs):
    """A07 prints and raises text holding markup, a summary.md table row and terminal control sequences
    (the attack's code holds them too): report.html shows them as text, summary.md gains no row and the
    terminal gets no escape sequence from the model."""
    outcome = runs["fork"]
    record = outcome.record("29.3")
    assert record["status"] == "fail", describe(record)
    [run] = [r for r in run_dirs(outcome.context.project) if (r / "steps.jsonl").is_file()]
    html = (run / "report.html").read_text()
    for markup in ("<script>window.H3PWN", "<img src=x onerror"):
        assert markup not in html, f"report.html holds the model's markup {markup!r} unescaped"
    summary = (run / "summary.md").read_text()
    assert H.INJECT_ROW not in [line.strip() for line in summary.splitlines()], "summary.md gained a forged row"
    assert "\x1b" not in outcome.output, "the terminal output holds an escape sequence from the model"


def test_a_reply_the_parser_cannot_hold_is_a_parse_error(runs):
    """R1: the reply's code nests a unary minus 20000 deep; CPython's parser gives up with MemoryError, not
    SyntaxError. The step is a parse_error like any code that does not parse, and the run goes on."""
    outcome = runs["R1"]
    assert not outcome.timed_out, outcome.output[-3000:]
    assert outcome.returncode == 1, outcome.output[-3000:]
    record = outcome.record("1.1")
    assert record["status"] == "parse_error", describe(record)
