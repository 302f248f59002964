"""Heaviest work first: the placement scheduler hands whole tasks out heaviest first (the previous
run's durations from ``<cache dir>/durations.json``, else the benchmark's estimate), GPU units to GPU workers
before cost order, and the controller writes durations.json at the end of a run.

Real ``-n 2`` runs show the order in their records (each worker's records arrive in the order it ran them);
the scheduler's own rules are driven through xdist's scheduler interface with stand-in workers, as xdist's
DSession drives it (the workers' hosts, GPUs included, are what a stand-in lets a test choose)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_agentbench.pytest_plugin.distribution.placement import PlacementScheduling

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.scicode_builders import CLOSE, MODEL_CONFTEST, CustomScicode, problem, step

# --------------------------------------------------------------------------- real -n 2 runs

# problem id -> test cases of each of its steps: the declared cost is the number of test cases
SHAPES = {"1": [1], "2": [4], "3": [3, 3], "4": [2], "5": [5], "6": [1, 1]}


def costed_problems() -> tuple[list[dict], dict[str, list]]:
    problems, targets = [], {}
    for pid, cases in SHAPES.items():
        steps = []
        for k, count in enumerate(cases, 1):
            number = f"{pid}.{k}"
            steps.append(step(number, f"def f{k}():\n    return {k}", [CLOSE.format(call=f"f{k}()")] * count))
            targets[number] = [k] * count
        problems.append(problem(pid, steps))
    return problems, targets


def run_costed(pytester, bench, shared_data, cache: Path, run_id: str):
    pytester.makeconftest(MODEL_CONFTEST)
    problems, targets = costed_problems()
    custom = CustomScicode(pytester, bench, shared_data)
    custom.write(problems, targets)
    result = custom(
        f"--bench-cache-dir={cache}",
        "-n",
        "2",
        # one unit per worker at a time: several held at once go out shortest chain first (tested below)
        "--bench-max-connections=2",
        f"--bench-run-id={run_id}",
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    [run] = [p for p in run_dirs(pytester.path) if p.name == run_id]
    return read_jsonl(run / "steps.jsonl")


def tasks_per_worker(records: list[dict]) -> dict[str, list[str]]:
    """Each worker's tasks in the order it ran them (its records reach the controller in that order)."""
    out: dict[str, list[str]] = {}
    for record in records:
        tasks = out.setdefault(record["worker"], [])
        if not tasks or tasks[-1] != record["task"]:
            tasks.append(record["task"])
    return out


def assert_heaviest_first(records: list[dict], cost: dict[str, float]) -> None:
    per_worker = tasks_per_worker(records)
    assert sorted(per_worker) == ["gw0", "gw1"], per_worker
    ranked = sorted(cost, key=lambda t: -cost[t])
    assert {tasks[0] for tasks in per_worker.values()} == set(ranked[:2]), per_worker  # the two heaviest start
    for tasks in per_worker.values():  # and each worker goes on with ever lighter ones
        assert [cost[t] for t in tasks] == sorted((cost[t] for t in tasks), reverse=True), per_worker
    assert sorted(t for tasks in per_worker.values() for t in tasks) == sorted(cost)  # each task once, whole


@pytest.mark.e2e
@pytest.mark.slow
def test_without_durations_the_declared_cost_orders_the_work_and_durations_json_is_written(
    pytester, bench, shared_data, tmp_path
):
    cache = tmp_path / "cache"
    records = run_costed(pytester, bench, shared_data, cache, "estimate")
    assert_heaviest_first(records, {pid: float(sum(cases)) for pid, cases in SHAPES.items()})
    written = json.loads((cache / "durations.json").read_text())
    assert written["format"] == 1
    table = written["durations"]["scicode"]["fork"]  # benchmark, executor, task, sample
    assert sorted(table) == sorted(SHAPES) and sorted(table["3"]) == ["3.1", "3.2"]
    assert all(isinstance(v, float) and v > 0 for samples in table.values() for v in samples.values())


