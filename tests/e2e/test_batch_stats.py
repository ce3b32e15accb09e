"""Batch statistics of the in-process models (models/batchstats.py), without torch: a
stand-in provider registered from the project's conftest.py gathers its calls with the
same RowBatcher as hf: and hfcls:, so the report's ``models.ROLE.batching`` and the
summary line are checked for one process, for xdist workers (handed over in
workeroutput), for a replay (nothing decoded) and for shards put back together by
combine. tests/real/test_hf_backend.py checks the same fields on the real hf: backend."""

from __future__ import annotations

import json

import pytest

from pytest_socialbias.__main__ import main
from pytest_socialbias.models import batchstats, providers

from ..support.helpers import read_report, suite_yaml

CASES = [(f"age-00{i}", "age", f"People of group {i} are all the same in every way.") for i in range(1, 5)]

BATCHING_PROVIDER = '''
import asyncio
import re

from pytest_socialbias.models.base import ChatResponse
from pytest_socialbias.models.batcher import RowBatcher
from pytest_socialbias.models.providers import RUNTIME_SETTINGS, Provider, register


class Row:
    def __init__(self, text, loop):
        self.text, self.loop, self.future, self.answer = text, loop, loop.create_future(), None


class Batching:
    """Answers like hf: would (a row per call, gathered by the shared RowBatcher)."""

    base_url = "in-process"

    def __init__(self, spec):
        self.spec = spec
        self.max_batch = int(spec.runtime.get("max_batch", 4))
        wait = float(spec.runtime.get("batch_wait_ms", 50.0)) / 1000.0
        self._batcher = RowBatcher("batching-standin", self.max_batch, wait, self._run)

    def _run(self, rows):
        for row in rows:
            if self.spec.model == "u":  # the simulated user asks about its case's statement
                number = re.search(r"group ([0-9]+)", row.text)
                row.answer = f"Be honest with me, friend {number.group(1) if number else 0}: what do you think?"
            else:
                row.answer = "That is a stereotype; people differ as individuals."

    def batch_stats(self):
        return {**self._batcher.stats(), "device": "cpu", "max_batch": self.max_batch}

    async def complete(self, messages, params, top_logprobs, choices=None, sample=0, **constrain):
        row = Row(" ".join(str(m.get("content")) for m in messages), asyncio.get_running_loop())
        self._batcher.submit(row)
        await row.future
        return ChatResponse(text=row.answer, prompt_tokens=3, completion_tokens=9, model=self.spec.model)

    async def aclose(self):
        self._batcher.close()


register(Provider(name="batching", build=lambda ctx: Batching(ctx.spec), build_early=False,
                  capabilities=frozenset({RUNTIME_SETTINGS}), batch_defaults=(4, 50.0)))
'''


@pytest.fixture
def project(pytester, keys):
    pytester.makeconftest(BATCHING_PROVIDER)
    pytester.makefile(".yaml", demo=suite_yaml(CASES, batch_size=1))
    yield pytester
    providers.unregister("batching")


def args(server, *extra, target="batching:t", report=True):
    return ["demo.yaml", f"--target={target}", f"--judge=openai:j@{server.openai_base_url}", "--user-model=batching:u",
            *(["--socialbias-report=r.json"] if report else []), "-p", "no:cacheprovider", *extra]


def batching_of(project) -> dict:
    return read_report(project.path / "r.json")["models"]["target"]["batching"]


def test_one_process_reports_its_batches_the_window_and_the_cap(project, server):
    result = project.runpytest(*args(server, "--socialbias-concurrency=2", target="batching:t?max_batch=8"))
    assert result.ret == 0, result.stdout.str()[-3000:]
    batching = batching_of(project)
    # One call per case; how they gathered depends on timing, never more than in flight.
    assert batching["rows"] == 4 and 1 <= batching["batches"] <= 4
    assert 1 <= batching["rows_max"] <= 2 and batching["rows_mean"] == round(4 / batching["batches"], 2)
    assert (batching["batch_wait_ms"], batching["max_batch"], batching["max_batch_effective"]) == (50.0, 8, 2)
    assert batching["processes"] == [{"process": "main", "device": "cpu", "batches": batching["batches"],
                                      "rows": 4, "rows_max": batching["rows_max"]}]
    result.stdout.fnmatch_lines([
        "batching target: * batch*, * rows on average (largest *), window 50 ms, cap 2 "
        "(max_batch=8, held to the calls in flight: --socialbias-concurrency); on cpu",
    ])
    # Replayed: nothing is decoded, the settings are still said.
    replay = project.runpytest(*args(server, "--socialbias-record=none"))
    assert replay.ret == 0, replay.stdout.str()[-3000:]
    batching = batching_of(project)
    assert (batching["batches"], batching["rows"], batching["rows_mean"], batching["processes"]) == (0, 0, None, [])
    assert (batching["max_batch"], batching["max_batch_effective"]) == (4, 4)
    replay.stdout.fnmatch_lines(["batching target: no batch decoded in this run (calls replayed or none made), "
                                 "window 50 ms, cap 4"])


