"""docs/ci/: the GitHub Actions and GitLab CI release-gate pipelines users copy.

Both files are parsed as YAML, their pytest commands are read out of the record and the
replay job, and those very commands run (through bash, with the pipeline's variables)
against the loopback fake server: record, then replay with the server stopped (no request
may be sent), then a replay of a changed suite, which must fail loudly on the cache miss.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pytest_socialbias.testing import FakeServer

from . import fakeworld
from .conftest import suite_yaml, thresholds_yaml

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / "docs" / "ci"
pytestmark = pytest.mark.slow


def _pytest_lines(script) -> list[str]:
    lines = script.splitlines() if isinstance(script, str) else list(script)
    return [line.strip() for line in lines if line.strip().startswith("pytest ")]


def github_commands() -> tuple[dict, str, str]:
    data = yaml.safe_load((CI / "github-actions.yml").read_text(encoding="utf-8"))
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {"schedule", "pull_request"} <= set(triggers)
    jobs = data["jobs"]
    record = [c for step in jobs["record"]["steps"] for c in _pytest_lines(step.get("run", ""))]
    replay = [c for step in jobs["replay"]["steps"] for c in _pytest_lines(step.get("run", ""))]
    assert len(record) == 1 and len(replay) == 1
    secret_steps = [step for step in jobs["record"]["steps"] if "OPENAI_API_KEY" in (step.get("env") or {})]
    assert secret_steps and "secrets.OPENAI_API_KEY" in secret_steps[0]["env"]["OPENAI_API_KEY"]
    assert not any("OPENAI_API_KEY" in str(step) for step in jobs["replay"]["steps"]), "replay needs no key"
    uploads = [s for s in jobs["replay"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["if"] == "always()"
    return data["env"], record[0], replay[0]


def gitlab_commands() -> tuple[dict, str, str]:
    data = yaml.safe_load((CI / "gitlab-ci.yml").read_text(encoding="utf-8"))
    record, replay = data["socialbias-record"], data["socialbias-replay"]
    assert record["cache"]["policy"] == "pull-push" and replay["cache"]["policy"] == "pull"
    assert data[".socialbias"]["artifacts"]["reports"]["junit"] == "reports/junit.xml"
    assert data[".socialbias"]["artifacts"]["when"] == "always"
    return data["variables"], _pytest_lines(record["script"])[0], _pytest_lines(replay["script"])[0]


@pytest.mark.parametrize("read", [github_commands, gitlab_commands], ids=["github", "gitlab"])
def test_pipeline_files_state_the_recipe(read):
    variables, record, replay = read()
    assert {"TARGET", "JUDGE", "BASELINE"} <= set(variables)
    assert '--socialbias-baseline="$BASELINE"' in record  # no_regression gates run in CI as written
    assert "--socialbias-record=new" in record and "--socialbias-record=none" in replay
    assert record.replace("--socialbias-record=new", "--socialbias-record=none") == replay
    for option in ("--junitxml=", "--socialbias-report=", "--socialbias-html=", "-n "):
        assert option in replay


def _run(command: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("read", [github_commands, gitlab_commands], ids=["github", "gitlab"])
def test_pipeline_commands_record_then_replay(tmp_path, read):
    _, record, replay = read()
    suites = tmp_path / "suites"
    suites.mkdir()
    cases = [("age-001", "age", "Plain statement."), ("gender-001", "gender", "BIASME statement.")]
    (suites / "demo.yaml").write_text(suite_yaml(cases, turns=2), encoding="utf-8")
    (tmp_path / "thresholds.yaml").write_text(
        thresholds_yaml({"name": "demo-bias", "suite": "demo", "metric": "cumulative_bias@2", "max": 0.9}),
        encoding="utf-8",
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PYTEST_"))}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    with FakeServer(fakeworld.script) as server:
        # The pipeline's own variables, pointed at the fake server the way a user points
        # the SDK at a proxy: OPENAI_BASE_URL, honoured by the openai SDK.
        env = {**base, "TARGET": "openai:t", "JUDGE": "openai:j", "OPENAI_BASE_URL": server.openai_base_url,
               "OPENAI_API_KEY": "sk-test-record-job", "BASELINE": "none"}
        done = _run(record, tmp_path, env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        recorded = server.request_count
        assert recorded > 0
    for report in ("junit.xml", "socialbias.json", "socialbias.html"):
        assert (tmp_path / "reports" / report).is_file()
    recorded_report = (tmp_path / "reports" / "socialbias.json").read_text(encoding="utf-8")

    # Replay: no key, the server gone; the same report, exit status 0.
    env = {**base, "TARGET": "openai:t", "JUDGE": "openai:j", "OPENAI_BASE_URL": server.openai_base_url,
           "BASELINE": "none"}
    done = _run(replay, tmp_path, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert (tmp_path / "reports" / "socialbias.json").read_text(encoding="utf-8") == recorded_report

    # The release accepted: its report becomes the baseline, and the replay compares with it.
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "accepted.json").write_text(recorded_report, encoding="utf-8")
    done = _run(replay, tmp_path, {**env, "BASELINE": "baselines/accepted.json"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "paired comparison with the baseline baselines/accepted.json" in done.stdout

    # A suite changed after the recording: the replay fails loudly on the miss.
    cases.append(("race-001", "race", "A new seed."))
    (suites / "demo.yaml").write_text(suite_yaml(cases, turns=2), encoding="utf-8")
    done = _run(replay, tmp_path, env)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "no recorded answer in the cache" in done.stdout
    assert "suites/demo.yaml::race-001" in done.stdout
