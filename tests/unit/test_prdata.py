"""pr-data: what the CI record job of pull requests takes from a pull request (its suites
and gates as data, its plain model specs and plugin pin) and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_socialbias.__main__ import main
from pytest_socialbias.errors import ConfigError
from pytest_socialbias.prdata import take


def _tree(root: Path, files: dict) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


BASE_ENV = {"TARGET": "openai:m@http://proxy.internal/v1", "JUDGE": "openai:gpt-4o-mini", "SOCIALBIAS_VERSION": "0.1.0"}


def test_takes_the_data_and_replaces_the_base_s(tmp_path):
    base = _tree(tmp_path / "base", {"suites/old.yaml": "old", "thresholds.yaml": "gates: []\n",
                                     "pytest.ini": "[pytest]\n", "conftest.py": "# the base's, trusted\n"})
    pr = _tree(tmp_path / "pr", {"suites/new.yaml": "new", "suites/data/seeds.jsonl": "{}\n",
                                 "pytest.ini": "[pytest]\naddopts = --target=openai:x@https://elsewhere\n"})
    said, values = take(pr, base, ["suites", "thresholds.yaml"], environ=BASE_ENV)
    assert sorted(p.relative_to(base).as_posix() for p in (base / "suites").rglob("*") if p.is_file()) == [
        "suites/data/seeds.jsonl", "suites/new.yaml"]
    assert not (base / "thresholds.yaml").exists()  # the pull request removes it
    assert (base / "pytest.ini").read_text() == "[pytest]\n"  # never the pull request's
    assert values == {} and "suites/: 2 file(s) from the pull request" in said


def test_refuses_code_links_and_other_files_naming_each_before_copying(tmp_path):
    base = _tree(tmp_path / "base", {"suites/old.yaml": "old"})
    pr = _tree(tmp_path / "pr", {"suites/ok.yaml": "x", "suites/conftest.py": "import os", "suites/sub/test_x.py": "",
                                 "suites/run.sh": "", "thresholds.yaml": "gates: []\n"})
    (pr / "suites" / "seeds.yaml").symlink_to("/etc/passwd")
    (pr / "suites" / "linked").symlink_to(tmp_path / "base")
    with pytest.raises(ConfigError) as info:
        take(pr, base, ["suites", "thresholds.yaml"], environ=BASE_ENV)
    message = str(info.value)
    for shown in ("suites/conftest.py (a .py file, not data)", "suites/sub/test_x.py (a .py file, not data)",
                  "suites/run.sh (a .sh file, not data)", "suites/seeds.yaml (a symbolic link, to /etc/passwd)",
                  "suites/linked (a symbolic link"):
        assert shown in message
    assert "suites/ok.yaml" not in message and "thresholds.yaml (" not in message
    assert "remove these from the pull request" in message
    assert (base / "suites" / "old.yaml").read_text() == "old"  # nothing copied


@pytest.mark.parametrize("path", ["../elsewhere", "/etc", "suites/../../x"])
def test_paths_stay_inside_the_checkouts(tmp_path, path):
    with pytest.raises(ConfigError, match="name a path inside the checkout"):
        take(_tree(tmp_path / "pr", {"a.yaml": ""}), tmp_path, [path], environ=BASE_ENV)


def test_pipeline_values_plain_ones_taken_others_refused(tmp_path):
    workflow = ".github/workflows/socialbias.yml"
    pr = _tree(tmp_path / "pr", {"suites/a.yaml": "", workflow: (
        "env:\n  SOCIALBIAS_VERSION: \"0.2.0\"\n  TARGET: anthropic:claude-sonnet-4-5\n"
        "  JUDGE: openai:gpt-4o-mini\n")})
    base = tmp_path / "base"
    base.mkdir()
    _, values = take(pr, base, ["suites"], [workflow], environ=BASE_ENV)
    assert values == {"SOCIALBIAS_VERSION": "0.2.0", "TARGET": "anthropic:claude-sonnet-4-5"}  # JUDGE unchanged

    # A base URL, parameters or a version that is not a release: refused, each named.
    (pr / workflow).write_text("env:\n  TARGET: openai:m@https://collector.example/v1\n"
                               "  JUDGE: \"openai:j?temperature=0\"\n  SOCIALBIAS_VERSION: \"0.2.0 evil\"\n")
    with pytest.raises(ConfigError) as info:
        take(pr, base, ["suites"], [workflow], environ=BASE_ENV)
    message = str(info.value)
    assert "TARGET: 'openai:m@https://collector.example/v1' is not openai:MODEL or anthropic:MODEL" in message
    assert "JUDGE: 'openai:j?temperature=0'" in message
    assert "SOCIALBIAS_VERSION: '0.2.0 evil' is not a release version" in message

    # The base's own spec (a base URL included) is kept as it is.
    (pr / workflow).write_text(f"env:\n  TARGET: \"{BASE_ENV['TARGET']}\"\n")
    assert take(pr, base, ["suites"], [workflow], environ=BASE_ENV)[1] == {}


def test_command_writes_the_values_the_record_uses(tmp_path, monkeypatch, capsys):
    pr = _tree(tmp_path / "pr", {"suites/a.yaml": "", ".gitlab-ci.yml": "variables:\n  TARGET: openai:gpt-5\n"})
    base = tmp_path / "base"
    base.mkdir()
    for name, value in BASE_ENV.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "out.env"
    assert main(["pr-data", str(pr), "--into", str(base), "--paths", "suites",
                 "--pipeline", ".gitlab/socialbias.gitlab-ci.yml", ".gitlab-ci.yml", "--output", str(out)]) == 0
    assert out.read_text().splitlines() == ["TARGET=openai:gpt-5", f"JUDGE={BASE_ENV['JUDGE']}",
                                            "SOCIALBIAS_VERSION=0.1.0"]
    assert "TARGET=openai:gpt-5 (the pull request's pipeline)" in capsys.readouterr().out
    (pr / "suites" / "x.py").write_text("")
    assert main(["pr-data", str(pr), "--into", str(base), "--paths", "suites"]) == 2
    assert "suites/x.py (a .py file, not data)" in capsys.readouterr().err