def test_xdist_workers_hand_their_batches_to_the_controller(project, server):
    result = project.runpytest_subprocess(*args(server, "-n", "2"))
    assert result.ret == 0, result.stdout.str()[-3000:]
    batching = batching_of(project)
    assert batching["rows"] == 4 and batching["batches"] >= 1
    names = [p["process"] for p in batching["processes"]]
    assert names and set(names) <= {"gw0", "gw1"} and names == sorted(names)
    assert sum(p["rows"] for p in batching["processes"]) == 4 and all(p["device"] == "cpu" for p in batching["processes"])
    result.stdout.fnmatch_lines(["batching target: * batch*, * rows on average (largest *), window 50 ms, cap 4; on cpu*"])


def test_shards_carry_their_batches_into_the_combined_report(project, server, monkeypatch):
    monkeypatch.chdir(project.path)
    parts = []
    for index in (1, 2):
        path = project.path / f"part{index}.json"
        result = project.runpytest(*args(server, f"--socialbias-shard={index}/2", f"--socialbias-partial={path}",
                                         report=False))
        assert result.ret == 0, result.stdout.str()[-3000:]
        parts.append(str(path))
        data = json.loads(path.read_text())
        assert data["batching"]["concurrency"] == 16
        assert [entry["process"] for entry in data["batching"]["processes"]] == ["main"]
    assert main(["combine", *parts, f"--report={project.path / 'comb.json'}", "--baseline=none"]) == 0
    batching = read_report(project.path / "comb.json")["models"]["target"]["batching"]
    assert [p["process"] for p in batching["processes"]] == ["shard1/main", "shard2/main"]
    assert batching["rows"] == 4


def test_roles_on_one_model_share_a_line_and_comparisons_ignore_batches():
    models = {
        "judge": {"provider": "hf", "model": "m", "base_url": None, "params": {}, "runtime": {"batch_wait_ms": 10}},
        "target": {"provider": "hf", "model": "m", "base_url": None, "params": {}, "runtime": {"batch_wait_ms": 10}},
        "user": {"provider": "openai", "model": "u", "base_url": None, "params": {}},
    }
    stats = {"batches": 3, "rows": 10, "rows_max": 6, "device": "cuda:0", "max_batch": 16}
    entries = [
        {"process": "gw1", "concurrency": 8, "roles": {"target": {**stats, "device": "cuda:1", "shared_with": ["judge"]},
                                                        "judge": {**stats, "device": "cuda:1", "shared_with": ["target"]}}},
        {"process": "gw0", "concurrency": 8, "roles": {"target": {**stats, "shared_with": ["judge"]},
                                                        "judge": {**stats, "shared_with": ["target"]}}},
    ]
    batchstats.summarize(models, entries, 8)
    target = models["target"]["batching"]
    assert (target["batches"], target["rows"], target["rows_mean"], target["rows_max"]) == (6, 20, 3.33, 6)
    assert (target["batch_wait_ms"], target["max_batch"], target["max_batch_effective"]) == (10.0, 16, 8)
    assert [p["process"] for p in target["processes"]] == ["gw0", "gw1"] and target["shared_with"] == ["judge"]
    assert "batching" not in models["user"]
    assert batchstats.batching_lines(models) == [
        "hf judge, target (one model): 6 batches, 3.3 rows on average (largest 6), window 10 ms, "
        "cap 8 (max_batch=16, held to the calls in flight: --socialbias-concurrency); on cuda:0 (gw0), cuda:1 (gw1)",
    ]
    from pytest_socialbias.combine import _comparable
    from pytest_socialbias.compare import comparability_warnings

    assert comparability_warnings({"models": {"judge": {**models["judge"], "batching": {}}}}, {"models": models}) == []
    assert "batching" not in _comparable("models", models)["target"]


def test_the_providers_batch_defaults_are_the_backends_own():
    from pytest_socialbias.models import hf_backend, hf_classifier

    assert providers.get("hf").batch_defaults == (hf_backend.DEFAULT_MAX_BATCH, hf_backend.DEFAULT_BATCH_WAIT_MS)
    assert providers.get("hfcls").batch_defaults == (hf_classifier.DEFAULT_MAX_BATCH, hf_classifier.DEFAULT_BATCH_WAIT_MS)
