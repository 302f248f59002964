"""Generating the chains of the problems a process holds, concurrently and ahead of scoring.

A SciCode problem is a chain of model calls: step k needs the code of steps 1..k-1, never a verdict. So the
chains of every problem (and attempt) this process holds are generated at once, each in its own thread, up to
``connections`` chains (this process's share of --bench-max-connections; the model client's gate bounds the
requests in flight), while the scoring loop consumes the steps in pytest's item order. A step's prompt is
built exactly as the serial order builds it (the codes of the earlier steps of the same attempt: the official
code of a prefilled step, else the generated code, "" for none), so the response cache key and the entries a
run writes do not depend on the number of chains.

A chain goes only as far as the last step this process will score of its problem (scoring one step alone
never pays for a call after it), and stops at a generation a retry may ask again (a model error) or that the
budget cut (status budget): the steps after it are then generated when their item starts, as in the serial
order. A chain queued behind others whose step the scoring loop needs now is taken out of the queue and run
in the scoring thread up to that step, then queued again: the scoring loop never waits behind chains it does
not need yet.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field
from typing import Any

from . import dataset
from .solvers import Generated

Key = tuple[str, int, int]  # (problem id, step index, attempt)
STOPPING = ("model_error", "budget")  # generations a chain does not build on (a retry may ask them again)
CLOSE_WAIT = 30.0  # seconds the end of a run waits for the steps being generated (their cost is then counted)


class NotAhead(Exception):
    """This step was not generated ahead (its chain stopped before it): the scoring loop generates it."""


@dataclass
class Chain:
    problem: dict[str, Any]
    attempt: int
    last: int  # the last step index this process will score
    task: Future | None = None  # the chain's place in the pool's queue
    running: bool = False  # queued or being generated (a thread will look at ``last`` again)
    futures: dict[int, Future] = field(default_factory=dict)  # step index -> its generation, while not done

    @property
    def problem_id(self) -> str:
        return str(self.problem["problem_id"])


class ChainRunner:
    """The chains of one process's run. ``solve(problem, index, previous, attempt)`` generates one step;
    ``prefilled`` holds the official code of the prefilled steps; ``memo`` is the run's memo of generations
    (key -> Generated or the Future of one being made), shared with the scoring loop under ``lock``."""

    def __init__(
        self,
        connections: int,
        solve: Callable[[dict[str, Any], int, list[str], int], Generated],
        prefilled: Mapping[str, str],
        memo: dict[Key, Generated | Future],
        lock: threading.RLock,
    ) -> None:
        self.connections = max(1, int(connections))
        self.solve = solve
        self.prefilled = prefilled
        self.memo = memo
        self.lock = lock
        self.chains: dict[tuple[str, int], Chain] = {}
        self.pool: ThreadPoolExecutor | None = None
        self.closed = False

    def start(self, problem: dict[str, Any], attempt: int, last: int) -> None:
        """Generate the chain of ``problem``'s ``attempt`` up to step ``last``, in the background (once; a later
        call with a further ``last`` extends a chain that has not finished)."""
        pid = str(problem["problem_id"])
        with self.lock:
            if self.closed:
                return
            chain = self.chains.get((pid, attempt))
            if chain is None:
                chain = self.chains[(pid, attempt)] = Chain(problem, attempt, last)
            chain.last = max(chain.last, last)
            self.reserve(chain)
            if chain.futures and not chain.running:
                self.submit(chain)

    def reserve(self, chain: Chain) -> None:
        """A Future in the memo for each step of the chain nobody generated yet (caller holds the lock)."""
        for index in range(chain.last + 1):
            key = (chain.problem_id, index, chain.attempt)
            if str(chain.problem["sub_steps"][index]["step_number"]) in dataset.PREFILLED_FILES:
                continue
            if key not in self.memo:
                chain.futures[index] = self.memo[key] = Future()

    def submit(self, chain: Chain) -> None:
        """Queue the chain (caller holds the lock)."""
        chain.running = True
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=self.connections, thread_name_prefix="agentbench-chain")
        chain.task = self.pool.submit(self.run, chain, None)

    def wait(self, key: Key, future: Future) -> Generated:
        """The generation of ``key`` (its chain's Future): run here, up to it, when its chain is still queued."""
        with self.lock:
            chain = self.chains.get((key[0], key[2]))
            here = chain is not None and chain.task is not None and chain.task.cancel()  # not begun: run it here
        if chain is not None and here:
            self.run(chain, key[1])
        try:
            return future.result()
        except NotAhead:
            raise
        except Exception as exc:  # a bug of the solver: the step is a model error, like a raising client
            return Generated(None, "model_error", f"{type(exc).__name__}: {exc}")

    def run(self, chain: Chain, until: int | None) -> None:
        """Generate the chain's steps in order (up to ``until`` when given); never raises."""
        codes: list[str] = []
        index = 0
        while True:
            with self.lock:
                if index > (chain.last if until is None else min(until, chain.last)) or self.closed:
                    chain.running = False
                    if chain.futures and not self.closed:  # (run up to ``until`` here: the rest goes back)
                        self.submit(chain)
                    return
            number = str(chain.problem["sub_steps"][index]["step_number"])
            if number in dataset.PREFILLED_FILES:
                if number not in self.prefilled:  # (the scoring loop says so, when it needs the step)
                    self.give_up(chain)
                    return
                codes.append(self.prefilled[number])
                index += 1
                continue
            result = self.step(chain, index, codes)
            if result is None or result.status in STOPPING:
                self.give_up(chain)
                return
            codes.append(result.code or "")
            index += 1

    def step(self, chain: Chain, index: int, codes: list[str]) -> Generated | None:
        """The generation of one step of the chain: the memo's, or made now when it is the chain's to make."""
        key = (chain.problem_id, index, chain.attempt)
        with self.lock:
            memo = self.memo.get(key)
            mine = chain.futures.pop(index, None)
        if isinstance(memo, Generated):
            return memo
        if mine is None or memo is not mine:  # someone else's (the scoring loop's) or forgotten: not ours
            if isinstance(memo, Future) and memo.done() and memo.exception() is None:
                done: Generated = memo.result()
                return done
            return None
        try:
            result = self.solve(chain.problem, index, list(codes), chain.attempt)
        except BaseException as exc:  # (the scoring loop reports it; this thread goes on with nothing)
            mine.set_exception(exc)
            return None
        mine.set_result(result)
        return result

    def give_up(self, chain: Chain) -> None:
        """The steps the chain will not generate: the scoring loop generates each when its item starts."""
        with self.lock:
            chain.running = False
            futures, chain.futures = chain.futures, {}
            for index, future in futures.items():
                key = (chain.problem_id, index, chain.attempt)
                if self.memo.get(key) is future:
                    del self.memo[key]
                future.set_exception(NotAhead())

    def close(self) -> None:
        """No chain goes on to another step; the steps being generated are waited for (at most CLOSE_WAIT): a
        call that went out is paid for, so its reply is kept (cache, the run's cost)."""
        with self.lock:
            self.closed = True
            chains = list(self.chains.values())
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            wait_for([c.task for c in chains if c.task is not None], timeout=CLOSE_WAIT)
        for chain in chains:
            self.give_up(chain)
