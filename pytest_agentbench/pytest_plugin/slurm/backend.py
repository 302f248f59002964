"""``--bench-backend=slurm``: the session collects as usual, then submits one job array element per task
instead of running items, and (unless ``--bench-set=detach=true``) takes each task's package in as it arrives, so
items pass or fail, records are written and progress shows as in a local run.

Before anything is submitted: settings.json is written (each job restores the run from it), the API key goes
to a 0600 file in the spool (``--bench-set=slurm_key=file``; never into a job script or the environment Slurm
stores), and one small job must be able to write into the run folder (the nodes share it), else exit 4. An
impossible request (more GPUs or memory than any node has) is refused by ``sbatch``: exit 4 with its message.
A task whose job ended without a package gets a ``lost`` record naming the job, its state and node;
``--bench-resume RUN_DIR`` submits exactly those again.
"""

from __future__ import annotations

import secrets
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ...backends.slurm import commands as slurm
from ...backends.slurm import spool
from ...core.jobs import JobRequest
from ...core.options import view
from ..collect import BenchItem
from ..options import all_options
from ..provenance import session_command
from ..run import BenchState
from .taskpackage import PackageLoop, units_of, write_run_settings

CHECK_TIMEOUT = 300.0  # seconds the shared-folder check job may take (queue wait included)
CHECK_FIRST_LOOK = 0.2  # seconds before the first look at the check job; each next look waits half as long again
POLL_SLURM = 3.0  # seconds between two looks at squeue while waiting


