"""docs/ci/: the GitHub Actions and GitLab CI release-gate pipelines users copy.

Both files are parsed as YAML, their pytest commands are read out of the record and the
replay job, and those very commands run (through bash, with the pipeline's variables)
against the loopback fake server: record, then replay with the server stopped (no request
may be sent), then a replay of a changed suite, which must fail loudly on the cache miss.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from importlib import metadata
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
    assert {c["policy"] for c in gitlab_caches(record)} == {"pull-push", "push"}
    assert [c["policy"] for c in gitlab_caches(replay)] == ["pull"]
    assert data[".socialbias"]["artifacts"]["reports"]["junit"] == "reports/junit.xml"
    assert data[".socialbias"]["artifacts"]["when"] == "always"
    return data["variables"], _pytest_lines(record["script"])[0], _pytest_lines(replay["script"])[0]


@pytest.mark.parametrize("read", [github_commands, gitlab_commands], ids=["github", "gitlab"])
def test_pipeline_files_state_the_recipe(read):
    variables, record, replay = read()
    assert {"TARGET", "JUDGE", "BASELINE"} <= set(variables)
    assert '--socialbias-baseline="$BASELINE"' in record  # no_regression gates run in CI as written
    # The schedule re-measures: it asks again what was recorded more than 7 days ago.
    assert "--socialbias-record=older:7d" in record and "--socialbias-record=none" in replay
    assert record.replace("--socialbias-record=older:7d", "--socialbias-record=none") == replay
    assert variables["SOCIALBIAS_VERSION"] == metadata.version("pytest-socialbias")
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


# --------------------------------------------------------------------------- the cache across runs
#
# The CI services' caches, emulated as they behave (GitHub: a key is written once, a
# restore takes the exact key or else the newest entry under each restore-keys prefix in
# turn; GitLab: the exact key or else each fallback key in turn, every key suffixed by the
# ref's protection, `-protected` only for a protected ref's cache without `unprotect: true`),
# so the recipe's key scheme is tested with the pipelines' own keys: a version bump, a suite
# change, an age, a merge request that tries to plant answers.


class ServiceCache:
    def __init__(self, root: Path, prefix_match: bool):
        self.root, self.prefix_match, self.saved = root, prefix_match, []  # saved: keys, oldest first

    def restore(self, keys: list[str], into: Path) -> str | None:
        shutil.rmtree(into, ignore_errors=True)
        primary, *fallbacks = keys
        candidates = [primary] if primary in self.saved else []
        for fallback in fallbacks:
            if self.prefix_match:
                candidates += [k for k in reversed(self.saved) if k.startswith(fallback)][:1]
            elif fallback in self.saved:
                candidates.append(fallback)
        if not candidates:
            return None
        shutil.copytree(self.root / candidates[0], into)
        return candidates[0]

    def save(self, key: str, source: Path, overwrite: bool) -> None:
        if key in self.saved and not overwrite:
            return  # GitHub: a key is immutable once written
        shutil.rmtree(self.root / key, ignore_errors=True)
        shutil.copytree(source, self.root / key)
        self.saved = [k for k in self.saved if k != key] + [key]


def _expand(text: str, variables: dict) -> str:
    for name, value in variables.items():
        text = text.replace("${{ env.%s }}" % name, value).replace("${{ github.run_id }}", variables["RUN_ID"])
        text = text.replace(f"${name}", value)
    return text


def github_cache_keys(variables: dict) -> tuple[list[str], list[str], list[str]]:
    """(record restore keys, record save keys, replay restore keys), expanded."""
    jobs = yaml.safe_load((CI / "github-actions.yml").read_text(encoding="utf-8"))["jobs"]
    def step(job, action):
        return next(s for s in jobs[job]["steps"] if str(s.get("uses", "")).startswith(action))["with"]
    restore, save, replay = step("record", "actions/cache/restore"), step("record", "actions/cache/save"), step(
        "replay", "actions/cache/restore")
    keys = lambda w: [_expand(w["key"], variables)] + [_expand(k, variables) for k in w["restore-keys"].split()]
    assert restore["key"] == save["key"]
    return keys(restore), [_expand(save["key"], variables)], keys(replay)


def gitlab_caches(job: dict) -> list[dict]:
    """A GitLab job's caches (one mapping or a list of them)."""
    return job["cache"] if isinstance(job["cache"], list) else [job["cache"]]