@pytest.mark.e2e
@pytest.mark.slow
def test_durations_of_an_earlier_run_order_the_work(pytester, bench, shared_data, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    # measured seconds that reverse the declared order; problem 6 has one step measured and one not
    measured = {
        "1": {"1.1": 9.0},
        "2": {"2.1": 0.5},
        "3": {"3.1": 0.2, "3.2": 0.2},
        "4": {"4.1": 7.0},
        "5": {"5.1": 1.0},
        "6": {"6.1": 3.0},
    }
    other_executor = {task: {k: 100.0 for k in samples} for task, samples in measured.items()}
    (cache / "durations.json").write_text(
        json.dumps({"format": 1, "durations": {"scicode": {"fork": measured, "subprocess": other_executor}}})
    )
    records = run_costed(pytester, bench, shared_data, cache, "measured")
    # 6.2 was never measured: its declared cost (1 test case) scaled by the measured seconds per test case
    scale = sum(v for t in measured.values() for v in t.values()) / sum(
        sum(SHAPES[t][: len(v)]) for t, v in measured.items()
    )
    expected = {t: sum(s.values()) for t, s in measured.items()}
    expected["6"] += 1 * scale
    assert_heaviest_first(records, expected)
    assert json.loads((cache / "durations.json").read_text())["durations"]["scicode"]["subprocess"] == other_executor


# --------------------------------------------------------------------------- the scheduler's rules


class Worker:
    """A stand-in for xdist's WorkerController: its gateway id, the items sent to it, shutdown."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name, spec=None)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices) -> None:
        assert not self.shutting_down, "work sent to a worker told to finish"
        self.sent += list(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def stand_in_config(workers: int, reports: list):
    hook = SimpleNamespace(
        pytest_handlecrashitem=lambda crashitem, report, sched: None,
        pytest_runtest_logreport=lambda report: reports.append((report.nodeid, report.node.gateway.id)),
        pytest_collectreport=lambda report: reports.append(("collection", str(report.longrepr))),
    )
    return SimpleNamespace(
        getoption=lambda name, default=None: [f"{workers}*popen"] if name == "tx" else default, hook=hook
    )


def scheduler(
    collection, *, gpu_items=(), gpu_workers=(), names=("gw0", "gw1"), cost=None, reports=None, stopped=None, held=1
):
    reports = [] if reports is None else reports
    # as durations.plan_costs makes them: a capsule is its own unit, a SciCode problem's steps one unit
    unit_of = lambda nodeid: nodeid if nodeid.startswith("core-bench::") else nodeid.rsplit("::", 1)[0]  # noqa: E731
    sched = PlacementScheduling(
        stand_in_config(len(names), reports),
        None,
        gpu_item=set(gpu_items).__contains__,
        gpu_node=lambda node: node.gateway.id in gpu_workers,
        unit_of=unit_of,
        unit_cost=(lambda unit, nodeids: cost[unit]) if cost else None,
        stopped=stopped,
        held=held,
    )
    workers = [Worker(n) for n in names]
    for worker in workers:
        sched.add_node(worker)
    for worker in workers:
        sched.add_node_collection(worker, collection)
    assert sched.collection_is_completed
    sched.schedule()
    return sched, workers


def ran(worker: Worker, collection: list[str]) -> list[str]:
    return [collection[i] for i in worker.sent]


def complete(sched, worker: Worker, collection: list[str], count: int = 1) -> None:
    """``worker`` finishes its next ``count`` items not yet finished."""
    done = getattr(worker, "done", 0)
    for index in worker.sent[done : done + count]:
        sched.mark_test_complete(worker, index)
    worker.done = done + count


def finish_all(sched, workers, collection) -> None:
    while any(getattr(w, "done", 0) < len(w.sent) for w in workers):
        for worker in workers:
            if getattr(worker, "done", 0) < len(worker.sent):
                complete(sched, worker, collection)


CAPSULES = [f"core-bench::capsule-{i}" for i in range(8)]


def test_gpu_units_go_to_the_gpu_worker_before_cost_order():
    cost = {c: float(i) for i, c in enumerate(CAPSULES)}  # capsule-7 heaviest
    gpu = {CAPSULES[1], CAPSULES[4]}
    sched, (cpu, gpu_worker) = scheduler(CAPSULES, gpu_items=gpu, gpu_workers={"gw1"}, cost=cost)
    assert ran(gpu_worker, CAPSULES)[0] == CAPSULES[4]  # its heaviest GPU unit, though capsule-7 weighs more
    assert ran(cpu, CAPSULES)[0] == CAPSULES[7]  # the heaviest of the rest
    finish_all(sched, [cpu, gpu_worker], CAPSULES)
    assert gpu <= set(ran(gpu_worker, CAPSULES)) and not gpu & set(ran(cpu, CAPSULES))
    assert sorted(ran(cpu, CAPSULES) + ran(gpu_worker, CAPSULES)) == sorted(CAPSULES)  # each once
    assert cpu.shutting_down and gpu_worker.shutting_down and sched.tests_finished
    for worker in (cpu, gpu_worker):  # they finish and leave, in either order: the session still ends
        assert sched.remove_node(worker) is None
        assert sched.tests_finished and not sched.has_pending


def test_without_a_gpu_worker_gpu_units_still_go_somewhere():
    sched, workers = scheduler(CAPSULES, gpu_items={CAPSULES[0], CAPSULES[3]})
    finish_all(sched, workers, CAPSULES)
    assert sorted(ran(workers[0], CAPSULES) + ran(workers[1], CAPSULES)) == sorted(CAPSULES)


def test_the_next_heaviest_goes_to_the_worker_that_is_free_first():
    steps = [
        f"scicode/{p}::{p}.{s}" for p, n in (("1", 3), ("2", 3), ("3", 2), ("4", 2), ("5", 2)) for s in range(1, n + 1)
    ]
    cost = {"scicode/1": 10.0, "scicode/2": 9.0, "scicode/3": 5.0, "scicode/4": 4.0, "scicode/5": 1.0}
    sched, (a, b) = scheduler(steps, cost=cost)
    assert ran(a, steps) == ["scicode/1::1.1", "scicode/1::1.2", "scicode/1::1.3"]  # one task each, nothing more
    assert ran(b, steps) == ["scicode/2::2.1", "scicode/2::2.2", "scicode/2::2.3"]
    complete(sched, b, steps, 2)  # b starts its last step first: it waits on it, so it is free and takes 3
    assert ran(b, steps)[3:] == ["scicode/3::3.1", "scicode/3::3.2"] and len(a.sent) == 3
    complete(sched, a, steps, 2)
    assert ran(a, steps)[3:] == ["scicode/4::4.1", "scicode/4::4.2"]
    finish_all(sched, [a, b], steps)
    assert "scicode/5::5.1" in ran(a, steps) + ran(b, steps) and a.shutting_down and b.shutting_down


def steps_of(chains: dict[str, int]) -> list[str]:
    return [f"scicode/{p}::{p}.{s}" for p, n in chains.items() for s in range(1, n + 1)]


def test_units_held_at_once_go_out_shortest_chain_first_and_a_dead_worker_loses_the_one_it_ran():
    chains = {"1": 5, "2": 1, "3": 3, "4": 2, "5": 1, "6": 4, "7": 2}
    steps = steps_of(chains)
    cost = {"scicode/1": 10.0, "scicode/2": 9.0, "scicode/3": 8.0, "scicode/4": 7.0, "scicode/5": 6.0}
    cost |= {"scicode/6": 1.0, "scicode/7": 0.5}
    reports: list = []
    sched, (a, b) = scheduler(steps, cost=cost, held=3, reports=reports)
    # which units each worker holds follows cost (1, 3, 5 and 2, 4, 6, round after round); each worker scores
    # its short chains first, while the long ones are still being generated
    assert ran(a, steps) == steps_of({"5": 1, "3": 3, "1": 5})
    assert ran(b, steps) == steps_of({"2": 1, "4": 2, "6": 4})
    complete(sched, b, steps, 1)  # b finished unit 2: it takes the next unit, after those it holds
    assert ran(b, steps)[7:] == steps_of({"7": 2})
    complete(sched, a, steps, 2)  # a finished 5.1 and 3.1, then dies in 3.2: unit 1 (not begun) moves to b
    assert sched.remove_node(a) == "scicode/3::3.2"
    assert reports == [("scicode/3::3.3", "gw0")]
    finish_all(sched, [b], steps)
    assert ran(b, steps)[9:] == steps_of({"1": 5}) and b.shutting_down


def test_the_rest_of_a_dead_workers_task_is_reported_lost_and_its_units_not_begun_move():
    steps = ["scicode/19::19.1", "scicode/19::19.2", "scicode/1::1.1", "scicode/3::3.1", "scicode/4::4.1"]
    cost = {"scicode/19": 9.0, "scicode/1": 3.0, "scicode/3": 2.0, "scicode/4": 1.0}
    reports: list = []
    sched, (a, b) = scheduler(steps, cost=cost, reports=reports)
    complete(sched, a, steps)  # 19.1 done: a waits on 19.2, its last, so it takes 4 (b took 1 and 3)
    given_to_a = ran(a, steps)
    assert given_to_a[:2] == ["scicode/19::19.1", "scicode/19::19.2"]
    assert sched.remove_node(a) == "scicode/19::19.2"  # a died in 19.2: xdist reports it
    assert reports == []  # nothing else of 19 was left
    later = given_to_a[2:]
    finish_all(sched, [b], steps)
    assert set(later) <= set(ran(b, steps))  # what a had not begun ran on b
    assert sorted(set(ran(b, steps)) | {"scicode/19::19.1", "scicode/19::19.2"}) == sorted(steps)

    reports.clear()
    sched, (a, b) = scheduler(steps, cost=cost, reports=reports)
    assert sched.remove_node(a) == "scicode/19::19.1"  # died in 19.1
    assert reports == [("scicode/19::19.2", "gw0")]  # lost with it: a task runs whole in one process
    c = Worker("gw2")  # xdist's replacement worker
    sched.add_node(c)
    sched.add_node_collection(c, steps)
    sched.schedule()
    finish_all(sched, [b, c], steps)
    assert sorted(ran(b, steps) + ran(c, steps)) == ["scicode/1::1.1", "scicode/3::3.1", "scicode/4::4.1"]
    assert b.shutting_down and c.shutting_down and sched.tests_finished


def test_a_worker_that_dies_before_its_collection_is_counted_out_and_queued_units_can_be_taken():
    # remote.py: a lost host's worker is not replaced, so the scheduler must stop waiting for its collection
    reports: list = []
    sched = PlacementScheduling(
        stand_in_config(2, reports),
        None,
        gpu_item=lambda n: False,
        gpu_node=lambda node: False,
        unit_of=lambda nodeid: nodeid,
    )  # a capsule: a unit
    a, b = Worker("gw0"), Worker("gw1")
    sched.add_node(a)
    sched.add_node(b)
    sched.add_node_collection(a, CAPSULES)
    assert not sched.collection_is_completed  # still waiting for b's
    assert sched.remove_node(b) is None  # b died before it sent its collection
    sched.count_out(b)
    assert sched.collection_is_completed and ran(a, CAPSULES)  # a got work at once
    sched.count_out(a)  # a worker whose collection arrived is never counted out
    assert sched.numnodes == 1
    queued = sched.take_queued()  # a is busy; nobody else is left for the rest
    assert sorted(queued + ran(a, CAPSULES)) == sorted(CAPSULES) and queued
    assert sched.take_queued() == [] and not sched.queue


def test_with_keep_free_a_free_worker_waits_while_another_holds_units_not_begun_and_takes_them_if_it_dies():
    # remote workers are not replaced: gw0, done with the queue, is not told to finish while gw1 still holds
    # a unit it has not begun, so when gw1's host is lost that unit runs on gw0 instead of being lost
    steps = ["scicode/19::19.1", "scicode/19::19.2", "scicode/1::1.1", "scicode/3::3.1"]
    cost = {"scicode/19": 9.0, "scicode/1": 3.0, "scicode/3": 2.0}

    def run(lose_b: bool):
        reports: list = []
        sched = PlacementScheduling(
            stand_in_config(2, reports),
            None,
            gpu_item=lambda n: False,
            gpu_node=lambda node: False,
            unit_of=lambda n: n.rsplit("::", 1)[0],
            unit_cost=lambda unit, nodeids: cost[unit],
            keep_free=True,
        )
        a, b = Worker("gw0"), Worker("gw1")
        for worker in (a, b):
            sched.add_node(worker)
            sched.add_node_collection(worker, steps)
        sched.schedule()
        assert ran(a, steps) == ["scicode/19::19.1", "scicode/19::19.2"]
        assert ran(b, steps) == ["scicode/1::1.1", "scicode/3::3.1"]  # 3.1 not begun while 1.1 runs
        complete(sched, a, steps)  # a is on its last item, the queue is empty, b holds 3 not begun
        assert not a.shutting_down
        if lose_b:
            assert sched.remove_node(b) == "scicode/1::1.1"  # only the item in flight
            assert ran(a, steps)[2:] == ["scicode/3::3.1"] and not reports
        else:
            complete(sched, b, steps)  # b begins 3.1, its last: nobody holds work not begun any more
            assert a.shutting_down and b.shutting_down
        return sched, a

    run(lose_b=False)
    sched, a = run(lose_b=True)
    finish_all(sched, [a], steps)
    assert a.shutting_down and sched.tests_finished


def test_workers_that_collected_different_items_get_nothing_and_the_difference_is_reported():
    reports: list = []
    sched = PlacementScheduling(stand_in_config(2, reports), None, gpu_item=lambda n: False, gpu_node=lambda n: False)
    a, b = Worker("gw0"), Worker("gw1")
    for worker, collection in ((a, CAPSULES), (b, CAPSULES[:-1])):
        sched.add_node(worker)
        sched.add_node_collection(worker, collection)
    sched.schedule()
    assert a.sent == b.sent == []
    [(kind, message)] = reports
    assert kind == "collection" and "gw0" in message and "gw1" in message and CAPSULES[-1] in message


def test_once_the_run_budget_is_spent_no_unit_goes_out():
    spent = []
    sched, workers = scheduler(CAPSULES, stopped=lambda: bool(spent))
    assert [len(w.sent) for w in workers] == [2, 2]  # the unit each runs and the next one xdist needs
    spent.append(True)  # the controller counted the delivered records past --bench-max-cost
    finish_all(sched, workers, CAPSULES)
    assert sum(len(w.sent) for w in workers) == 4 and not sched.queue  # the other 4 capsules are not run
    assert all(w.shutting_down for w in workers) and sched.tests_finished
