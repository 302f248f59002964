"""Parsing from several threads at once (the next step's answer is extracted while this one is scored;
targets are rebuilt by a thread pool). CPython 3.11's AST constructor keeps its depth counter in
interpreter-wide state: a thread switch inside a parse (here forced by a garbage-collector callback)
makes another thread's valid parse fail with SystemError unless parses are serialised."""

from __future__ import annotations

import gc
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_agentbench.core import pyast

SOURCE = "x = " + "[" * 30 + "1" + "]" * 30 + "\n" + "def f(a):\n    return a\n" * 200
PACKAGE = Path(__file__).resolve().parents[1] / "pytest_agentbench"


def parse_in_threads(parse, threads: int = 4, rounds: int = 40) -> list[BaseException]:
    errors: list[BaseException] = []

    def work() -> None:
        for _ in range(rounds):
            try:
                parse(SOURCE)
            except SystemError as exc:
                errors.append(exc)

    def yield_to_other_threads(*_args) -> None:
        time.sleep(0.0001)

    threshold, interval = gc.get_threshold(), sys.getswitchinterval()
    gc.set_threshold(50)
    sys.setswitchinterval(1e-6)
    gc.callbacks.append(yield_to_other_threads)
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        gc.callbacks.remove(yield_to_other_threads)
        gc.set_threshold(*threshold)
        sys.setswitchinterval(interval)
    return errors


@pytest.mark.slow  # a thread-switching stress, over 10 s in the full suite
def test_parses_in_several_threads_at_once_all_succeed():
    assert parse_in_threads(pyast.parse) == []


def test_the_package_parses_only_through_the_lock():
    offenders = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "pyast.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "ast.parse(" in line and "pyast.parse(" not in line
    ]
    assert offenders == [], f"parse through core.pyast.parse (thread-safe): {offenders}"