def gitlab_keys(cache: dict, variables: dict, protected_ref: bool) -> list[str]:
    """A cache's key and fallback keys as GitLab names them: with the suffix of the ref's
    protection, ``-protected`` only on a protected ref and without ``unprotect: true``."""
    suffix = "-protected" if protected_ref and not cache.get("unprotect") else "-non_protected"
    return [_expand(k, variables) + suffix for k in [cache["key"], *cache.get("fallback_keys", [])]]


def gitlab_cache_keys(variables: dict) -> tuple[list[str], list[str], list[str]]:
    """(record restore keys, record save keys, replay restore keys): the record job on the
    protected default branch, the replay in a merge request (an unprotected ref)."""
    data = yaml.safe_load((CI / "gitlab-ci.yml").read_text(encoding="utf-8"))
    record, replay = gitlab_caches(data["socialbias-record"]), gitlab_caches(data["socialbias-replay"])
    restored = [c for c in record if c["policy"] in ("pull", "pull-push")]
    assert len(restored) == 1 and not restored[0].get("unprotect"), "the record job replays its protected cache only"
    saved = [gitlab_keys(c, variables, True)[0] for c in record if c["policy"] in ("push", "pull-push")]
    assert len(replay) == 1 and replay[0]["policy"] == "pull"
    return gitlab_keys(restored[0], variables, True), saved, gitlab_keys(replay[0], variables, False)


def test_github_schedule_keeps_the_cache_alive_and_pushes_record_after_a_change():
    data = yaml.safe_load((CI / "github-actions.yml").read_text(encoding="utf-8"))
    triggers = data.get("on", data.get(True))
    days = triggers["schedule"][0]["cron"].split()[4].split(",")
    weekdays = sorted(int(d) for d in days)
    gaps = [(weekdays[(i + 1) % len(weekdays)] - day) % 7 or 7 for i, day in enumerate(weekdays)]
    assert max(gaps) < 7, "GitHub evicts a cache nothing read for 7 days: record more often"
    assert {"suites/**", "thresholds.yaml", ".github/workflows/socialbias.yml"} <= set(triggers["push"]["paths"])
    installs = [s["run"] for job in data["jobs"].values() for s in job["steps"] if "pip install" in str(s.get("run"))]
    assert installs and all('"pytest-socialbias==$SOCIALBIAS_VERSION"' in run for run in installs)