class SlurmBackend:
    """Registered on the controller of a run with ``--bench-backend=slurm``."""

    def __init__(self, config: pytest.Config, state: BenchState) -> None:
        self.config, self.state = config, state
        self.opts = state.options
        self.slurm = view(slurm.SlurmOptions, state.options)
        self.loop = PackageLoop(config, state)
        self.detached: list[str] = []
        self.last_look = 0.0
        self.arrays: list[dict[str, Any]] = []

    # ---- the run loop
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
        if session.config.option.collectonly:
            return True
        others = [i for i in session.items if not isinstance(i, BenchItem)]
        for i, item in enumerate(others):  # a user's own tests in the same session run here, as usual
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=others[i + 1] if i + 1 < len(others) else None)
        units = units_of(session.items)
        pending = self.loop.pending_units(units)
        self.loop.report_resumed(units, pending)
        # packages that arrived after an earlier session stopped waiting are taken in, not run again
        self.loop.take_waiting({i.nodeid: i for its in pending.values() for i in its}, pending)
        if not pending:
            return True
        self.submit(pending)
        if self.slurm.detach:
            return True
        self.loop.wait(session, pending, self.ended, time.sleep)
        return True

    def submit(self, pending: dict[str, list[BenchItem]]) -> None:
        state, opts, mine = self.state, self.opts, self.slurm
        write_run_settings(self.config, state)
        folder = spool.spool_dir(state.run_dir)
        (folder / "logs").mkdir(parents=True, exist_ok=True)
        secret = [o for o in all_options() if o.secret]
        values = {o.name: str(opts[o.name]) for o in secret if opts.get(o.name)}
        if values and mine.slurm_key == "file":
            slurm.write_secret(folder, values)
        env = slurm.clean_env(values.values(), [o.env for o in secret if o.env])
        before, after = slurm.common_args(mine.slurm_partition, mine.slurm_account, mine.slurm_args)
        cwd = str(self.config.invocation_params.dir)
        try:
            self.check_shared_folder(folder, before, env, cwd)
            started = time.monotonic()  # the submission itself, after the check job
            for number, (request, units) in enumerate(
                slurm.group_requests(
                    {
                        unit: state.benchmark.job_request([i.sample for i in items], opts)
                        for unit, items in pending.items()
                    }
                ).items()
            ):
                self.arrays.append(self.submit_group(folder, number, request, units, before, after, env, cwd))
        except slurm.SlurmError as exc:
            if self.arrays:  # some arrays went out: keep what they do, say what did not
                slurm.save_jobs(folder, self.arrays)
            raise pytest.UsageError(f"agentbench: Slurm refused the run's jobs: {exc}") from None
        slurm.save_jobs(folder, self.arrays)
        ids = [a["job"] for a in self.arrays]
        self.say(
            f"agentbench: submitted {len(pending)} task(s) to Slurm as job array(s) {', '.join(ids)} "
            f"in {time.monotonic() - started:.2f} s"
        )
        if mine.detach:
            self.detach(folder, ids, before, env, cwd)

    def submit_group(
        self,
        folder: Path,
        number: int,
        request: JobRequest,
        units: list[str],
        before: list[str],
        after: list[str],
        env: dict[str, str],
        cwd: str,
    ) -> dict[str, Any]:
        tag = secrets.token_hex(3)
        unit_list = folder / f"units-{tag}-{number}.txt"
        unit_list.write_text("\n".join(units) + "\n", encoding="utf-8")
        script = folder / f"job-{tag}-{number}.sh"
        script.write_text(
            slurm.job_script(sys.executable, self.state.run_dir, unit_list, login=self.slurm.slurm_key == "node-env"),
            encoding="utf-8",
        )
        job = slurm.submit_array(
            script,
            len(units),
            request,
            name=f"agentbench-{self.state.run_dir.name}",
            log_dir=folder / "logs",
            cwd=cwd,
            max_running=self.slurm.slurm_max_running,
            before=before,
            after=after,
            env=env,
        )
        return {"job": job, "units": units, "request": slurm.sbatch_args(request)}

    def check_shared_folder(self, folder: Path, before: list[str], env: dict[str, str], cwd: str) -> None:
        """One small job writes a file into the spool; without it the nodes do not share the run folder."""
        probe = folder / f".write-check-{secrets.token_hex(4)}"
        try:
            job = slurm.submit_wrap(
                f"touch {shlex.quote(str(probe))}",
                name="agentbench-write-check",
                output="/dev/null",
                cwd=cwd,
                before=before,
                env=env,
            )
            state = wait_for_job_end(job, CHECK_TIMEOUT)
        except slurm.SlurmError as exc:
            raise slurm.SlurmError(f"the check job that writes into the run folder failed: {exc}") from None
        if state not in ("COMPLETED", ""):
            raise slurm.SlurmError(f"the check job {job} that writes into the run folder ended {state}")
        # looked for once the job has ended, not while it runs: on NFS a file looked for and missing can stay
        # missing to this machine for a while after the node wrote it
        if not probe.exists():
            raise pytest.UsageError(
                f"agentbench: a Slurm job could not write into the run folder {self.state.run_dir}: put the run on a "
                f"file system the nodes share (--bench-report-dir on a shared folder)"
            )
        probe.unlink()

    def detach(self, folder: Path, ids: list[str], before: list[str], env: dict[str, str], cwd: str) -> None:
        command = session_command("collect", self.state.run_dir)
        try:
            job = slurm.submit_wrap(
                f"exec {command}",
                name=f"agentbench-collect-{self.state.run_dir.name}",
                output=str(folder / "logs" / "collect-%j.out"),
                cwd=cwd,
                before=before,
                env=env,
                dependency="afterany:" + ":".join(ids),
            )
        except slurm.SlurmError as exc:
            raise pytest.UsageError(f"agentbench: Slurm refused the run's collect job: {exc}") from None
        self.detached = [*ids, job]
        self.say(
            f"agentbench: detached; collect job {job} runs `{command}` when the tasks end "
            f"(or run it yourself); `{session_command('resume', self.state.run_dir)}` submits lost tasks again"
        )

    def ended(self, units: set[str]) -> dict[str, tuple[str, str, str]]:
        now = time.monotonic()
        if now - self.last_look < POLL_SLURM:
            return {}
        self.last_look = now
        try:
            return slurm.ended_without_package(units, self.arrays, spool.spool_dir(self.state.run_dir) / "logs")
        except slurm.SlurmError as exc:  # squeue did not answer this time: ask again later
            self.say(f"agentbench: squeue: {exc}")
            return {}

    def say(self, text: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(text)
        else:
            print(text, flush=True)

    # ---- a detached session is a success once submitted
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.detached:
            reporter = self.config.pluginmanager.get_plugin("agentbench-reporter")
            if reporter is not None:
                reporter.plan.select([])  # nothing ran here by design: not an incomplete run

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.detached:
            terminalreporter.write_sep("=", "agentbench: detached")
            terminalreporter.write_line(f"jobs: {', '.join(self.detached)} (the last collects)")
            terminalreporter.write_line(f"collect: {session_command('collect', self.state.run_dir)}")


def wait_for_job_end(job: str, timeout: float) -> str:
    """The job's final state ("" once Slurm no longer knows it), looked up soon after submission and then less
    and less often (sbatch --wait first looks after 2 s, then after 8 and 32 more: most of a short run's start);
    a job still not ended after ``timeout`` seconds is cancelled: SlurmError. An squeue that does not answer
    once is asked again, as the run loop does."""
    deadline = time.monotonic() + timeout
    pause = CHECK_FIRST_LOOK
    while True:
        time.sleep(pause)
        try:
            state = slurm.job_state(job)
        except slurm.SlurmError as exc:
            state = f"unknown to squeue ({exc})"
        else:
            if not state or state in slurm.ENDED_STATES:
                return state
        if time.monotonic() > deadline:
            slurm.run(["scancel", job])
            raise slurm.SlurmError(f"job {job} had not ended after {timeout:.0f} s (it was {state}): cancelled it")
        pause = min(pause * 1.5, POLL_SLURM)


def collect_ended(run_dir: Path):
    """For ``collect``: which of a Slurm run's units ended without a package (None for a run with no jobs)."""
    arrays = slurm.load_jobs(spool.spool_dir(run_dir))
    if not arrays:
        return None

    def ended(units: set[str]) -> dict[str, tuple[str, str, str]]:
        try:
            return slurm.ended_without_package(units, arrays, spool.spool_dir(run_dir) / "logs")
        except slurm.SlurmError:
            return {}

    return ended
