"""SIGTERM and SIGHUP end a run the way Ctrl-C does.

A CI job's time-out, ``timeout``, Kubernetes and Slurm stop a process with SIGTERM (a closed terminal sends
SIGHUP), whose default action ends Python at once: no summary, no report.html, no resume command. Here the
first of them raises ``KeyboardInterrupt`` in the main thread, which is what Ctrl-C does, so pytest ends the
session as interrupted (exit 2): fixtures are torn down (environments remove their containers), and the
reporter writes the summaries, labelled incomplete, with the command that resumes the run.

Every process of the run installs it: the only process, the xdist controller and each worker. A signal sent
to the whole process group (``timeout``, Slurm) stops each worker as a terminal's Ctrl-C would; one sent to
the controller alone ends its loop, and xdist then shuts the workers down (execnet interrupts a worker that
does not stop by itself). A signal the process was started ignoring (``nohup`` ignores SIGHUP) stays
ignored. Once the session is finishing (its reports being written) a further stop signal is
ignored, so it cannot cut the reports short; SIGKILL still ends the process at once.

A stop (Ctrl-C too) that comes while a finished item's report is being handled waits until every plugin has
handled it: the records file, the reporter's tally and the progress count then agree on that item, so a
record on disk is always in the summary.

Python runs a handler wherever the main thread is, and some places swallow what it raises (a callback around
``os.fork``, a finalizer): a stop raised there is reported as "Exception ignored" and the run went on to its end
as if nothing had come. So a stop that was raised is raised again when the item it came in ends.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import pytest

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
INTERRUPT = signal.SIGINT


class StopSignals:
    """The handlers of one session: installed at configure, the previous ones restored at unconfigure."""

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}
        self.received: str | None = None  # the name of the first stop signal
        self.finishing = False  # the session is writing its reports: a stop signal changes nothing now
        # an item's report from its making (its record written) until every plugin has logged it: a stop waits
        self.holding = 0
        self.unlogged: set[int] = set()  # reports made here and not yet logged
        self.pending: KeyboardInterrupt | None = None  # the stop that came meanwhile
        self.raised: KeyboardInterrupt | None = None  # the stop raised, perhaps where it was swallowed

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
            return
        for number in STOP_SIGNALS:
            if signal.getsignal(number) is signal.SIG_IGN:  # nohup: the user asked to survive a hangup
                continue
            self.previous[number] = signal.signal(number, self.handle)
        if signal.getsignal(INTERRUPT) is signal.default_int_handler:  # Ctrl-C: only its timing changes
            self.previous[INTERRUPT] = signal.signal(INTERRUPT, self.interrupt)

    def restore(self) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        self.previous = {}

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is not None or self.finishing:
            return
        self.received = signal.Signals(signum).name
        self.stop(KeyboardInterrupt(f"agentbench: {self.received} received; the run stops as after Ctrl-C"))

    def interrupt(self, _signum: int, _frame: FrameType | None) -> None:
        self.stop(KeyboardInterrupt())

    def stop(self, exc: KeyboardInterrupt) -> None:
        if self.holding or self.unlogged:
            self.pending = self.pending or exc
            return
        self.raised = exc
        raise exc

    def release(self) -> None:
        """Raise the stop that waited, once no report is in hand."""
        if not self.holding and not self.unlogged and self.pending is not None:
            exc, self.pending = self.pending, None
            self.raised = exc
            raise exc

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        self.holding += 1
        try:
            report = yield
            self.unlogged.add(id(report))
            return report
        finally:
            self.holding -= 1

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport):
        self.holding += 1
        try:
            return (yield)
        finally:
            self.holding -= 1
            self.unlogged.discard(id(report))
            self.release()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self) -> None:
        self.unlogged.clear()  # a report made and never logged holds no stop past its item
        self.release()
        if self.raised is not None and not self.finishing:  # the item ended: the stop was swallowed on its way
            raise self.raised

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        self.finishing = True

    def pytest_unconfigure(self) -> None:
        self.restore()