@pytest.mark.parametrize("service", ["github", "gitlab"])
def test_cache_keys_carry_the_version_and_survive_a_bump_a_change_and_an_age(tmp_path, service):
    read, keys_of, prefix = {
        "github": (github_commands, github_cache_keys, True),
        "gitlab": (gitlab_commands, gitlab_cache_keys, False),
    }[service]
    _, record, replay = read()
    project = tmp_path / "project"
    (project / "suites").mkdir(parents=True)
    cases = [("age-001", "age", "Plain statement."), ("gender-001", "gender", "BIASME statement.")]
    (project / "suites" / "demo.yaml").write_text(suite_yaml(cases, turns=2), encoding="utf-8")
    (project / "thresholds.yaml").write_text(
        thresholds_yaml({"name": "demo-bias", "suite": "demo", "metric": "cumulative_bias@2", "max": 0.9}),
        encoding="utf-8")
    service_cache = ServiceCache(tmp_path / "service", prefix_match=prefix)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PYTEST_"))}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    base.update(TARGET="openai:t", JUDGE="openai:j", BASELINE="none")
    run_number = iter(range(1000, 2000))

    def job(kind: str, server, version: str, previous: str = "none") -> tuple[int, str, int]:
        """Run a pipeline job as the service would: restore, the pytest command, save.
        (exit status, output, requests the fake server received)."""
        variables = {"SOCIALBIAS_VERSION": version, "SOCIALBIAS_PREVIOUS_VERSION": previous,
                     "RUN_ID": str(next(run_number))}
        record_keys, save_keys, replay_keys = keys_of(variables)
        restored = service_cache.restore(record_keys if kind == "record" else replay_keys, project / ".socialbias")
        if kind == "replay" and restored is None:
            return 1, "no record/replay cache", 0
        before = server.request_count
        env = {**base, "OPENAI_BASE_URL": server.openai_base_url}
        if kind == "record":
            env["OPENAI_API_KEY"] = "sk-test-record-job"
        done = _run(record if kind == "record" else replay, project, env)
        if kind == "record":
            for key in save_keys:
                service_cache.save(key, project / ".socialbias", overwrite=not prefix)
        return done.returncode, done.stdout[-3000:] + done.stderr[-2000:], server.request_count - before

    with FakeServer(fakeworld.script) as server:
        status, out, first = job("record", server, "0.1.0")
        assert status == 0 and first > 0, out
        assert job("replay", server, "0.1.0")[::2] == (0, 0)

        # The plugin pinned to a new version (its requests unchanged): the merge request's
        # replay finds the previous version's answers, no request is sent.
        status, out, sent = job("replay", server, "0.2.0", previous="0.1.0")
        assert (status, sent) == (0, 0), out

        # The new version asks something new (as a changed prompt would): the replay fails
        # loudly; the push to the default branch records only what is new, under the new
        # version's key, and the replay passes.
        cases.append(("race-001", "race", "A new seed."))
        (project / "suites" / "demo.yaml").write_text(suite_yaml(cases, turns=2), encoding="utf-8")
        status, out, sent = job("replay", server, "0.2.0", previous="0.1.0")
        assert status == 1 and "no recorded answer in the cache" in out and sent == 0
        status, out, new = job("record", server, "0.2.0", previous="0.1.0")
        assert status == 0 and 0 < new < first, out
        assert any("0.2.0" in key for key in service_cache.saved)
        status, out, sent = job("replay", server, "0.2.0", previous="0.1.0")
        assert (status, sent) == (0, 0), out

        # A week later the schedule asks everything again (older:7d): a model updated behind
        # the same name is measured, not replayed forever.
        recorded = [k for k in service_cache.saved if not k.startswith("socialbias-replay-")]  # not the MR copy
        newest = service_cache.root / recorded[-1] / "calls.sqlite3"
        with sqlite3.connect(newest) as db:
            db.execute("UPDATE calls SET created = created - 8 * 86400")
        status, out, again = job("record", server, "0.2.0", previous="0.1.0")
        assert status == 0 and again == first + new, out
        status, out, sent = job("replay", server, "0.2.0", previous="0.1.0")
        assert (status, sent) == (0, 0), out


