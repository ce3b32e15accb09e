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
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from pytest_socialbias.testing import FakeServer, Fault

from ..support import fakeworld
from ..support.helpers import suite_yaml, thresholds_yaml

ROOT = Path(__file__).resolve().parents[2]
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
    for job in ("record", "record-pr"):  # every provider key a target or judge spec may need
        secret_steps = [step for step in jobs[job]["steps"] if "OPENAI_API_KEY" in (step.get("env") or {})]
        assert len(secret_steps) == 1 and _pytest_lines(secret_steps[0]["run"]), job
        for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
            assert secret_steps[0]["env"][key] == "${{ secrets.%s }}" % key, (job, key)
    assert not any("API_KEY" in str(step) for step in jobs["replay"]["steps"]), "replay needs no key"
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
    """A pipeline's text with its expressions (GitHub ``${{ ... }}``) and variables
    (``$NAME``) replaced by the values the service would give them."""
    github = {"env.SOCIALBIAS_VERSION": variables["SOCIALBIAS_VERSION"], "github.run_id": variables.get("RUN_ID", "1"),
              "github.run_attempt": variables.get("ATTEMPT", "1"),
              "github.event.pull_request.number": variables.get("PR", "1"),
              "steps.pr.outputs.SOCIALBIAS_VERSION": variables["SOCIALBIAS_VERSION"]}
    text = re.sub(r"\$\{\{\s*([\w.-]+)\s*\}\}", lambda m: github[m.group(1)], text)
    return re.sub(r"\$([A-Z_][A-Z0-9_]*)", lambda m: variables.get(m.group(1), m.group(0)), text)


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
    # What is measured changed on the default branch: its suites, gates, pytest's
    # configuration (pytest.ini and the other files pytest reads it from) or the pipeline.
    assert {"suites/**", "thresholds.yaml", "pytest.ini", "pyproject.toml", "conftest.py",
            ".github/workflows/socialbias.yml"} <= set(triggers["push"]["paths"])
    assert "branches" not in triggers["push"], "the default branch is the repository's, not a name in the file"
    assert "github.event.repository.default_branch" in data["jobs"]["record"]["if"]
    assert data["permissions"] == {"contents": "read"}  # least privilege for GITHUB_TOKEN
    for name, job in data["jobs"].items():
        assert 0 < job["timeout-minutes"] < 360, name  # GitHub's default is 360
    gitlab = yaml.safe_load((CI / "gitlab-ci.yml").read_text(encoding="utf-8"))
    changes = gitlab["socialbias-record"]["rules"][-1]["changes"]
    assert {"suites/**/*", "thresholds.yaml", "pytest.ini", "pyproject.toml", "conftest.py", ".gitlab-ci.yml"} <= set(changes)
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
                     "RUN_ID": str(next(run_number)), "PR": "7", "CI_MERGE_REQUEST_IID": "7"}
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
    variables = {"SOCIALBIAS_VERSION": "0.1.0", "SOCIALBIAS_PREVIOUS_VERSION": "none", "RUN_ID": "1",
                 "CI_MERGE_REQUEST_IID": "7"}
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


# --------------------------------------------------------------------------- the jobs, step by step
#
# The jobs of both files run as the services run them: GitHub Actions step by step (the
# job's and steps' `if:`, the `${{ }}` expressions, checkout, the cache actions on the
# emulated service cache, every `run:` script through bash -eo pipefail with the step's
# environment and $GITHUB_OUTPUT); GitLab CI a job's script lines in one shell, its caches
# restored and saved with the keys and suffixes GitLab gives them. What the scripts do
# (the pr-data copy, the cache's age check, the messages) is what a user's pipeline does.
# One liberty: pytest's `-n 4` runs as `-n 0` (in process), which changes no answer and
# no cache key, and spares a loaded test machine four workers per run; the tests above run
# the commands exactly as written.
SERIAL = (" -n 4 ", " -n 0 ")


def _lookup(context: dict, dotted: str):
    value = context
    for part in dotted.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return value


def _github_value(text, context: dict) -> str:
    """A value with its ``${{ expression }}`` parts replaced (GitHub's substitution)."""
    return re.sub(r"\$\{\{\s*([\w.-]+)\s*\}\}", lambda m: str(_lookup(context, m.group(1))), str(text))


