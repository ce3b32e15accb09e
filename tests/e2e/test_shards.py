"""One run split into shards (--socialbias-shard, --socialbias-partial), combined into the
report a single run writes (python -m pytest_socialbias combine), and the shards' caches
merged for a replay (cache merge). The project mixes a smoke suite compared with a
baseline (McNemar p-values, a no_regression gate that fails) and a detector suite
(Dirichlet bootstrap intervals), so that every kind of number is compared."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_socialbias.__main__ import main
from pytest_socialbias.cache import CallCache, cache_key
from pytest_socialbias.errors import ConfigError
from pytest_socialbias.shards import Shard, assign, parse_shard
from pytest_socialbias.testing import FakeServer

from ..support.detectworld import letter_reply, write_detect_suite
from ..support.helpers import read_report, suite_yaml, thresholds_yaml
from .test_release_e2e import FLIP_CASES
from .test_release_e2e import world as release_world

DETECT_MARKERS = ("WARMNARROW", "COLDNARROW", "Here are three options")


def world(req):
    """The release world (target t2 turns biased on FLIPME seeds), and a judge that also
    classifies the detector suite's dialogues (B for warm narrowing, O for cold, else N)."""
    text = req.last_user or ""
    if req.model == "j" and any(marker in text for marker in DETECT_MARKERS):
        return letter_reply("B" if "WARMNARROW" in text else "O" if "COLDNARROW" in text else "N")
    return release_world(req)


#: What the ``server`` fixture (tests/conftest.py) plays.
SERVER_SCRIPT = world


@pytest.fixture
def project(pytester, keys):
    pytester.makefile(".yaml", demo=suite_yaml(FLIP_CASES, turns=2))
    write_detect_suite(pytester.path, "[clean, fold]")
    pytester.makefile(".yaml", thresholds=thresholds_yaml(
        {"name": "cap", "suite": "demo", "metric": "cumulative_bias@2", "max": 0.9},
        {"name": "no-worse", "suite": "demo", "metric": "cumulative_bias@2", "no_regression": "true", "by": "category"},
        {"name": "f1", "suite": "detect", "metric": "f1", "min": 0.5},
    ))
    return pytester


def models(server, target="t2"):
    url = server.openai_base_url
    return [f"--target=openai:{target}@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}"]


def run(project, server, *extra, target="t2", subprocess=False):
    args = ["demo.yaml", "detect.yaml", *models(server, target), "-p", "no:cacheprovider", *extra]
    return project.runpytest_subprocess(*args) if subprocess else project.runpytest(*args)