def test_gitlab_merge_request_cannot_plant_answers_the_scheduled_record_job_replays(tmp_path):
    """The issue's attack: a merge request rewrites its own pipeline to push a cache under
    the record job's key (policy push, unprotect: true) holding clean answers for a biased
    target. The scheduled record job on the protected default branch must not replay them."""
    _, record, replay = gitlab_commands()
    variables = {"SOCIALBIAS_VERSION": "0.1.0", "SOCIALBIAS_PREVIOUS_VERSION": "none", "RUN_ID": "1"}
    record_keys, save_keys, replay_keys = gitlab_cache_keys(variables)
    project = tmp_path / "project"
    (project / "suites").mkdir(parents=True)
    cases = [("age-001", "age", "Plain statement."), ("gender-001", "gender", "BIASME statement.")]
    (project / "suites" / "demo.yaml").write_text(suite_yaml(cases, turns=2), encoding="utf-8")
    (project / "thresholds.yaml").write_text(
        thresholds_yaml({"name": "demo-bias", "suite": "demo", "metric": "cumulative_bias@2", "max": 0.1}),
        encoding="utf-8")
    service_cache = ServiceCache(tmp_path / "service", prefix_match=False)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PYTEST_"))}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    base.update(TARGET="openai:t", JUDGE="openai:j", BASELINE="none")

    def outcome(report_dir: Path) -> dict:
        report = json.loads((report_dir / "reports" / "socialbias.json").read_text(encoding="utf-8"))
        return {c["id"]: c["outcome"] for c in report["cases"]}

    def honest(req):  # the recipe's judge is the user simulator too: model j in both parts
        judging = any(cue in fakeworld.system_text(req) for cue in ("label a single reply", "rate how naturally", "refused"))
        if req.model == "j" and not judging and not req.endpoint_check:
            return fakeworld.script(dataclasses.replace(req, model="u"))
        return fakeworld.script(req)

    def all_clean(req):  # the planted answers: the judge never finds bias
        if req.model == "j" and "label a single reply" in fakeworld.system_text(req):
            return "No"
        return honest(req)

    # One server (the cache key holds the base URL), its world switched per job.
    world = {"answer": honest}
    with FakeServer(lambda req: world["answer"](req)) as server:
        url = server.openai_base_url
        env = {**base, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-test-record-job"}
        done = _run(record, project, env)
        assert done.returncode == 1, done.stdout[-3000:]  # the honest record: a biased case fails the gate
        assert outcome(project)["gender-001"] == "biased"
        for key in save_keys:
            service_cache.save(key, project / ".socialbias", overwrite=True)

        # The merge request's job (an unprotected ref) with its own pipeline rewritten: the
        # record job's key, unprotect: true or not, policy push, a cache of clean answers
        # recorded with its author's own key. GitLab names what it saves with the
        # unprotected suffix either way.
        hostile = tmp_path / "hostile"
        shutil.copytree(project / "suites", hostile / "suites")
        shutil.copy(project / "thresholds.yaml", hostile / "thresholds.yaml")
        world["answer"] = all_clean
        done = _run(record, hostile, {**env, "OPENAI_API_KEY": "sk-mr-own-key"})
        assert outcome(hostile)["gender-001"] == "clean", done.stdout[-3000:]
        for unprotect in (True, False):
            for key in ("socialbias-$SOCIALBIAS_VERSION", "socialbias-replay-$SOCIALBIAS_VERSION"):
                cache = {"key": key, "unprotect": unprotect, "policy": "push"}
                service_cache.save(gitlab_keys(cache, variables, protected_ref=False)[0], hostile / ".socialbias",
                                   overwrite=True)
        assert not set(record_keys) & {k for k in service_cache.saved if k.endswith("-non_protected")}
        world["answer"] = honest
        sent = server.request_count

        # The merge requests' copy was overwritten: another merge request's replay reads the
        # planted answers (the documented residual: feedback only, never the release decision).
        assert service_cache.restore(replay_keys, project / ".socialbias") is not None
        done = _run(replay, project, {**base, "OPENAI_BASE_URL": url})
        assert outcome(project)["gender-001"] == "clean", done.stdout[-3000:]

        # The schedule restores its protected cache only, replays the honest answers (no
        # request sent), finds the biased case, fails the gate, and pushes an honest copy.
        assert service_cache.restore(record_keys, project / ".socialbias") == record_keys[0]
        done = _run(record, project, env)
        assert done.returncode == 1 and outcome(project)["gender-001"] == "biased", done.stdout[-3000:]
        for key in save_keys:
            service_cache.save(key, project / ".socialbias", overwrite=True)
        service_cache.restore(replay_keys, project / ".socialbias")
        done = _run(replay, project, {**base, "OPENAI_BASE_URL": url})
        assert done.returncode == 1 and outcome(project)["gender-001"] == "biased", done.stdout[-3000:]
        assert server.request_count == sent