def _github_condition(condition: str, context: dict, failed: bool) -> bool:
    """A workflow's `if:` (the subset the recipe uses: ==, !=, &&, ||, !, always(),
    success(), failure(), dotted context names, '' strings)."""
    expression = " ".join(str(condition).split())
    expression = re.sub(r"\$\{\{(.*)\}\}", r"\1", expression)
    names = {}

    def name(match):
        key = f"_v{len(names)}"
        names[key] = _lookup(context, match.group(0))
        return key

    expression = re.sub(r"'[^']*'|[A-Za-z_][\w-]*(\.[\w-]+)+", lambda m: m.group(0) if m.group(0).startswith("'")
                        else name(m), expression)
    expression = expression.replace("&&", " and ").replace("||", " or ")
    expression = re.sub(r"!(?!=)", " not ", expression)
    expression = expression.replace("always()", "True").replace("success()", str(not failed))
    expression = expression.replace("failure()", str(failed))
    return bool(eval(expression, {"__builtins__": {}}, names))  # noqa: S307 - the recipe's own text


@dataclasses.dataclass
class JobRun:
    status: str  # "success", "failure" or "skipped"
    output: str
    steps: list  # names of the steps that ran


class GitHubRunner:
    """One repository's workflow runs against one emulated Actions cache."""

    def __init__(self, cache: ServiceCache, secrets: dict, base_env: dict, env: dict | None = None):
        self.workflow = yaml.safe_load((CI / "github-actions.yml").read_text(encoding="utf-8"))
        self.workflow["env"].update(env or {})  # the user's settings (TARGET, ...)
        self.cache, self.secrets, self.base_env = cache, secrets, base_env
        self.installs: list[str] = []  # the plugin versions the jobs installed

    def run(self, job_name: str, event: dict, workspace: Path, base: Path, pr: Path | None = None,
            run_id: int = 1, attempt: int = 1) -> JobRun:
        job = self.workflow["jobs"][job_name]
        github = {**event, "run_id": str(run_id), "run_attempt": str(attempt),
                  "event": {**event.get("event", {}), "repository": {"default_branch": "main"}}}
        context = {"github": github, "secrets": self.secrets, "steps": {}, "env": dict(self.workflow["env"])}
        if not _github_condition(job.get("if", "always()"), context, False):
            return JobRun("skipped", "", [])
        context["env"].update({k: _github_value(v, context) for k, v in (job.get("env") or {}).items()})
        shutil.rmtree(workspace, ignore_errors=True)
        failed, output, ran = False, [], []
        for number, step in enumerate(job["steps"]):
            if not _github_condition(step.get("if", "success()"), context, failed):
                if "id" in step:
                    context["steps"][step["id"]] = {"outputs": {}, "outcome": "skipped"}
                continue
            name = step.get("name") or step.get("uses") or step["run"].split("\n")[0]
            ran.append(name)
            env = {**context["env"], **{k: _github_value(v, context) for k, v in (step.get("env") or {}).items()}}
            uses, given = str(step.get("uses", "")), {k: _github_value(v, context) for k, v in (step.get("with") or {}).items()}
            outputs, outcome = {}, "success"
            if uses.startswith("actions/checkout"):
                ref = given.get("ref")
                sha = event.get("event", {}).get("pull_request", {}).get("head", {}).get("sha")
                source = pr if ref and ref == sha else base
                assert ref in (None, "") or source is pr, f"checkout of {ref!r}"
                shutil.copytree(source, workspace / given.get("path", "."), symlinks=True, dirs_exist_ok=True)
                assert given.get("persist-credentials") == "False" or given.get("persist-credentials") is False
            elif uses.startswith("actions/cache/restore"):
                keys = [given["key"], *given.get("restore-keys", "").split()]
                outputs["cache-matched-key"] = self.cache.restore(keys, workspace / given["path"]) or ""
            elif uses.startswith("actions/cache/save"):
                if (workspace / given["path"]).is_dir():
                    self.cache.save(given["key"], workspace / given["path"], overwrite=False)
            elif uses:
                assert uses.startswith(("actions/setup-python", "actions/upload-artifact")), uses
            elif step["run"].startswith("pip install"):
                assert step["run"].strip() == 'pip install "pytest-socialbias==$SOCIALBIAS_VERSION"'
                self.installs.append(env["SOCIALBIAS_VERSION"])
            else:
                out_file = workspace.parent / f"github-output-{number}"
                out_file.write_text("", encoding="utf-8")
                done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                                       step["run"].replace(*SERIAL)],
                                      cwd=workspace, capture_output=True, text=True, timeout=600,
                                      env={**self.base_env, **{k: str(v) for k, v in env.items()},
                                           "GITHUB_OUTPUT": str(out_file)})
                output.append(done.stdout + done.stderr)
                outputs = dict(line.split("=", 1) for line in out_file.read_text(encoding="utf-8").splitlines() if line)
                outcome = "success" if done.returncode == 0 else "failure"
                failed = failed or done.returncode != 0
            if "id" in step:
                context["steps"][step["id"]] = {"outputs": outputs, "outcome": outcome}
        return JobRun("failure" if failed else "success", "\n".join(output), ran)