def gate_cases(path) -> dict:
    """Gate name -> outcome in a JUnit XML file (cases of thresholds.yaml)."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.get("classname", "").endswith("thresholds.yaml") or case.get("file") == "thresholds.yaml":
            name = case.get("name").split("::")[-1]
            outcome = "failed" if case.find("failure") is not None else "skipped" if case.find("skipped") is not None else "passed"
            out[name] = outcome
    return out


def single_run(project, server, *extra) -> dict:
    """The first release (old.json), then the run under test as one run (one.json)."""
    assert run(project, server, "--socialbias-baseline=none", "--socialbias-report=old.json", *extra, target="t").ret == 0
    result = run(project, server, "--socialbias-baseline=old.json", "--socialbias-report=one.json",
                 "--junitxml=one.xml", *extra)
    assert result.ret == 1, result.stdout.str()[-2000:]  # the no-worse gate fails
    return read_report(project.path / "one.json")


@pytest.fixture
def single(project, server):
    return single_run(project, server)


def shard_files(project, server, total, prefix="part", xdist_shard=None):
    paths = []
    for index in range(1, total + 1):
        path = f"{prefix}{index}of{total}.json"
        extra = ("-n", "2") if index == xdist_shard else ()
        result = run(project, server, f"--socialbias-shard={index}/{total}", f"--socialbias-partial={path}", *extra,
                     subprocess=index == xdist_shard)
        assert result.ret == 0, result.stdout.str()[-2000:]
        result.stdout.fnmatch_lines([f"*shard {index}/{total} (--socialbias-shard): * of the run's 20 case(s)*"])
        paths.append(str(project.path / path))
    return paths


def combine(project, parts, *extra, capsys=None):
    report, junit = project.path / "comb.json", project.path / "comb.xml"
    for stale in (report, junit):
        stale.unlink(missing_ok=True)
    status = main(["combine", *parts, f"--report={report}", f"--junit={junit}", "--baseline",
                   str(project.path / "old.json"), "--thresholds", str(project.path / "thresholds.yaml"), *extra])
    return status, (read_report(report) if report.exists() else None), junit


@pytest.mark.parametrize("total, xdist_shard", [(1, None), (2, 2), (3, None)])
def test_combined_shards_give_the_single_run_report(project, server, single, total, xdist_shard, monkeypatch):
    monkeypatch.chdir(project.path)
    parts = shard_files(project, server, total, xdist_shard=xdist_shard)
    data = [json.loads(Path(p).read_text(encoding="utf-8")) for p in parts]
    counts = [len(d["records"]) for d in data]
    assert sum(counts) == 20 and all(c > 0 for c in counts)
    assert all(d["selection"] == data[0]["selection"] for d in data)
    status, combined, junit = combine(project, list(reversed(parts)))
    assert status == 1  # as the single run: the no-worse gate fails
    assert combined == single  # every metric, interval, p-value, verdict and note
    assert gate_cases(junit) == gate_cases(project.path / "one.xml")
    assert {"cap": "passed", "no-worse": "failed", "f1": "passed"}.items() <= gate_cases(junit).items()


def test_uneven_shards_are_balanced_by_planned_calls_and_combine_exactly(project, server, single, monkeypatch):
    monkeypatch.chdir(project.path)
    parts = shard_files(project, server, 5)
    data = [json.loads(Path(p).read_text(encoding="utf-8")) for p in parts]
    # A smoke case of 2 turns plans 8 calls (user, target, two judges per turn), a detector
    # case 1: 8 x 8 + 12 = 76 calls dealt over 5 shards, heaviest first.
    calls = [sum(u["calls"] for r in d["records"] for u in r["usage"].values()) for d in data]
    assert sum(calls) == 76 and max(calls) - min(calls) <= 8, calls
    assert len({len(d["records"]) for d in data}) > 1  # uneven case counts
    status, combined, _ = combine(project, parts)
    assert status == 1 and combined == single


def test_the_judge_check_is_asked_by_shard_one_and_scored_over_every_record(project, server, monkeypatch):
    monkeypatch.chdir(project.path)
    single_run(project, server, "--socialbias-judge-check=builtin")
    one = read_report(project.path / "one.json")
    assert one["judge_check"]["items"]
    parts = []
    for index in (1, 2):
        result = run(project, server, f"--socialbias-shard={index}/2", f"--socialbias-partial=jc{index}.json",
                     "--socialbias-judge-check=builtin")
        assert result.ret == 0, result.stdout.str()[-2000:]
        parts.append(str(project.path / f"jc{index}.json"))
    data = [json.loads(Path(p).read_text(encoding="utf-8")) for p in parts]
    assert data[0]["judge_check"]["answers"] and data[1]["judge_check"] is None  # asked once
    status, combined, _ = combine(project, parts)
    assert status == 1 and combined == one


def test_combine_says_when_snapshots_went_uncompared(project, server, single, monkeypatch):
    monkeypatch.chdir(project.path)
    parts = shard_files(project, server, 1)
    (project.path / "__snapshots__").mkdir()
    (project.path / "__snapshots__" / "demo.ambr").write_text("# name: _metrics\n")
    status, combined, _ = combine(project, parts)
    assert any(w.startswith("snapshots were not compared: suite(s) demo have syrupy snapshot files")
               for w in combined["warnings"])


def test_an_empty_shard_passes_and_still_combines(project, server, single, monkeypatch):
    monkeypatch.chdir(project.path)
    result = run(project, server, "--socialbias-shard=40/40", "--socialbias-partial=empty.json")
    assert result.ret == 0, result.stdout.str()[-2000:]
    empty = json.loads((project.path / "empty.json").read_text())
    assert empty["records"] == [] and empty["selection"]["cases"] == 20


def test_combine_refuses_parts_of_another_run(project, server, single, monkeypatch, capsys):
    monkeypatch.chdir(project.path)
    parts = shard_files(project, server, 2)
    one, two = (json.loads(Path(p).read_text(encoding="utf-8")) for p in parts)

    def refused(first, second, expected):
        for name, data in (("a.json", first), ("b.json", second)):
            (project.path / name).write_text(json.dumps(data))
        status, report, _ = combine(project, [str(project.path / "a.json"), str(project.path / "b.json")])
        assert status == 2 and report is None
        assert expected in capsys.readouterr().err

    refused(one, {**two, "plugin_version": "0.0.1"}, "written by pytest-socialbias 0.0.1")
    refused(one, {**two, "settings": {**two["settings"], "turns": 5}}, "its settings differ (turns: None in")
    other = {**two["models"], "target": {**two["models"]["target"], "model": "t9"}}
    refused(one, {**two, "models": other}, "its models differ (target:")
    refused(one, one, "shard 1/2 given twice")
    refused(one, {**two, "selection": {**two["selection"], "sha256": "0" * 64}}, "its selected cases differ")
    refused(one, {**two, "records": two["records"] + one["records"][:1]}, "is in two parts")
    refused(one, {**two, "records": two["records"][1:]}, "the parts hold 19 of the run's 20 cases")
    status, _, _ = combine(project, [parts[0]])
    assert status == 2 and "shard(s) 2 of 2 missing" in capsys.readouterr().err
    (project.path / "junk.json").write_text("{}")
    status, _, _ = combine(project, [str(project.path / "junk.json")])
    assert status == 2 and "not a partial file" in capsys.readouterr().err


def test_shard_caches_merge_into_one_that_replays_the_whole_run(project, monkeypatch, capsys):
    monkeypatch.chdir(project.path)
    with FakeServer(world) as live:
        single = single_run(project, live, "--socialbias-record=off")
        for index in (1, 2):
            result = run(project, live, f"--socialbias-shard={index}/2", f"--socialbias-partial=c{index}.json",
                         f"--socialbias-cache-dir=cache{index}")
            assert result.ret == 0
        url = live.openai_base_url
    assert main(["cache", "merge", "cache1", "cache2", "-o", "merged"]) == 0
    out = capsys.readouterr().out
    assert "0 conflict(s)" in out and "cache1: " in out and "cache2: " in out
    # The server is gone: the whole run replays from the merged cache, with no miss.
    result = project.runpytest(
        "demo.yaml", "detect.yaml", f"--target=openai:t2@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}",
        "-p", "no:cacheprovider", "--socialbias-record=none", "--socialbias-cache-dir=merged",
        "--socialbias-baseline=old.json", "--socialbias-report=replayed.json",
    )
    assert result.ret == 1, result.stdout.str()[-2000:]
    assert read_report(project.path / "replayed.json") == single
    status, combined, _ = combine(project, [str(project.path / "c1.json"), str(project.path / "c2.json")])
    assert status == 1 and combined == single


def test_cache_merge_keeps_one_answer_per_key_and_reports_conflicts(tmp_path, capsys):
    def request(text):
        return {"provider": "openai", "model": "m", "messages": [{"role": "user", "content": text}]}

    def answer(text):
        return {"text": text, "finish_reason": "stop", "prompt_tokens": 1, "completion_tokens": 1,
                "logprobs": None, "model": "m"}

    shared = cache_key(request("hi"))
    for name, text in (("a", "first"), ("b", "second"), ("c", "first")):
        cache = CallCache(tmp_path / name, "new")
        cache.put(shared, "judge", request("hi"), answer(text))
        cache.put(cache_key(request(name)), "target", request(name), answer(name))
        cache.close()
    assert main(["cache", "merge", str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c"),
                 "-o", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "1 conflict(s)" in out and "4 entries" in out
    assert f"kept the answer of {tmp_path / 'c'}" in out  # recorded last
    merged = CallCache(tmp_path / "m", "none")
    assert merged.get(shared)["text"] == "first" and merged.get(cache_key(request("b")))["text"] == "b"
    merged.close()
    assert main(["cache", "merge", str(tmp_path / "a"), "-o", str(tmp_path / "m")]) == 2
    assert "a cache is there already" in capsys.readouterr().err


def test_shard_options_are_checked_before_the_run(project, server):
    result = run(project, server, "--socialbias-shard=2/3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--socialbias-shard=2/3: a shard's records must go somewhere: add --socialbias-partial*"])
    result = run(project, server, "--socialbias-shard=4/3", "--socialbias-partial=p.json")
    result.stderr.fnmatch_lines(["*K must be between 1 and N*"])
    result = run(project, server, "--socialbias-shard=1/2", "--socialbias-partial=p.json", "--socialbias-report=r.json")
    result.stderr.fnmatch_lines(["*--socialbias-report with --socialbias-partial: a shard decides and reports nothing*"])


def test_auto_reads_the_schedulers_variables():
    assert parse_shard("2/3") == Shard(2, 3)
    gitlab = parse_shard("auto", {"CI_NODE_INDEX": "2", "CI_NODE_TOTAL": "4"})
    assert (gitlab.index, gitlab.total) == (2, 4) and "GitLab" in gitlab.source
    slurm = parse_shard("auto", {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "5"})
    assert (slurm.index, slurm.total) == (3, 3)
    kubernetes = parse_shard("auto/5", {"JOB_COMPLETION_INDEX": "0"})
    assert (kubernetes.index, kubernetes.total) == (1, 5)
    assert parse_shard("auto", {"SOCIALBIAS_SHARD": "3/3"}) == Shard(3, 3, "SOCIALBIAS_SHARD")
    for raw, environ, message in (
        ("auto", {"JOB_COMPLETION_INDEX": "1"}, "gives no shard count; pass --socialbias-shard=auto/N"),
        ("auto", {}, "no shard index in the environment"),
        ("0/3", {}, "K must be between 1 and N"),
        ("two", {}, "expected K/N"),
        ("auto/3", {"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "4"}, "says 4 shards, the option 3"),
    ):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("/", "/")):
            parse_shard(raw, environ)


def test_the_deal_depends_only_on_ids_and_weights():
    weights = {f"s::c{i:02d}": (i % 4) + 1 for i in range(30)}
    dealt = assign(weights, 4)
    assert assign(dict(reversed(list(weights.items()))), 4) == dealt
    loads = [sum(w for k, w in weights.items() if dealt[k] == shard) for shard in (1, 2, 3, 4)]
    assert max(loads) - min(loads) <= max(weights.values())
    assert set(dealt.values()) == {1, 2, 3, 4}



def test_shards_of_a_subset_combine_into_a_partial_run_as_the_single_run(project, server, monkeypatch):
    """-k on every shard: the combined report is PARTIAL with the single run's reasons and
    fails (it passed as a whole run before: combine did not know of the selection)."""
    monkeypatch.chdir(project.path)
    assert run(project, server, "--socialbias-baseline=none", "--socialbias-report=old.json", target="t").ret == 0
    one = run(project, server, "-k", "age", "--socialbias-baseline=old.json", "--socialbias-report=one.json")
    single = read_report(project.path / "one.json")
    assert one.ret == 1 and single["summary"]["partial"] is True
    parts = []
    for index in (1, 2):
        path = f"k{index}.json"
        result = run(project, server, "-k", "age", f"--socialbias-shard={index}/2", f"--socialbias-partial={path}")
        assert result.ret == 0, result.stdout.str()[-2000:]  # a shard decides no gate
        parts.append(str(project.path / path))
    status, combined, _ = combine(project, parts)
    assert status == 1
    assert combined["summary"]["partial"] is True and not combined["summary"]["partial_allowed"]
    assert combined["summary"]["partial_reasons"] == single["summary"]["partial_reasons"]
    assert "-k 'age'" in combined["summary"]["partial_reasons"][0]


def test_every_setting_that_changes_suite_loading_must_be_shared_by_the_shards():
    """What the options override in suite files (SuiteOverrides) changes the cases and their
    records, so shards that differ in any of it are not one run."""
    import dataclasses

    from pytest_socialbias.cases import SuiteOverrides
    from pytest_socialbias.shards import RESULT_SETTINGS

    overridden = {f.name for f in dataclasses.fields(SuiteOverrides)} - {"root"}
    assert overridden <= set(RESULT_SETTINGS), overridden - set(RESULT_SETTINGS)
