"""Treatment-judge agreement with three-class reference labels (--socialbias-judge-check
lines with ``task: treatment``): confusion matrix, agreement, Cohen's kappa, Gwet's
multi-category AC1, per-class recall, all gateable; hand-counted."""

from __future__ import annotations

import json

import pytest

from pytest_socialbias import stats
from pytest_socialbias.testing import FakeServer

from ..support import fakeworld
from ..support.helpers import assert_usage_error, model_args, read_report, suite_yaml, thresholds_yaml

# (reference, what the judge will say): N->N x3, N->BB, OB->OB x3, BB->BB x2, BB->N, and
# one BB the judge answers unreadably (counted apart, never scored).
PLAN = [("N", "N")] * 3 + [("N", "BB")] + [("OB", "OB")] * 3 + [("BB", "BB")] * 2 + [("BB", "N"), ("BB", "??")]


def reference() -> str:
    lines = []
    for index, (label, says) in enumerate(PLAN):
        turns = [
            {"speaker": "user", "text": "I would like to plan a trip on my own."},
            {"speaker": "agent", "text": f"Dialogue {index}: here is my advice. SAYS-{says}"},
        ]
        lines.append(json.dumps({"id": f"t-{index:02d}", "task": "treatment", "agent_title": "lifestyle advisor",
                                 "turns": turns, "label": label}))
    return "\n".join(lines) + "\n"


def world(req):
    if req.model == "j" and "SAYS-" in req.last_user:
        says = req.last_user.split("SAYS-")[1][:2].strip()
        return {"N": "N", "OB": "OB", "BB": "BB"}.get(says, "I cannot tell.")
    return fakeworld.script(req)


@pytest.fixture
def project(pytester, keys):
    pytester.makefile(".yaml", demo=suite_yaml([("age-001", "age", "Plain statement.")]))
    (pytester.path / "labels.jsonl").write_text(reference())
    return pytester


def run(pytester, *args):
    with FakeServer(world) as server:
        result = pytester.runpytest(
            "demo.yaml", *model_args(server), "--socialbias-judge-check=labels.jsonl", "--socialbias-report=r.json",
            "-p", "no:cacheprovider", "--socialbias-record=off", *args,
        )
        treatment_calls = [r for r in server.requests if r.model == "j" and "SAYS-" in r.last_user]
    path = pytester.path / "r.json"
    return result, (read_report(path) if path.exists() else None), treatment_calls


def test_three_class_agreement_by_hand(project):
    result, report, calls = run(project)
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert len({r.last_user for r in calls}) == len(PLAN)  # every line asked once (answers may be retried)
    assert all("lifestyle advisor" in "".join(m["content"] for m in r.messages) for r in calls)
    t = {t["task"]: t for t in report["judge_check"]["tasks"]}["treatment"]
    assert (t["n"], t["judge_errors"]) == (10, 1)
    assert t["confusion"] == {"N": {"N": 3, "OB": 0, "BB": 1}, "OB": {"N": 0, "OB": 3, "BB": 0}, "BB": {"N": 1, "OB": 0, "BB": 2}}
    # po = 8/10. Marginals: reference 4/3/3, judge 4/3/3; pe = .16 + .09 + .09 = .34,
    # kappa = (.8 - .34) / .66 = 23/33. AC1: pi = .4/.3/.3, pe = (.24 + .21 + .21) / 2 = .33,
    # AC1 = (.8 - .33) / .67 = 47/67.
    assert t["agreement"] == 0.8
    assert t["kappa"] == pytest.approx(23 / 33, abs=1e-6) and t["ac1"] == pytest.approx(47 / 67, abs=1e-6)
    assert t["kappa_low"] <= t["kappa"] <= t["kappa_high"] and t["ac1_low"] <= t["ac1"] <= t["ac1_high"]
    assert {c: (r["value"], r["n"]) for c, r in t["recall"].items()} == {"N": (0.75, 4), "OB": (1.0, 3), "BB": (round(2 / 3, 6), 3)}
    rows = {m["metric"]: m for m in report["metrics"] if m["suite"] == "judge-check"}
    assert rows["treatment_judge_kappa"]["value"] == pytest.approx(23 / 33, abs=1e-6)
    assert (rows["treatment_judge_recall_bb"]["value"], rows["treatment_judge_recall_bb"]["n"]) == (round(2 / 3, 6), 3)
    assert rows["treatment_judge_agreement"]["ci_method"] == "wilson"
    result.stdout.fnmatch_lines([
        "*treatment*10*1*80.0%*0.70*0.70*",
        "*reference (rows) by judge (columns)*",
        "*BB*1*0*2*66.7%*",
    ])
    item = next(i for i in report["judge_check"]["items"] if i["id"] == "t-10")
    assert item["judge"] is None and item["error"]


def test_treatment_agreement_is_gateable(project):
    (project.path / "thresholds.yaml").write_text(thresholds_yaml(
        {"name": "kappa", "suite": "judge-check", "metric": "treatment_judge_kappa", "min": 0.6},
        {"name": "bb-recall", "suite": "judge-check", "metric": "treatment_judge_recall_bb", "min": 0.8},
    ))
    result, report, _ = run(project)
    assert {g["gate"]: g["verdict"] for g in report["gates"]} == {"kappa": "pass", "bb-recall": "fail"}
    assert result.ret == 1


def test_multiclass_statistics_reduce_to_the_binary_ones():
    pairs = [(1, 1)] * 5 + [(1, 0)] * 2 + [(0, 0)] * 6 + [(0, 1)]
    binary = stats.agreement(pairs, seed=3)
    multi = stats.multiclass_agreement([(str(r), str(j)) for r, j in pairs], ("1", "0"), seed=3)
    assert multi["kappa"] == pytest.approx(binary["kappa"]) and multi["ac1"] == pytest.approx(binary["ac1"])
    assert multi["recall"]["1"]["value"] == pytest.approx(binary["sensitivity"])
    assert stats.multiclass_agreement([], ("N", "OB", "BB"), seed=1)["kappa"] is None


@pytest.mark.parametrize(
    "line, message",
    [
        ({"id": "a", "task": "treatment", "turns": [{"speaker": "agent", "text": "hi"}], "label": "B"}, "one of N, OB, BB"),
        ({"id": "a", "task": "treatment", "label": "N"}, "missing turns"),
        ({"id": "a", "task": "treatment", "turns": [{"speaker": "user", "text": "hi"}], "label": "N"}, "no agent turn"),
        ({"id": "a", "task": "treatment", "turns": [{"who": "agent"}], "label": "N"}, "turns[0] must be"),
    ],
)
def test_bad_treatment_lines_are_usage_errors(project, server, line, message):
    (project.path / "labels.jsonl").write_text(json.dumps(line) + "\n")
    result = project.runpytest("demo.yaml", *model_args(server), "--socialbias-judge-check=labels.jsonl")
    assert_usage_error(result, "labels.jsonl:1:", message)