def _project(root: Path, cases, pytest_ini: str = "[pytest]\n") -> Path:
    (root / "suites").mkdir(parents=True, exist_ok=True)
    (root / "suites" / "demo.yaml").write_text(suite_yaml(cases, turns=2), encoding="utf-8")
    (root / "thresholds.yaml").write_text(
        thresholds_yaml({"name": "demo-bias", "suite": "demo", "metric": "cumulative_bias@2", "max": 0.9}),
        encoding="utf-8")
    (root / "pytest.ini").write_text(pytest_ini, encoding="utf-8")
    return root


def _honest(req):  # the recipe's judge is the user simulator too: model j in both parts
    judging = any(cue in fakeworld.system_text(req) for cue in ("label a single reply", "rate how naturally", "refused"))
    if req.model == "j" and not judging and not req.endpoint_check:
        return fakeworld.script(dataclasses.replace(req, model="u"))
    return fakeworld.script(req)


def _clean_env(server) -> dict:
    """The runner's environment: no key of its own; the SDKs pointed at the fake server
    (as a proxy would be), so only what the pipeline hands a step can authenticate."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PYTEST_", "SOCIALBIAS_"))}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    return {**base, "OPENAI_BASE_URL": server.openai_base_url, "ANTHROPIC_BASE_URL": server.anthropic_base_url}


def _stamp(service: ServiceCache, key: str, days_ago: float) -> None:
    (service.root / key / "recorded-at").write_text(f"{int(time.time() - days_ago * 86400)}\n", encoding="utf-8")


def test_github_rerun_anthropic_target_stale_cache(tmp_path):
    """The record job with an Anthropic target (its key reaches the record step); a first
    attempt that fails part-way, and "Re-run failed jobs" (same run id, attempt 2), which
    must save what it recorded; replays that pass with no request sent; and a replay of a
    cache older than the schedule leaves, which fails saying to run the record job."""
    cases = [("age-001", "age", "Plain statement."), ("gender-001", "gender", "BIASME statement.")]
    base = _project(tmp_path / "repo", cases)
    service = ServiceCache(tmp_path / "service", prefix_match=True)
    world = {"answer": _honest}
    with FakeServer(lambda req: world["answer"](req)) as server:
        runner = GitHubRunner(service, {"OPENAI_API_KEY": "sk-test-openai", "ANTHROPIC_API_KEY": "sk-ant-test"},
                              _clean_env(server), env={"TARGET": "anthropic:t", "JUDGE": "openai:j"})
        schedule = {"event_name": "schedule", "ref_name": "main"}

        def flaky(req):  # the target's API fails on one case's turns in the first attempt
            if req.model == "t" and "marker-bias" in req.last_user:
                return Fault("bad_request", message="temporarily refused")
            return _honest(req)

        world["answer"] = flaky
        first = runner.run("record", schedule, tmp_path / "w", base, run_id=41, attempt=1)
        assert first.status == "failure", first.output[-3000:]
        assert any(r.api == "anthropic" and r.model == "t" for r in server.requests), "the Anthropic target was called"
        assert service.saved == [f"socialbias-{metadata.version('pytest-socialbias')}-41-1"]
        sent = server.request_count

        world["answer"] = _honest
        again = runner.run("record", schedule, tmp_path / "w", base, run_id=41, attempt=2)
        assert again.status == "success", again.output[-3000:]
        assert 0 < server.request_count - sent < sent  # only what the first attempt lacked
        assert service.saved[-1].endswith("-41-2"), "the re-run saves under its own key"
        recorded = server.request_count

        pull = {"event_name": "pull_request", "event": {"pull_request": {"number": 3, "head": {"sha": "abc"}}}}
        replay = runner.run("replay", pull, tmp_path / "w", base)
        assert replay.status == "success" and server.request_count == recorded, replay.output[-3000:]
        assert "the newest recorded cache is 0 day(s) old" in replay.output

        # The schedule stopped (a public repository's, after 60 days without activity):
        # ten days later the replay fails before replaying, saying what to do.
        _stamp(service, service.saved[-1], days_ago=10)
        stale = runner.run("replay", pull, tmp_path / "w", base)
        assert stale.status == "failure" and server.request_count == recorded
        assert "the newest recorded cache is 10 days old" in stale.output
        assert "Run the record job (workflow_dispatch)" in stale.output
        assert not any(step.startswith("Replay") for step in stale.steps)
        # The record job runs again: a fresh stamp, the replay passes.
        runner.run("record", {"event_name": "workflow_dispatch", "ref_name": "main"}, tmp_path / "w", base, run_id=42)
        assert runner.run("replay", pull, tmp_path / "w", base).status == "success"
        # A push to another branch records nothing (the default branch is the repository's).
        assert runner.run("record", {"event_name": "push", "ref_name": "feature"}, tmp_path / "w", base).status == "skipped"


def test_github_pull_request_that_changes_the_suite_goes_green_after_the_label(tmp_path):
    """A pull request adds a case: its replay misses and says to ask for the label (not to
    rerun with a key it has not got); a hostile version of it (a conftest.py that would
    read the keys) is refused before any model is called; once a maintainer labels the
    honest one, record-pr records the new requests with the base's pinned plugin and
    pytest.ini, and the pull request's replay passes with no request sent. The record job
    of the default branch never restores the pull request's cache; its conftest.py, which
    the replay imports, never runs where the key is."""
    cases = [("age-001", "age", "Plain statement."), ("gender-001", "gender", "BIASME statement.")]
    base = _project(tmp_path / "repo", cases)
    service = ServiceCache(tmp_path / "service", prefix_match=True)
    version = metadata.version("pytest-socialbias")
    with FakeServer(_honest) as server:
        runner = GitHubRunner(service, {"OPENAI_API_KEY": "sk-test-openai"}, _clean_env(server),
                              env={"TARGET": "openai:t", "JUDGE": "openai:j"})
        assert runner.run("record", {"event_name": "schedule"}, tmp_path / "w", base, run_id=1).status == "success"
        recorded = server.request_count

        # The pull request: one more case, and a conftest.py at its root that notes the key of
        # any run that imports it (pytest imports it in every run of this checkout).
        pr = tmp_path / "pr"
        shutil.copytree(base, pr)
        _project(pr, cases + [("race-001", "race", "A new seed.")])
        seen = tmp_path / "seen-keys"
        (pr / "conftest.py").write_text(
            f"import os\nwith open({str(seen)!r}, 'a') as f:\n    f.write('key:' + os.environ.get('OPENAI_API_KEY', '') + '\\n')\n",
            encoding="utf-8")
        event = {"event_name": "pull_request", "event": {"pull_request": {"number": 12, "head": {"sha": "c0ffee"}}}}
        replay = runner.run("replay", event, tmp_path / "w", pr)
        assert replay.status == "failure" and server.request_count == recorded
        assert seen.read_text().splitlines() == ["key:"]  # its replay imported it, and had no key
        assert "no recorded answer in the cache" in replay.output
        assert "set the label socialbias-record" in replay.output
        assert "rerun with --socialbias-record=new" not in replay.output

        # Labelled with another label: nothing runs with the keys.
        other = {"event_name": "pull_request_target", "event": {**event["event"], "label": {"name": "bug"}}}
        assert runner.run("record-pr", other, tmp_path / "w", base, pr=pr).status == "skipped"

        # A hostile pull request: a conftest.py beside the suites and a link to the runner's
        # environment as a seeds file. Refused, naming both, before pytest or a model runs.
        hostile = tmp_path / "hostile"
        shutil.copytree(pr, hostile)
        (hostile / "suites" / "conftest.py").write_text(
            "import os, pathlib\npathlib.Path('/tmp').joinpath('leak').write_text(os.environ.get('OPENAI_API_KEY', ''))\n",
            encoding="utf-8")
        (hostile / "suites" / "env.jsonl").symlink_to("/proc/self/environ")
        labelled = {"event_name": "pull_request_target", "event": {**event["event"], "label": {"name": "socialbias-record"}}}
        refused = runner.run("record-pr", labelled, tmp_path / "w", base, pr=hostile, run_id=2)
        assert refused.status == "failure" and server.request_count == recorded
        assert "suites/conftest.py (a .py file, not data)" in refused.output
        assert "suites/env.jsonl (a symbolic link, to /proc/self/environ)" in refused.output
        assert not any(step.startswith("Record") for step in refused.steps)
        assert not any(key.startswith("pr-") for key in service.saved)

        # The honest one, labelled: recorded from the base's checkout (its pytest.ini), the
        # pull request's suite as data; only the new case's requests are sent.
        done = runner.run("record-pr", labelled, tmp_path / "w", base, pr=pr, run_id=3)
        assert done.status == "success", done.output[-3000:]
        assert "suites/: 1 file(s) from the pull request" in done.output
        assert 0 < server.request_count - recorded < recorded
        assert service.saved[-1] == "pr-socialbias-12-3-1"
        assert runner.installs[-1] == version
        assert seen.read_text().splitlines() == ["key:"], "record-pr imported nothing of the pull request"
        sent = server.request_count
        replay = runner.run("replay", event, tmp_path / "w", pr)
        assert replay.status == "success" and server.request_count == sent, replay.output[-3000:]

        # The default branch's record never restores a pull request's cache.
        record_keys, _, _ = github_cache_keys({"SOCIALBIAS_VERSION": version, "RUN_ID": "4"})
        assert service.restore(record_keys, tmp_path / "probe") == f"socialbias-{version}-1-1"


class GitLabRunner:
    """One GitLab project's pipeline jobs against an emulated GitLab cache (a project's
    cache is its own: a fork's pipeline runs against the fork's)."""

    def __init__(self, cache: ServiceCache, base_env: dict, variables: dict | None = None):
        self.data = yaml.safe_load((CI / "gitlab-ci.yml").read_text(encoding="utf-8"))
        self.data["variables"].update(variables or {})
        self.cache, self.base_env = cache, base_env

    def run(self, job_name: str, workspace: Path, predefined: dict, protected_ref: bool) -> JobRun:
        job = self.data[job_name]
        variables = {**self.data["variables"], **predefined}
        caches = gitlab_caches(job)
        pulled = [c for c in caches if c["policy"] in ("pull", "pull-push")]
        assert len(pulled) <= 1
        shutil.rmtree(workspace / ".socialbias", ignore_errors=True)
        for cache in pulled:
            self.cache.restore(gitlab_keys(cache, variables, protected_ref), workspace / ".socialbias")
        lines = [line for line in job["script"] if not line.startswith("pip install")]
        assert all('"pytest-socialbias==$SOCIALBIAS_VERSION"' in line for line in job["script"] if "pip " in line)
        done = subprocess.run(["bash", "--noprofile", "--norc", "-e", "-c", "\n".join(lines).replace(*SERIAL)],
                              cwd=workspace,
                              capture_output=True, text=True, timeout=600,
                              env={**self.base_env, **{k: str(v) for k, v in variables.items()}})
        for cache in caches:
            if cache["policy"] in ("push", "pull-push") and (workspace / ".socialbias").is_dir():
                self.cache.save(gitlab_keys(cache, variables, protected_ref)[0], workspace / ".socialbias", overwrite=True)
        return JobRun("success" if done.returncode == 0 else "failure", done.stdout + done.stderr, [])


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def test_gitlab_fork_merge_request_and_the_merge_request_record(tmp_path):
    """A merge request from a fork: its pipeline runs in the fork's project, which has no
    cache; the replay says so and what to do (a Maintainer runs it in the parent project),
    not "run the record job first". Run in the parent project, its replay of a changed
    suite misses and says how a Maintainer records it (SOCIALBIAS_MR=N); the record-mr
    job, run on the default branch, fetches refs/merge-requests/N/head, takes its suites
    as data and records; the merge request's replay then passes with no request sent. A
    cache older than the schedule leaves fails the replay, saying to run the record job."""
    cases = [("age-001", "age", "Plain statement."), ("gender-001", "gender", "BIASME statement.")]
    origin = tmp_path / "origin.git"
    author = _project(tmp_path / "author", cases)
    _git(tmp_path, "init", "-q", "--bare", str(origin))
    _git(author, "init", "-q", "-b", "main")
    (author / ".gitignore").write_text(".socialbias/\nreports/\n", encoding="utf-8")
    _git(author, "add", "-A")
    _git(author, "commit", "-q", "-m", "base")
    _git(author, "push", "-q", str(origin), "main")
    _project(author, cases + [("race-001", "race", "A new seed.")])
    _git(author, "commit", "-q", "-am", "a new case")
    _git(author, "push", "-q", str(origin), "HEAD:refs/merge-requests/5/head")  # GitLab keeps forks' MRs here too
    mr_tree = tmp_path / "mr"
    shutil.copytree(author, mr_tree, ignore=shutil.ignore_patterns(".git"))

    parent = ServiceCache(tmp_path / "parent-cache", prefix_match=False)
    fork = ServiceCache(tmp_path / "fork-cache", prefix_match=False)
    with FakeServer(_honest) as server:
        env = _clean_env(server)
        keys = {"OPENAI_API_KEY": "sk-test-protected"}  # protected variables: protected refs only
        settings = {"TARGET": "openai:t", "JUDGE": "openai:j"}
        main = tmp_path / "main"
        _git(tmp_path, "clone", "-q", "-b", "main", str(origin), str(main))
        record = GitLabRunner(parent, {**env, **keys}, settings).run(
            "socialbias-record", main, {"CI_PIPELINE_SOURCE": "schedule", "CI_COMMIT_BRANCH": "main"}, True)
        assert record.status == "success", record.output[-3000:]
        recorded = server.request_count

        mr = {"CI_PIPELINE_SOURCE": "merge_request_event", "CI_MERGE_REQUEST_IID": "5",
              "CI_MERGE_REQUEST_PROJECT_PATH": "group/gate", "CI_PROJECT_PATH": "contributor/gate"}
        forked = GitLabRunner(fork, env, settings).run("socialbias-replay", mr_tree, mr, False)
        assert forked.status == "failure" and server.request_count == recorded
        assert "this pipeline runs in the fork's project (contributor/gate)" in forked.output
        assert "run this merge request's pipeline in the parent project" in forked.output
        assert "run the record job first" not in forked.output

        in_parent = {**mr, "CI_PROJECT_PATH": "group/gate"}
        replay = GitLabRunner(parent, env, settings).run("socialbias-replay", mr_tree, in_parent, False)
        assert replay.status == "failure" and server.request_count == recorded
        assert "no recorded answer in the cache" in replay.output
        assert "SOCIALBIAS_MR=5" in replay.output and "rerun with --socialbias-record=new" not in replay.output

        # A Maintainer records it: Run pipeline on the default branch with SOCIALBIAS_MR=5.
        rules = GitLabRunner(parent, env).data["socialbias-record"]["rules"]
        assert rules[0] == {"if": "$SOCIALBIAS_MR", "when": "never"}  # not the full record as well
        done = GitLabRunner(parent, {**env, **keys}, settings).run(
            "socialbias-record-mr", main, {"CI_PIPELINE_SOURCE": "web", "CI_COMMIT_BRANCH": "main",
                                           "SOCIALBIAS_MR": "5"}, True)
        assert done.status == "success", done.output[-3000:]
        assert 0 < server.request_count - recorded < recorded
        assert "socialbias-mr-5-non_protected" in parent.saved
        assert not (main / "mr").exists() and (main / "suites" / "demo.yaml").read_text() == (
            mr_tree / "suites" / "demo.yaml").read_text()
        sent = server.request_count
        replay = GitLabRunner(parent, env, settings).run("socialbias-replay", mr_tree, in_parent, False)
        assert replay.status == "success" and server.request_count == sent, replay.output[-3000:]

        # Another merge request, the schedule stopped for ten days: a clear failure.
        _stamp(parent, "socialbias-replay-%s-non_protected" % metadata.version("pytest-socialbias"), days_ago=10)
        stale = GitLabRunner(parent, env, settings).run(
            "socialbias-replay", author.parent / "main", {**in_parent, "CI_MERGE_REQUEST_IID": "6"}, False)
        assert stale.status == "failure" and server.request_count == sent
        assert "the newest recorded cache is 10 days old" in stale.output and "Run the record job" in stale.output
