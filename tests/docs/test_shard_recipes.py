"""docs/ci/sharded/: the sharded-run recipes (GitHub Actions matrix, GitLab parallel, a
Kubernetes Indexed Job, a Slurm array). Each file is parsed, its shard and combine
commands are read out of it, and those very commands run through bash with the
variables the scheduler would set, against the loopback fake server: three shards in
parallel processes (each in its own runner folder where the CI gives each job its own),
the artifacts carried as the recipe carries them, the caches merged and the parts
combined; the combined report must be the one-run report, and the whole run must replay
from the merged cache with the server gone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pytest_socialbias.testing import FakeServer

from .test_docs import _any_model

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "docs" / "ci" / "sharded"
SHARDS = 3
pytestmark = pytest.mark.slow


def _lines(script, *starts) -> list[str]:
    lines = script.splitlines() if isinstance(script, str) else list(script)
    return [line.strip() for line in lines if line.strip().startswith(starts)]


def github():
    data = yaml.safe_load((RECIPES / "github-actions.yml").read_text(encoding="utf-8"))
    shard, combine = data["jobs"]["shard"], data["jobs"]["combine"]
    assert shard["strategy"]["matrix"]["shard"] == list(range(1, SHARDS + 1)) and data["env"]["SHARDS"] == SHARDS
    assert shard["strategy"]["fail-fast"] is False and combine["needs"] == "shard" and combine["if"] == "always()"
    upload = next(s for s in shard["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["with"]["include-hidden-files"] is True and ".socialbias/" in upload["with"]["path"]
    run = [c for step in shard["steps"] for c in _lines(step.get("run", ""), "pytest ")]
    steps = [c for step in combine["steps"] for c in _lines(step.get("run", ""), "python -m pytest_socialbias")]
    assert len(run) == 1 and len(steps) == 2
    return {
        "variables": {k: str(v) for k, v in data["env"].items()},
        "shard": lambda k: (run[0].replace("${{ matrix.shard }}", str(k)), {}),
        # download-artifact puts each shard's artifact (parts/, .socialbias/) under its name.
        "carry": lambda k, runner, combiner: [(runner / "parts", combiner / f"socialbias-shard-{k}" / "parts"),
                                             (runner / ".socialbias", combiner / f"socialbias-shard-{k}" / ".socialbias")],
        "combine": steps, "own_runners": True, "merged": ".socialbias",
    }


def gitlab():
    data = yaml.safe_load((RECIPES / "gitlab-ci.yml").read_text(encoding="utf-8"))
    shard, combine = data["socialbias-shard"], data["socialbias-combine"]
    assert shard["parallel"] == SHARDS and combine["needs"] == ["socialbias-shard"]
    assert shard["cache"]["policy"] == "pull" and combine["cache"]["policy"] == "push"
    assert combine["artifacts"]["reports"]["junit"] == "reports/gates.xml"
    run = _lines(shard["script"], "pytest ")
    assert len(run) == 1 and "--socialbias-shard=auto" in run[0]
    return {
        "variables": {k: str(v) for k, v in data["variables"].items()},
        "shard": lambda k: (run[0] + " ; " + " ; ".join(shard["after_script"]),
                            {"CI_NODE_INDEX": str(k), "CI_NODE_TOTAL": str(SHARDS)}),
        "carry": lambda k, runner, combiner: [(runner / "parts", combiner / "parts"), (runner / "caches", combiner / "caches")],
        "combine": _lines(combine["script"], "python -m", "rm -rf"), "own_runners": True, "merged": ".socialbias",
    }


def kubernetes(results: Path):
    shards, combine = list(yaml.safe_load_all((RECIPES / "kubernetes-job.yaml").read_text(encoding="utf-8")))
    spec = shards["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == SHARDS
    shard_pod, combine_pod = spec["template"]["spec"]["containers"][0], combine["spec"]["template"]["spec"]["containers"][0]
    run = shard_pod["args"][0].replace("/results", str(results))
    assert f"--socialbias-shard=auto/{SHARDS}" in run
    variables = {e["name"]: e["value"] for e in shard_pod["env"] + combine_pod["env"] if "value" in e}
    return {
        "variables": variables,
        "shard": lambda k: (run, {"JOB_COMPLETION_INDEX": str(k - 1)}),
        "carry": lambda k, runner, combiner: [],
        "combine": [combine_pod["args"][0].replace("/results", str(results))], "own_runners": False,
        "merged": str(results / "merged"),
    }


def slurm():
    array = (RECIPES / "slurm-array.sh").read_text(encoding="utf-8")
    assert f"#SBATCH --array=1-{SHARDS}" in array
    run = _lines(array, "pytest ")
    steps = _lines((RECIPES / "slurm-combine.sh").read_text(encoding="utf-8"), "python -m", "rm -rf")
    assert len(run) == 1 and len(steps) == 2
    return {
        "variables": {"BASELINE": "none"},
        "shard": lambda k: (run[0], {"SLURM_ARRAY_TASK_ID": str(k), "SLURM_ARRAY_TASK_COUNT": str(SHARDS),
                                     "SLURM_ARRAY_TASK_MIN": "1"}),
        "carry": lambda k, runner, combiner: [], "combine": steps, "own_runners": False, "merged": "caches/merged",
    }


def _bash(command: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _project(path: Path) -> Path:
    shutil.copytree(ROOT / "suites", path / "suites")
    shutil.copy2(ROOT / "thresholds.yaml", path / "thresholds.yaml")
    (path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("recipe", ["github", "gitlab", "kubernetes", "slurm"])
def test_recipe_shards_combine_and_replay_like_one_run(tmp_path, recipe):
    results = tmp_path / "results"
    read = {"github": github, "gitlab": gitlab, "kubernetes": lambda: kubernetes(results), "slurm": slurm}[recipe]
    steps = read()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PYTEST_", "CI_", "SLURM_",
                                                                      "JOB_COMPLETION", "SOCIALBIAS_"))}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    base["PYTEST_ADDOPTS"] = "-p no:randomly -p no:cacheprovider -k 'age-001 or age-002 or n-001 or ob-001 or bb-001'"
    combiner = _project(tmp_path / "combine")
    with FakeServer(_any_model) as server:
        env = {**base, **steps["variables"], "TARGET": "openai:my-model-v2", "JUDGE": "openai:gpt-4o-mini",
               "OPENAI_BASE_URL": server.openai_base_url, "OPENAI_API_KEY": "sk-test-recipes"}
        # The same run as one run, for the report the shards must give.
        single = _project(tmp_path / "single")
        one = _bash('pytest suites/ --target="$TARGET" --judge="$JUDGE" --socialbias-record=off '
                    f'--socialbias-baseline="$BASELINE" --socialbias-report={tmp_path}/one.json', single, env)
        assert one.returncode in (0, 1), one.stdout[-3000:] + one.stderr[-2000:]
        running = []
        for k in range(1, SHARDS + 1):
            runner = _project(tmp_path / f"runner-{k}") if steps["own_runners"] else combiner
            command, extra = steps["shard"](k)
            running.append((k, runner, subprocess.Popen(["bash", "-c", command], cwd=runner, env={**env, **extra},
                                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        for k, runner, process in running:
            out, err = process.communicate(timeout=600)
            assert process.returncode in (0, 1), (k, out[-3000:], err[-2000:])
            assert f"shard {k}/{SHARDS}" in out, out[-2000:]
            for source, target in steps["carry"](k, runner, combiner):
                shutil.copytree(source, target, dirs_exist_ok=True)
        for command in steps["combine"]:
            done = _bash(command, combiner, env)
            assert done.returncode == one.returncode or "cache merge" in command or command.startswith("rm "), (
                command, done.stdout[-3000:], done.stderr[-2000:])
            assert "Traceback" not in done.stderr
        reports = sorted(combiner.rglob("reports/socialbias.json")) or sorted(results.rglob("reports/socialbias.json"))
        assert len(reports) == 1
        combined = json.loads(reports[0].read_text(encoding="utf-8"))
        assert combined == json.loads((tmp_path / "one.json").read_text(encoding="utf-8"))
        asked = server.request_count
    # The server is gone: the whole run replays from the merged cache, with no request and no miss.
    merged = Path(steps["merged"]) if Path(steps["merged"]).is_absolute() else combiner / steps["merged"]
    replay = _bash('pytest suites/ --target="$TARGET" --judge="$JUDGE" --socialbias-record=none '
                   f'--socialbias-cache-dir={merged} --socialbias-baseline="$BASELINE" '
                   f'--socialbias-report={tmp_path}/replayed.json', single, {**env, "OPENAI_API_KEY": ""})
    assert replay.returncode == one.returncode, replay.stdout[-3000:] + replay.stderr[-2000:]
    assert "no recorded answer" not in replay.stdout
    assert json.loads((tmp_path / "replayed.json").read_text(encoding="utf-8")) == combined
    assert server.request_count == asked
