"""Unit tests for process.py: the part each pytest process of a run plays (single process, xdist
controller, xdist worker), chosen once from the config."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from pytest_socialbias import process
from pytest_socialbias.process import (
    SingleProcess,
    XdistController,
    XdistWorker,
    choose,
    xdist_workers,
    xdist_workers_of,
)


def config(dist="no", numprocesses=None, workerinput=None):
    """A stand-in for pytest's config: the two xdist options, and ``workerinput`` only on a
    worker (as xdist sets it)."""
    cfg = SimpleNamespace(option=SimpleNamespace(dist=dist, numprocesses=numprocesses))
    if workerinput is not None:
        cfg.workerinput = workerinput
    return cfg


def batches(**cases):
    """A stand-in CaseRunner holding ``batches`` (batch id -> its cases)."""
    return SimpleNamespace(batches=cases)


@pytest.mark.parametrize("option, expected", [
    (config(), 0), (config(dist="no", numprocesses=4), 0),  # -p no:xdist / -n 0 leaves dist "no"
    (config(dist="load", numprocesses=3), 3), (config(dist="loadscope", numprocesses="3"), 3),
    (config(dist="load", numprocesses=None), 0),
    (config(dist="load", numprocesses="auto"), 1),  # not yet resolved to a count: some workers
])
def test_xdist_workers_reads_dist_and_numprocesses(option, expected):
    assert xdist_workers(option) == expected


def test_choose_gives_each_process_its_role():
    assert type(choose(config())) is SingleProcess
    controller = choose(config(dist="load", numprocesses=2))
    assert type(controller) is XdistController and controller.workers == 2
    # A worker is a worker whatever its own options say (xdist passes the controller's).
    worker = choose(config(dist="load", numprocesses=2, workerinput={"workerid": "gw1", "workercount": 2}))
    assert type(worker) is XdistWorker and worker.process == "gw1" and worker.count == 2


def test_what_each_role_does():
    single, controller, worker = SingleProcess(), XdistController(2), XdistWorker({"workerid": "gw0", "workercount": 2})
    # (aggregates, runs cases, a model problem at collection is a usage error, process name)
    assert (single.aggregates, single.runs_cases, single.usage_errors(), single.process) == (True, True, True, "main")
    assert (controller.aggregates, controller.runs_cases, controller.usage_errors(), controller.process) == (
        True, False, True, "controller")
    assert (worker.aggregates, worker.runs_cases, worker.usage_errors(), worker.process) == (False, True, False, "gw0")
    assert len({single.name, controller.name, worker.name}) == 3


def test_xdist_workers_of_each_role():
    assert xdist_workers_of(SingleProcess()) == 0
    assert xdist_workers_of(XdistController(4)) == 4
    assert xdist_workers_of(XdistWorker({"workerid": "gw2", "workercount": 3})) == 3


def test_run_ids_are_fresh_except_on_a_worker_which_takes_the_controllers():
    ids = {SingleProcess().run_id() for _ in range(3)} | {XdistController(2).run_id()}
    assert len(ids) == 4 and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    worker = XdistWorker({"workerid": "gw0", "workercount": 2, "socialbias_run": "the-controllers-run"})
    assert worker.run_id() == "the-controllers-run"
    assert re.fullmatch(r"[0-9a-f]{32}", XdistWorker({"workerid": "gw0"}).run_id())  # a worker of no socialbias controller


def test_a_worker_without_its_id_in_workerinput_reads_xdists_environment(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "6")
    worker = XdistWorker({})
    assert (worker.process, worker.count) == ("gw5", 6)
    # workerinput wins over the environment (a run nested inside a worker inherits it)
    assert XdistWorker({"workerid": "gw1", "workercount": 2}).process == "gw1"


def test_single_process_starts_every_server_itself():
    assert SingleProcess().server_share(per_worker=False, gpus="0,1") == ("0,1", None)
    assert SingleProcess().server_share(per_worker=True, gpus="0,1") == ("0,1", "main")
    assert SingleProcess().server_share(per_worker=False, gpus=None) == (None, None)


def test_the_controller_starts_shared_servers_and_no_per_worker_one():
    assert XdistController(2).server_share(per_worker=False, gpus="0,1") == ("0,1", None)
    assert XdistController(2).server_share(per_worker=True, gpus="0,1") is None


def test_a_worker_starts_only_its_per_worker_servers_on_its_share_of_the_gpus():
    workers = [XdistWorker({"workerid": f"gw{i}", "workercount": 2}) for i in range(2)]
    assert [w.server_share(per_worker=False, gpus="0,1,2,3") for w in workers] == [None, None]
    assert [w.server_share(per_worker=True, gpus="0,1,2,3") for w in workers] == [("0,1", "gw0"), ("2,3", "gw1")]
    # more workers than GPUs: round robin
    three = [XdistWorker({"workerid": f"gw{i}", "workercount": 3}) for i in range(3)]
    assert [w.server_share(per_worker=True, gpus="0,1") for w in three] == [("0", "gw0"), ("1", "gw1"), ("0", "gw2")]


def test_upcoming_batches_a_single_process_starts_all_a_worker_what_xdist_queued():
    first, second, third = object(), object(), object()
    runner = batches(b0=[first, second], b1=[], b2=[third])
    assert SingleProcess().upcoming(runner) == [first, third]  # the first case of every non-empty batch
    assert XdistController(2).upcoming(runner) == []
    assert XdistWorker({"workerid": "gw0"}).upcoming(runner) == []  # nothing queued known
    assert XdistWorker({"workerid": "gw0"}, queued=lambda: [third]).upcoming(runner) == [third]


def test_every_role_is_a_process_role():
    for role in (SingleProcess(), XdistController(1), XdistWorker({})):
        assert isinstance(role, process.ProcessPart)
    with pytest.raises(TypeError):
        process.ProcessPart()  # abstract: server_share must be said
