"""Unit tests for modelset.py: the run's models by role. Specs parsed and checked (every
role's missing key in one message, classifier heads only as detectors, a guard's kind),
which role's spec a role falls back to, the endpoint checks' fixed order, the lines a dry
run prints, and the Model objects built for each role. Nothing is called."""

from __future__ import annotations

import pytest

from pytest_socialbias.errors import ConfigError
from pytest_socialbias.judges.binary import JUDGE_PARAMS, YES_NO
from pytest_socialbias.modelset import CONVERSATION_DEFAULTS, ROLE_ORDER, ModelSet, endpoint_check, role_of
from pytest_socialbias.options import Settings

GUARD = "openai:meta-llama/Llama-Guard-3-8B"


@pytest.fixture
def no_keys(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


def model_set(**options) -> ModelSet:
    models = ModelSet(Settings(**{"record": "off", **options}))
    return models


def test_roles_their_options_and_defaults():
    assert ROLE_ORDER == ("target", "judge", "user", "guard")
    assert [role_of(r).option for r in ROLE_ORDER] == ["--target", "--judge", "--user-model", "--socialbias-guard"]
    assert role_of("judge-3").option == "--judge"  # every extra judge is another --judge
    # The conversation roles decode as the protocols specify; judges and guards per call.
    assert role_of("target").defaults == role_of("user").defaults == CONVERSATION_DEFAULTS
    assert dict(CONVERSATION_DEFAULTS) == {"max_tokens": 250, "temperature": 0.7}
    assert role_of("judge").defaults == role_of("guard").defaults == role_of("judge-2").defaults == ()


def test_endpoint_checks_run_in_one_fixed_order_with_each_roles_parameters():
    roles = ["guard", "judge-10", "user", "judge-2", "target", "judge"]
    assert sorted(roles, key=lambda r: endpoint_check(r).order) == ["target", "judge", "judge-2", "judge-10", "user",
                                                                     "guard"]
    judge = endpoint_check("judge-2")
    assert (dict(judge.params), judge.choices, judge.adaptive_budget) == (JUDGE_PARAMS, YES_NO, True)
    target = endpoint_check("target")
    assert (target.params, target.choices, target.adaptive_budget) == ((), None, False)
    assert dict(endpoint_check("guard", "llama-guard-3").params)["temperature"] == 0.0
    assert endpoint_check("guard", "llama-guard-3").adaptive_budget


def test_the_user_simulator_is_the_judges_model_unless_named(keys):
    models = model_set(target="openai:t", judges=("openai:j",))
    assert {role: str(spec) for role, spec in models.specs.items()} == {
        "target": "openai:t", "judge": "openai:j", "user": "openai:j"}
    assert str(model_set(target="openai:t", judges=("openai:j",), user="anthropic:u").specs["user"]) == "anthropic:u"


def test_every_missing_key_is_named_in_one_message(no_keys):
    with pytest.raises(ConfigError) as raised:
        model_set(target="openai:t", judges=("anthropic:j",), guard=GUARD)
    text = str(raised.value)
    assert text.startswith("3 model options cannot be used:\n")
    for needle in ("--target=openai:t: no API key", "--judge=anthropic:j: no API key: set the environment variable "
                   "ANTHROPIC_API_KEY", f"--socialbias-guard={GUARD}: no API key"):
        assert needle in text
    # --judge stands for the user simulator too: its problem is said once.
    with pytest.raises(ConfigError) as one:
        model_set(target="anthropic:t", judges=("openai:j",), record="off")
    assert str(one.value).startswith("2 model options") and str(one.value).count("--judge=openai:j") == 1


def test_a_single_problem_is_said_alone(no_keys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(ConfigError, match=r"^--judge=anthropic:j: no API key"):
        model_set(target="openai:t", judges=("anthropic:j",))


@pytest.mark.parametrize("options", [{"record": "none"}, {"dry_run": True}])
def test_a_replay_or_a_dry_run_needs_no_key(no_keys, options):
    models = model_set(target="openai:t", judges=("anthropic:j",), **options)
    assert set(models.specs) == {"target", "judge", "user"}


def test_a_classifier_head_is_only_ever_a_detector(keys):
    with pytest.raises(ConfigError, match=r"--judge=hfcls:/x: hfcls: is a classifier head.*--socialbias-guard=hfcls:/x"):
        model_set(target="openai:t", judges=("hfcls:/x",))


def test_a_guards_kind_comes_from_its_model_name_or_the_option(keys):
    assert model_set(target="openai:t", judges=("openai:j",), guard=GUARD).guard_kind == "llama-guard-3"
    named = model_set(target="openai:t", judges=("openai:j",), guard="openai:mine", guard_kind="shieldgemma")
    assert named.guard_kind == "shieldgemma"
    with pytest.raises(ConfigError, match=r"--socialbias-guard=openai:mine: cannot tell the guard's output format.*"
                                          r"pass --socialbias-guard-kind \(one of .*llama-guard-3"):
        model_set(target="openai:t", judges=("openai:j",), guard="openai:mine")
    with pytest.raises(ConfigError, match=r"--socialbias-guard-kind=classifier is the kind of classifier heads"):
        model_set(target="openai:t", judges=("openai:j",), guard=GUARD, guard_kind="classifier")


def test_a_judge_that_is_the_target_is_warned_about(keys):
    assert model_set(target="openai:t", judges=("openai:j",)).warnings == []
    (warning,) = model_set(target="openai:same", judges=("openai:same",)).warnings
    assert warning.startswith("the judge is the target model (openai:same)")


def test_missing_roles_follow_what_the_collected_protocols_need(keys):
    nothing = model_set()
    assert nothing.uses_local_default  # no model option: every role would run the embedded model
    assert nothing.missing_roles() == ["--target", "--judge"]
    guard_only = model_set(guard=GUARD)
    assert not guard_only.uses_local_default
    assert guard_only.missing_roles(["benevdial_detect"]) == []  # a detector suite needs a judge or a guard
    assert guard_only.missing_roles(["smoke"]) == ["--target", "--judge"]


def test_the_models_line_names_each_roles_spec_in_role_order(keys):
    models = model_set(target="openai:t", judges=("openai:j", "openai:k"), guard=GUARD)
    assert models.models_line() == (f"models a real run would use: target openai:t, judge openai:j, judge-2 openai:k, "
                                    f"user simulator openai:j, guard {GUARD}")
    assert model_set().models_line() == "models: none given; a real run needs --target and --judge (or the `local` extra)"


def test_without_the_local_extra_a_plan_uses_placeholders_and_a_real_run_stops(monkeypatch):
    from pytest_socialbias.models import local_backend

    monkeypatch.setattr(local_backend, "RUNTIME_MODULE", "llama_cpp_not_installed_here")
    with pytest.raises(ConfigError, match=r"(?s)no model options given, so suite cases run on the embedded local model, "
                                          r"but it is not available \(.*llama-cpp-python"):
        model_set().use_local_default()
    models = model_set(dry_run=True)
    models.use_local_default(plan_only=True)
    assert set(models.specs) == {"target", "judge", "user"} and len(models.placeholders) == 1
    line = models.models_line()
    assert "which is not installed here (the local backend needs llama-cpp-python" in line
    assert "\n" not in line and line.count("llama-cpp-python") == 1  # one line: the three roles' reason said once


def test_extra_judges_are_numbered_in_the_order_given(keys):
    judges = tuple(f"openai:j{i}" for i in range(1, 12))
    models = model_set(target="openai:t", judges=judges)
    assert models.extra_judge_roles == [f"judge-{i}" for i in range(2, 12)]  # judge-10 after judge-9
    assert [str(judge.spec) for judge in models.roles().extra_judges] == [f"openai:j{i}" for i in range(2, 12)]


def test_models_are_built_once_per_role_with_their_option_and_defaults(keys):
    models = model_set(target="openai:t", judges=("openai:j",), guard=GUARD, guard_policy="end", system_prompt="Be brief.")
    try:
        roles = models.roles()
        assert models.model("target") is roles.target and models.model("judge") is roles.judge
        assert (roles.target.option, roles.target.defaults) == ("--target", dict(CONVERSATION_DEFAULTS))
        assert (roles.judge.option, roles.judge.defaults) == ("--judge", {})
        assert (roles.user.option, str(roles.user.spec)) == ("--user-model", "openai:j")
        assert (roles.guard.kind, roles.guard.policy, roles.guard.model.role) == ("llama-guard-3", "end", "guard")
        assert roles.system_prompt == "Be brief." and roles.extra_judges == []
        assert len({id(model.pool) for model in (roles.target, roles.judge, roles.user)}) == 1  # one pool
        assert models.pool.cache is None  # --socialbias-record=off: no cache
    finally:
        models.close()


def test_the_first_model_asked_for_builds_every_roles_so_their_endpoint_is_checked_together(keys):
    url = "http://127.0.0.1:9/v1"  # never called
    models = model_set(target=f"openai:t@{url}", judges=(f"openai:j@{url}",))
    try:
        models.model("user")
        # endpoint -> {role: model}: what the endpoint checks (models/client.py) run over
        checked = models.pool._checks
        assert sorted(role for roles in checked.values() for role in roles) == ["judge", "target", "user"]
    finally:
        models.close()


def test_a_role_nobody_gave_is_none_and_asking_for_its_model_names_the_option(keys):
    models = model_set(judges=("openai:j",))
    roles = models.roles()
    assert roles.target is None and roles.guard is None and roles.judge is not None
    with pytest.raises(ConfigError, match=r"no model for the target role: pass --target=PROVIDER:MODEL"):
        models.model("target")
    models.close()


def test_the_reports_spec_dicts_add_what_the_run_did_with_each_role(keys):
    models = model_set(target="openai:t", judges=("openai:j",), guard=GUARD, simulator_check="judge")
    specs = models.spec_dicts()
    assert list(specs) == ["guard", "judge", "target", "user"]
    assert (specs["guard"]["kind"], specs["guard"]["policy"]) == ("llama-guard-3", "follow")
    assert specs["user"]["check"] == "judge" and "check" not in specs["judge"]
    assert "check" not in model_set(target="openai:t", judges=("openai:j",)).spec_dicts()["user"]


def test_api_models_need_no_server_and_a_dry_run_starts_none(keys, tmp_path):
    models = model_set(target="openai:t", judges=("openai:j",), cache_dir=tmp_path)
    assert models.server_plans() == {} and models.missing_servers() == []
    models.start_servers()
    assert models.servers is None
    models.close()


def test_the_pool_records_into_the_cache_folder_unless_recording_is_off(keys, tmp_path):
    models = model_set(target="openai:t", judges=("openai:j",), record="new", cache_dir=tmp_path / "cache",
                       concurrency=3)
    try:
        assert models.pool is models.pool  # one per process
        assert models.pool.cache is not None and (tmp_path / "cache").is_dir()
    finally:
        models.close()


def test_a_run_id_comes_from_the_process_part():
    class Part:
        def run_id(self):
            return "the-controllers-run"

    assert ModelSet(Settings(dry_run=True), part=Part()).run_id == "the-controllers-run"
    assert len(ModelSet(Settings(dry_run=True)).run_id) == 32  # a single process makes its own


def test_the_endpoints_checked_ahead_are_those_the_selected_protocols_need(keys):
    """A detector run checks no target ahead (its cases never call one); a dialogue run
    checks the target's and the judge's endpoints with the first call's."""
    models = model_set(target="openai:t", judges=("openai:j",))
    models.set_check_ahead({"benevdial_detect"})
    assert models.pool.check_ahead == frozenset({"judge", "guard"})
    models.set_check_ahead({"dymt", "benevdial_detect"})  # set on the pool already built
    assert models.pool.check_ahead == frozenset({"target", "judge", "guard"})
    assert model_set(target="openai:t", judges=("openai:j",)).pool.check_ahead == frozenset()  # none before collection
