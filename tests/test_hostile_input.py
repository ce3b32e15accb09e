"""Hostile input, second round (issue 42): files and specs written to hurt the run.

YAML alias bombs in every file the plugin reads, files a suite names outside the
project or of the wrong kind, ``init`` writing through links, secrets written into
model specs. Each is a usage error naming the place and the fix, before anything runs;
none quotes what it should not.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from .conftest import suite_yaml

#: Anchors a..i, each a list of ten aliases of the one before: ``*i`` stands for 10^9
#: strings. Built from the YAML text, it took 4.3 GB and did not finish in 120 s.
BOMB_ANCHORS = "\n".join(
    ['  a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"  {name}: &{name} [{', '.join([f'*{before}'] * 10)}]" for before, name in zip("abcdefgh", "bcdefghi")]
)
#: The line of the first alias (``*a``, in anchor b's list) in every bomb file below.
FIRST_ALIAS_LINE = 5


def bomb(head: str, tail: str) -> str:
    """A file: ``head`` (two lines), ``bombs:`` with the anchors, then ``tail`` using ``*i``."""
    assert head.count("\n") == 2, "the first alias must fall on FIRST_ALIAS_LINE"
    return f"{head}bombs:\n{BOMB_ANCHORS}\n{tail}"


BOMBS = {
    # kind: (file name, text, loader call run in a subprocess, given the file's path)
    "suite": ("demo.yaml", bomb("socialbias: 1\nsuite: demo\n", "protocol: smoke\ncases: *i\n"),
              "from pytest_socialbias.protocols import load_suite as load; load(path)"),
    "seeds": ("seeds.yaml", bomb("# seeds\n# of a suite\n", "seeds: *i\n"),
              "from pytest_socialbias.protocols.seeds import load_seeds as load; load(path)"),
    "conditions": ("conditions.yaml", bomb("socialbias_conditions: 1\n# roles\n", "roles: *i\n"),
                   "from pytest_socialbias.benevdial.conditions import load_conditions as load; load(path)"),
    "thresholds": ("thresholds.yaml", bomb("# gates\n# of a project\n", "gates: *i\n"),
                   "from pytest_socialbias.gates import load_gates as load; load(path)"),
    "prompt": ("judge_bias.yaml", bomb("name: judge_bias\nversion: 2\n", "user: *i\n"),
               "from pytest_socialbias.prompts import check_folder; check_folder(path.parent, '--socialbias-prompts')"),
}

#: Run in a subprocess held to 1 GB and 60 s, so a loader that expands the bomb fails
#: this test instead of taking the machine down with it.
LOAD_ONE = textwrap.dedent("""
    import resource, sys, time
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    from pytest_socialbias.errors import ConfigError
    path = Path(sys.argv[1])
    start = time.perf_counter()
    try:
        {call}
    except ConfigError as exc:
        print(f"{{time.perf_counter() - start:.3f}}")
        print(exc)
    else:
        print("loaded")
