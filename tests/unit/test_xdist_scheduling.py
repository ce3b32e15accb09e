"""Unit tests for xdist_scheduling.py: xdist's loadscope with suite batches as scopes, every
batch handed out at the start when the run is all suite cases. Driven the way xdist's
DSession drives a scheduler (add_node, add_node_collection, schedule), with stand-in
worker nodes that record what they were sent."""

from __future__ import annotations

from types import SimpleNamespace

from xdist.scheduler import LoadScopeScheduling

from pytest_socialbias.xdist_scheduling import SuiteBatchScheduling

from ..support.helpers import suite_yaml


class Node:
    """A stand-in xdist WorkerController: the indices it was asked to run, and whether it
    was told to shut down (no more work will come)."""

    def __init__(self, name: str):
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True

    def __repr__(self) -> str:
        return self.gateway.id


def project(root):
    """Two suite files: a.yaml (5 cases, batch_size 2) and b.yaml (3 cases, the default
    batch size); their node ids in collection order."""
    a = [(f"a-{i}", "age", f"Statement {i}.") for i in range(5)]
    b = [(f"b-{i}", "gender", f"Statement {i}.") for i in range(3)]
    (root / "a.yaml").write_text(suite_yaml(a, batch_size=2))
    (root / "b.yaml").write_text(suite_yaml(b))
    return [f"a.yaml::{case_id}" for case_id, _, _ in a] + [f"b.yaml::{case_id}" for case_id, _, _ in b]


def schedule(scheduler_class, root, collection, workers=2, **kwargs):
    config = SimpleNamespace(
        rootpath=root,
        getvalue=lambda name: [f"{workers}*popen"] if name == "tx" else None,
        option=SimpleNamespace(loadscopereorder=True),
    )
    scheduler = scheduler_class(config, **kwargs)
    nodes = [Node(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    return scheduler, nodes


def units(scheduler) -> dict:
    """Node -> {scope: its node ids} as assigned."""
    return {node: {scope: sorted(work) for scope, work in assigned.items()}
            for node, assigned in scheduler.assigned_work.items()}


def test_every_batch_is_a_scope_and_all_are_handed_out_at_once(tmp_path):
    collection = project(tmp_path)
    scheduler, nodes = schedule(SuiteBatchScheduling, tmp_path, collection)
    assigned = units(scheduler)
    scopes = {scope: ids for work in assigned.values() for scope, ids in work.items()}
    assert scopes == {
        "a.yaml::batch-0": ["a.yaml::a-0", "a.yaml::a-1"],
        "a.yaml::batch-1": ["a.yaml::a-2", "a.yaml::a-3"],
        "a.yaml::batch-2": ["a.yaml::a-4"],
        "b.yaml::batch-0": ["b.yaml::b-0", "b.yaml::b-1", "b.yaml::b-2"],
    }
    assert not scheduler.workqueue  # nothing held back for later
    assert all(node.shutting_down for node in nodes)  # each worker has all it will get
    # Every case sent once, to the worker its batch went to.
    assert sorted(i for node in nodes for i in node.sent) == list(range(len(collection)))
    for node in nodes:
        assert sorted(collection[i] for i in node.sent) == sorted(i for ids in assigned[node].values() for i in ids)


def test_each_next_batch_goes_to_the_worker_with_fewest_cases(tmp_path):
    scheduler, nodes = schedule(SuiteBatchScheduling, tmp_path, project(tmp_path))
    assert [len(node.sent) for node in nodes] == [4, 4]  # 8 cases in batches of 3, 2, 2, 1


def test_xdists_own_loadscope_keeps_a_suite_file_on_one_worker(tmp_path):
    """What this scheduler is for: loadscope's scope of a case is its file."""
    scheduler, nodes = schedule(LoadScopeScheduling, tmp_path, project(tmp_path))
    scopes = {scope for work in units(scheduler).values() for scope in work}
    assert scopes == {"a.yaml", "b.yaml"}


def test_the_batch_size_option_overrides_the_suites(tmp_path):
    collection = project(tmp_path)
    scheduler, nodes = schedule(SuiteBatchScheduling, tmp_path, collection, batch_size=1)
    scopes = {scope for work in units(scheduler).values() for scope in work}
    assert len(scopes) == len(collection) and "b.yaml::batch-2" in scopes
    assert not scheduler.workqueue and all(node.shutting_down for node in nodes)


def test_a_run_with_python_tests_too_keeps_loadscopes_pacing(tmp_path):
    collection = project(tmp_path) + ["test_x.py::test_one", "test_x.py::test_two"]
    scheduler, nodes = schedule(SuiteBatchScheduling, tmp_path, collection)
    # Batches are still the suite cases' scopes; the Python tests keep xdist's own.
    assert scheduler._split_scope("a.yaml::a-3") == "a.yaml::batch-1"
    assert scheduler._split_scope("test_x.py::test_two") == "test_x.py"
    assert scheduler.workqueue  # the rest is handed out as workers run low
    assert not any(node.shutting_down for node in nodes)


def test_a_later_schedule_call_only_reschedules(tmp_path):
    """xdist calls schedule() again when a node joins late: the batches are not recut and
    nothing is assigned twice."""
    collection = project(tmp_path)
    scheduler, nodes = schedule(SuiteBatchScheduling, tmp_path, collection)
    before = units(scheduler)
    scheduler.schedule()
    assert units(scheduler) == before
    assert sorted(i for node in nodes for i in node.sent) == list(range(len(collection)))
