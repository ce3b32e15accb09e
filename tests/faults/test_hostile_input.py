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
from pathlib import Path

import pytest

from ..support.helpers import suite_yaml

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


# --------------------------------------------------------------------------- files outside the project

SHADOW = "root:$6$PLANTEDhash$abcdef:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"


def seeds_suite(seeds: str) -> str:
    return f"socialbias: 1\nsuite: z\nprotocol: zeroshot\nseeds: {seeds}\n"


def run_dry(pytester, *files, extra=()):
    return pytester.runpytest(*files, "--target=openai:t@http://127.0.0.1:9/v1",
                              "--judge=openai:j@http://127.0.0.1:9/v1", "--socialbias-dry-run", "-p", "no:cacheprovider",
                              *extra)


@pytest.fixture
def outside(pytester, tmp_path_factory):
    """A folder beside the project (pytester's rootdir) holding a seeds file and a
    shadow-like file."""
    folder = tmp_path_factory.mktemp("outside")
    (folder / "seeds.yaml").write_text("seeds:\n  - {id: age-001, category: age, group: g, statement: s}\n")
    (folder / "shadow").write_text(SHADOW)
    pytester.makeini("[pytest]\n")  # the project root
    return folder


def test_a_suite_naming_a_file_outside_the_rootdir_is_a_usage_error(pytester, keys, outside):
    relative = Path(*[".."] * len(pytester.path.relative_to(outside.parent).parts), outside.name, "seeds.yaml")
    pytester.makefile(".yaml", relative=seeds_suite(str(relative)), absolute=seeds_suite(str(outside / "shadow")))
    for name, shown in (("relative.yaml", str(relative)), ("absolute.yaml", str(outside / "shadow"))):
        result = run_dry(pytester, name)
        out = result.stdout.str() + result.stderr.str()
        assert result.ret == pytest.ExitCode.USAGE_ERROR, out
        assert f"{name}:4: seeds file {shown!r} lies outside the project ({pytester.path})" in out, out
        assert "--socialbias-allow-outside-files" in out and "PLANTED" not in out and "daemon" not in out


def test_a_link_inside_the_project_to_a_file_outside_it_is_outside_too(pytester, keys, outside):
    (pytester.path / "seeds.yaml").symlink_to(outside / "seeds.yaml")
    pytester.makefile(".yaml", demo=seeds_suite("seeds.yaml"))
    result = run_dry(pytester, "demo.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "demo.yaml:4: seeds file 'seeds.yaml' lies outside the project" in result.stderr.str()


def test_the_option_lets_a_suite_name_files_elsewhere_and_the_wrong_kind_is_refused_unquoted(pytester, keys, outside):
    pytester.makefile(".yaml", good=seeds_suite(str(outside / "seeds.yaml")), shadow=seeds_suite(str(outside / "shadow")))
    allowed = run_dry(pytester, "good.yaml", extra=["--socialbias-allow-outside-files"])
    assert allowed.ret == 0, allowed.stdout.str() + allowed.stderr.str()
    refused = run_dry(pytester, "shadow.yaml", extra=["--socialbias-allow-outside-files"])
    out = refused.stdout.str() + refused.stderr.str()
    assert refused.ret == pytest.ExitCode.USAGE_ERROR, out
    assert f"{outside / 'shadow'}: not a seeds file: it has none of the top-level keys seeds (its content is not shown)" in out
    assert "PLANTED" not in out and "daemon" not in out and "root:" not in out


def test_a_detector_suite_names_its_dialogues_cues_and_prompts_inside_the_project(pytester, keys, outside):
    shipped = Path(__file__).resolve().parents[2] / "suites" / "benevdial-detect" / "detect.yaml"
    text = shipped.read_text().replace("../benevdial/dialogues.jsonl", str(outside / "shadow"))
    pytester.makefile(".yaml", detect=text)
    result = run_dry(pytester, "detect.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"dialogues file {str(outside / 'shadow')!r} lies outside the project" in result.stderr.str()
    pytester.makefile(".yaml", prompts=suite_yaml([("age-001", "age", "Plain.")]) + f"prompts: {outside}\n")
    result = run_dry(pytester, "prompts.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"the prompts folder {str(outside)!r} lies outside the project" in result.stderr.str()


# --------------------------------------------------------------------------- init and links


def init(directory: Path) -> int:
    from types import SimpleNamespace

    from pytest_socialbias.starter import run

    return run(SimpleNamespace(directory=directory, suites=["smoke"], ci="both", force=False, list_suites=False))


@pytest.mark.parametrize("link, to", [
    ("README.md", "outside/planted-readme"),  # dangling: it would create the file it points to
    (".gitignore", "outside/gitignore"),  # an existing file elsewhere, appended to
    ("suites", "outside"),  # a folder elsewhere, written into
])
def test_init_writes_nothing_through_a_link(tmp_path, link, to):
    from pytest_socialbias.errors import ConfigError

    project, elsewhere = tmp_path / "proj", tmp_path / "outside"
    project.mkdir()
    elsewhere.mkdir()
    (elsewhere / "gitignore").write_text("mine\n")
    (project / link).symlink_to(tmp_path / to)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(ConfigError, match=rf"init {project}: {link} is a symbolic link \(to {tmp_path / to}\); init "
                                          "writes nothing through a link"):
        init(project)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written anywhere
    assert (elsewhere / "gitignore").read_text() == "mine\n"