""")


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_a_yaml_alias_bomb_is_refused_in_every_file_the_plugin_reads(tmp_path, kind):
    name, text, call = BOMBS[kind]
    path = tmp_path / name
    path.write_text(text)
    done = subprocess.run([sys.executable, "-c", LOAD_ONE.format(call=call), str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    seconds, message = done.stdout.split("\n", 1)
    assert float(seconds) < 1.0
    assert message.startswith(f"{path}:{FIRST_ALIAS_LINE}: "), message
    assert "YAML alias *a" in message and "write the value out" in message


def test_a_yaml_alias_bomb_in_a_collected_suite_is_a_usage_error_at_once(pytester, keys):
    name, text, _ = BOMBS["suite"]
    pytester.path.joinpath(name).write_text(text)
    result = pytester.runpytest_subprocess(
        name, "--socialbias-dry-run", "--target=openai:t@http://127.0.0.1:9/v1",
        "--judge=openai:j@http://127.0.0.1:9/v1", timeout=60,
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    assert f"{name}:{FIRST_ALIAS_LINE}: suite file uses the YAML alias *a" in result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_yaml_text_with_stars_but_no_alias_still_loads(tmp_path):
    from pytest_socialbias.protocols import load_suite

    path = tmp_path / "demo.yaml"
    path.write_text(suite_yaml([("age-001", "age", "'*Stars* and & ampersands, *a, &b are text here.'")]))
    suite = load_suite(path)
    assert suite.cases[0].statement == "*Stars* and & ampersands, *a, &b are text here."


# --------------------------------------------------------------------------- secrets in specs

PASSWORD = "hunter2-PLANTED-pw"
KEY = "sk-PLANTED-in-a-spec-77c1"


def assert_usage_error_without(result, needles, secrets):
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    for needle in needles:
        assert needle in result.stderr.str(), out
    for secret in secrets:
        assert secret not in out
    assert "Traceback" not in out


@pytest.mark.parametrize("spec, needles", [
    (f"openai:t@http://bob:{PASSWORD}@127.0.0.1:9/v1",
     ["--target=openai:t@http://bob:***@127.0.0.1:9/v1: the base URL carries credentials (bob:***@)",
      "OPENAI_API_KEY"]),
    (f"openai:t@http://127.0.0.1:9/v1,http://bob:{PASSWORD}@127.0.0.2:9/v1",
     ["the base URL carries credentials (bob:***@)"]),
    (f"openai:t@http://127.0.0.1:9/v1?api_key={KEY}&temprature=1",
     ["?api_key=***&temprature=1: parameter api_key= looks like a secret", "OPENAI_API_KEY"]),
    (f"openai:t@http://127.0.0.1:9/v1?temprature=1&Authorization=Bearer {KEY}",
     ["parameter Authorization= looks like a secret"]),
    (f"anthropic:t?x-api-key={KEY}", ["parameter x-api-key= looks like a secret", "ANTHROPIC_API_KEY"]),
    (f"openai:t@http://127.0.0.1:9/v1?access_token={KEY}", ["parameter access_token= looks like a secret"]),
])
def test_a_spec_carrying_a_secret_is_a_usage_error_that_masks_it(pytester, keys, spec, needles):
    pytester.makefile(".yaml", demo=suite_yaml([("age-001", "age", "Plain.")]))
    result = pytester.runpytest("demo.yaml", f"--target={spec}", "--judge=openai:j@http://127.0.0.1:9/v1")
    assert_usage_error_without(result, needles, [PASSWORD, KEY])


def test_credentials_in_the_sdk_base_url_variable_are_refused_masked(pytester, keys, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", f"https://bob:{PASSWORD}@proxy.example/v1")
    pytester.makefile(".yaml", demo=suite_yaml([("age-001", "age", "Plain.")]))
    result = pytester.runpytest("demo.yaml", "--target=openai:gpt-4o-mini", "--judge=openai:j@http://127.0.0.1:9/v1")
    assert_usage_error_without(result, ["OPENAI_BASE_URL carries credentials (bob:***@)"], [PASSWORD])


def test_a_suite_judge_param_named_like_a_secret_is_refused_without_its_value(pytester, keys):
    text = suite_yaml([("age-001", "age", "Plain.")]) + f"judge_params:\n  temperature: 0\n  api_key: {KEY}\n"
    pytester.makefile(".yaml", demo=text)
    result = pytester.runpytest("demo.yaml", "--target=openai:t@http://127.0.0.1:9/v1",
                                "--judge=openai:j@http://127.0.0.1:9/v1", "--socialbias-dry-run")
    assert_usage_error_without(result, ["demo.yaml:12: judge_params: api_key looks like a secret"], [KEY])


def test_parameters_that_only_look_alike_are_no_secrets():
    from pytest_socialbias.models.secrets import secret_param

    assert not any(map(secret_param, ["max_tokens", "stop_token_ids", "skip_special_tokens", "top_k", "logit_bias",
                                      "chat_template_kwargs", "max_completion_tokens", "thinking_budget"]))
    assert all(map(secret_param, ["api_key", "apiKey", "x-api-key", "key", "token", "access_token", "client_secret",
                                  "password", "Authorization", "auth", "bearer", "credentials"]))
