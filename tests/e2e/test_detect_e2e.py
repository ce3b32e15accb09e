"""End-to-end: BenevDial detector mode (judges, ensembles, guards, variants, markers)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_socialbias.testing import FakeServer

from ..support.detectworld import COLD, DIALOGUES, FAIR, WARM, dialogue, metric, world, write_detect_suite
from ..support.helpers import read_report, run_with_report, thresholds_yaml

#: What the ``server`` fixture (tests/conftest.py) plays.
SERVER_SCRIPT = world


@pytest.fixture
def project(pytester, keys):
    write_detect_suite(pytester.path, "[clean, fold, mask, shuffle]")
    return pytester


def run(pytester, server, *args):
    return run_with_report(pytester, "detect.yaml", *args)


def test_one_judge_clean_and_masked(project, server):
    url = server.openai_base_url
    result, report = run(project, server, f"--judge=openai:ja@{url}")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert len(report["cases"]) == 24  # 6 dialogues x 4 variants
    assert server.requests and all(r.model == "ja" for r in server.requests)  # no target, no simulator
    assert metric(report, "accuracy", "judge") == 1.0 and metric(report, "macro_f1", "judge") == 1.0
    assert (metric(report, "tr_ob", "judge"), metric(report, "tr_bb", "judge"), metric(report, "tr_n", "judge")) == (1.0, 1.0, 0.0)
    # Masking the warm cue hides benevolent bias from this judge: TR_BB falls to 0.
    assert metric(report, "tr_bb", "judge", "mask") == 0.0 and metric(report, "gap_ob_bb", "judge", "mask") == 1.0
    assert metric(report, "tr_bb", "judge", "fold") == 1.0
    overall = [m for m in report["metrics"] if m["metric"] == "f1" and m["category"] is None]
    assert len(overall) == 1 and overall[0]["value"] == 1.0  # the primary detector, clean
    conf = {(c["detector"], c["variant"]): c["matrix"] for c in report["detection"]["confusion"]}
    assert conf[("judge", "mask")]["BB"] == {"N": 2}
    markers = {m["marker"]: m for m in report["detection"]["markers"]["detect"]}
    assert markers["exclamation_rate"]["n"] == 2 and markers["agent_turn_length"]["bb_mean"] > 0
    result.stdout.fnmatch_lines(["*detect: detectors*", "*judge*mask*", "*surface markers*"])


def test_the_judge_is_told_both_roles_from_the_conditions_file(project, server):
    """With a conditions file the roles' titles and user labels; without one, the role id
    as the agent's title and "user"."""
    url = server.openai_base_url
    labelled = [dialogue("n-1", "N", FAIR), {**dialogue("n-2", "N", FAIR), "role": "wellbeing", "need": "sleep"}]
    (project.path / "labelled.jsonl").write_text("".join(json.dumps(d) + "\n" for d in labelled))
    run(project, server, f"--judge=openai:ja@{url}")
    without = sorted(r.last_user.split("\n\n")[0] for r in server.requests if r.model == "ja")
    shutil.copy(Path(__file__).resolve().parents[2] / "suites" / "benevdial" / "conditions.yaml", project.path)
    (project.path / "detect.yaml").write_text(
        "socialbias: 1\nsuite: detect\nprotocol: benevdial_detect\ndialogues: labelled.jsonl\nconditions: conditions.yaml\n"
        "variants: [clean]\n"
    )
    server.clear()
    result, _ = run(project, server, f"--judge=openai:ja@{url}")
    assert result.ret == 0, result.stdout.str()[-3000:] + result.stderr.str()
    with_file = sorted(r.last_user.split("\n\n")[0] for r in server.requests if r.model == "ja")
    # four variants of each dialogue in the first run, clean only in the second
    assert set(without) == {"Role of the agent: lifestyle agent\nRole of the user: user",
                            "Role of the agent: wellbeing agent\nRole of the user: user"}
    assert with_file == ["Role of the agent: health and lifestyle advice agent\nRole of the user: user",
                         "Role of the agent: wellbeing support agent\nRole of the user: client"]


def test_ensemble_averages_probabilities_and_votes_without_them(project, server):
    url = server.openai_base_url
    result, report = run(project, server, f"--judge=openai:ja@{url}", f"--judge=openai:jb@{url}")
    case = next(c for c in report["cases"] if c["id"] == "bb-1" and c["variant"] == "clean")
    # ja: B 0.7, N 0.2, O 0.1; jb: N 0.7, O 0.2, B 0.1 -> N 0.45, OB 0.15, BB 0.4 -> N
    assert case["detections"]["ensemble"]["probs"] == {"N": 0.45, "OB": 0.15, "BB": 0.4}
    assert case["detections"]["ensemble"]["class"] == "N"
    assert case["detections"]["ensemble"]["method"] == "probability average"
    assert metric(report, "tr_bb", "judge-1") == 1.0 and metric(report, "tr_bb", "judge-2") == 0.0
    assert report["detection"]["ensemble_methods"] == {"detect": {"probability average": 24}}
    result.stdout.fnmatch_lines(["*ensemble: probability average for 24 dialogue(s)*"])
    # An Anthropic judge gives no probabilities: the ensemble votes (tie -> first judge).
    result, report = run(project, server, f"--judge=openai:ja@{url}", f"--judge=anthropic:jc@{server.anthropic_base_url}")
    case = next(c for c in report["cases"] if c["id"] == "bb-1" and c["variant"] == "clean")
    assert case["detections"]["ensemble"]["method"] == "majority vote"
    assert case["detections"]["ensemble"]["class"] == "BB"


@pytest.mark.parametrize("unit", ["turn", "context", "exchange"])
def test_guard_units_and_guard_only_runs(project, server, unit):
    url = server.openai_base_url
    result, report = run(
        project, server, f"--socialbias-guard=openai:meta-llama/Llama-Guard-3-8B@{url}", f"--socialbias-guard-unit={unit}"
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert metric(report, "tr_ob", "guard") == 1.0 and metric(report, "tr_bb", "guard") == 0.0
    assert metric(report, "gap_ob_bb", "guard") == 1.0
    case = next(c for c in report["cases"] if c["id"] == "ob-1" and c["variant"] == "clean")
    assert case["detections"]["guard"]["unit"] == unit and len(case["detections"]["guard"]["units"]) == 2
    guard_calls = [r for r in server.requests if "guard" in r.model.lower()]
    sizes = {len(r.messages) for r in guard_calls}
    assert sizes == {"turn": {2}, "context": {2, 4}, "exchange": {2}}[unit]


def test_detector_gates(project, server):
    url = server.openai_base_url
    (project.path / "thresholds.yaml").write_text(
        thresholds_yaml(
            {"name": "f1", "suite": "detect", "metric": "f1", "min": 0.8},
            {"name": "bb-masked", "suite": "detect", "metric": "tr_bb", "detector": "judge", "variant": "mask", "min": 0.5},
            {"name": "gap", "suite": "detect", "metric": "gap_ob_bb", "detector": "judge", "max": 0.2},
        )
    )
    result, report = run(project, server, f"--judge=openai:ja@{url}")
    verdicts = {g["gate"]: g["verdict"] for g in report["gates"]}
    assert verdicts == {"f1": "pass", "bb-masked": "fail", "gap": "pass"}
    assert result.ret == 1


def test_bad_dialogue_files_name_the_line(project, server):
    bad = dict(DIALOGUES[0], **{"class": "XB"})
    (project.path / "labelled.jsonl").write_text(json.dumps(DIALOGUES[1]) + "\n" + json.dumps(bad) + "\n")
    result, _ = run(project, server, f"--judge=openai:ja@{server.openai_base_url}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "labelled.jsonl:2: at class: 'XB' is not one of" in result.stderr.str()
    assert server.requests == []


def test_dialogues_option_overrides_the_suite_file(project, server):
    (project.path / "other.jsonl").write_text(json.dumps(DIALOGUES[4]) + "\n")
    result, report = run(project, server, f"--judge=openai:ja@{server.openai_base_url}", "--socialbias-dialogues=other.jsonl")
    assert {c["id"] for c in report["cases"]} == {"bb-1"}


def test_a_generated_dataset_feeds_the_detector_suite(pytester, keys, monkeypatch):
    """generate-benevdial against the fake server, then the detector suite on its output."""
    from pathlib import Path

    from pytest_socialbias import prompts
    from pytest_socialbias.__main__ import main

    extras = prompts.load("benevdial_generate").extras

    def generator(req):
        cls = next(c for c in ("N", "OB", "BB") if extras[f"class_{c}"].strip() in req.prompt_text)
        reply = {"N": FAIR, "OB": COLD, "BB": WARM}[cls]
        return "\n".join(["User: I would like some advice.", f"Agent: {reply}", "User: And then?", f"Agent: {reply}"])

    conditions = Path(__file__).resolve().parents[2] / "suites" / "benevdial" / "conditions.yaml"
    with FakeServer(generator) as gen_server:
        status = main([
            "generate-benevdial", f"--generator=openai:gen@{gen_server.openai_base_url}", "--per-class=4",
            "--turns=2", f"--conditions={conditions}", f"--out={pytester.path / 'gen.jsonl'}",
            f"--cache-dir={pytester.path / 'gencache'}",
        ])
    assert status == 0
    lines = [json.loads(line) for line in (pytester.path / "gen.jsonl").read_text().splitlines()]
    assert sorted(line["class"] for line in lines) == ["BB"] * 4 + ["N"] * 4 + ["OB"] * 4
    (pytester.path / "detect.yaml").write_text(
        "socialbias: 1\nsuite: detect\nprotocol: benevdial_detect\ndialogues: gen.jsonl\nvariants: [clean]\n"
    )
    with FakeServer(world) as server:
        result = pytester.runpytest("detect.yaml", f"--judge=openai:ja@{server.openai_base_url}",
                                    "--socialbias-report=r.json", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()[-2000:]
    report = read_report(pytester.path / "r.json")
    assert len(report["cases"]) == 12
    assert metric(report, "accuracy", "judge") == 1.0 and metric(report, "tr_bb", "judge") == 1.0


def test_paired_comparison_covers_detector_trigger_rates(project, server):
    url = server.openai_base_url
    (project.path / "thresholds.yaml").write_text(
        thresholds_yaml({"name": "bb", "suite": "detect", "metric": "tr_bb", "detector": "judge", "min": 0.5})
    )
    run(project, server, f"--judge=openai:ja@{url}")
    (project.path / "old.json").write_text((project.path / "r.json").read_text())
    result, report = run(project, server, f"--judge=openai:jb@{url}", "--socialbias-baseline=old.json")
    (row,) = [r for r in report["comparison"]["rows"] if r["metric"] == "tr_bb"]
    # Both BB dialogues were flagged by the old judge and missed by the new: a lower
    # trigger rate is worse, P(X <= 0 | Bin(2, 1/2)) = 1/4.
    assert row["discordant"] == [2, 0] and row["p_value"] == pytest.approx(0.25)
    assert (row["baseline"], row["current"]) == (1.0, 0.0)
