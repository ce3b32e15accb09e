"""The documentation: README is the front door, the manual a strictly built mkdocs site.

The site is built with ``mkdocs build --strict`` (a broken link, a missing anchor or a
page left out of the navigation fails); the options page's tables are the declarations'
(docs/hooks.py); README's links lead to files that exist; and the commands README and
the docs pages show that can run offline are run as written against the loopback fake
server (the SDKs pointed at it with OPENAI_BASE_URL and ANTHROPIC_BASE_URL, as a user
points them at a proxy), with PYTEST_ADDOPTS selecting a few cases of the big suites;
the others are named with the reason they cannot run here (NOT_HERE).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_socialbias.testing import FakeServer

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_README_LINES = 250


def test_readme_is_a_front_door():
    assert len(README.splitlines()) <= MAX_README_LINES
    for heading in ("## The two commands", "## Install", "## A first real run", "## The gate in CI", "## Documentation"):
        assert heading in README


def test_readmes_links_lead_to_files_that_exist():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert len(links) > 15
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert missing == []


def test_the_readme_test_command_is_the_ci_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command = next(line for line in ci.splitlines() if line.startswith("python3 -m venv"))
    assert f"    {command}\n" in README


def test_the_options_page_is_generated_from_the_declarations():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert hooks.current(page) == page, "docs/options.md is stale: run python docs/hooks.py"


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    pages = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    assert {"index.html", "options/index.html", "ci/index.html", "release/index.html"} <= pages
    options = (tmp_path / "site" / "options" / "index.html").read_text(encoding="utf-8")
    assert "socialbias_gates_for" in options  # the generated tables reached the site


# --------------------------------------------------------------------------- README's commands


PREFIXES = ("pytest ", "python -m pytest_socialbias", "python3 ", ". .venv", "cd ")


def _commands(text: str) -> list[str]:
    """The indented command lines of a Markdown text that call pytest, the plugin's CLI,
    the set-up (``python3``, ``. .venv``) or start in a folder (``cd``), continuation lines
    joined and trailing ``# comments`` dropped, in order."""
    commands, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if current:
            current += " " + stripped.rstrip("\\").strip()
            if not stripped.endswith("\\"):
                commands.append(current)
                current = ""
        elif line.startswith("    ") and stripped.startswith(PREFIXES):
            command = stripped.split("  #")[0].strip()
            if command.endswith("\\"):
                current = command.rstrip("\\").strip()
            else:
                commands.append(command)
    return commands


def _readme_commands() -> list[str]:
    return _commands(README)


def _script(req):
    """Every model of README's commands: my-model-v2 (the target), gpt-4o-mini (the judge,
    and the user simulator, whose spec defaults to the judge's)."""
    if req.model == "my-model-v2":
        return "People differ as individuals; a group says little about one person."
    asks = req.system_text
    if "rate how naturally" in asks:
        return "4"
    if "label a single reply" in asks or "refused" in asks:
        return "No"
    if "classify how the agent treated" in asks:
        return "N"
    if "compare two conversations" in asks:
        return "NONE"
    digest = hashlib.sha256(asks.encode()).hexdigest()[:6]
    return f"What do people around you usually think about this? (case {digest}, turn {len(req.messages)})"


@pytest.mark.slow
def test_readmes_offline_commands_run_as_written(tmp_path):
    commands = _readme_commands()
    dry = next(c for c in commands if "--socialbias-dry-run" in c and "dymt.yaml" in c)
    run = next(c for c in commands if c.startswith("pytest suites/dymt/dymt.yaml") and "--socialbias-report" in c)
    record = next(c for c in commands if "--socialbias-record=older:7d" in c)
    replay = next(c for c in commands if "--socialbias-record=none" in c)
    init = next(c for c in commands if c.startswith("python -m pytest_socialbias init"))
    starter = next(c for c in commands if c.startswith("cd my-gate"))

    project = tmp_path / "checkout"
    shutil.copytree(ROOT / "suites", project / "suites")
    shutil.copy2(ROOT / "thresholds.yaml", project / "thresholds.yaml")
    (project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PYTEST_"))}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    # A few cases of each suite, the command itself as written.
    base["PYTEST_ADDOPTS"] = "-p no:randomly -p no:cacheprovider -k 'age-001 or gender-001'"

    def sh(command: str, env: dict, cwd: Path = project) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)

    with FakeServer(_script) as server:
        env = {**base, "OPENAI_BASE_URL": server.openai_base_url, "OPENAI_API_KEY": "sk-test-readme"}
        done = sh(dry, {**base, "OPENAI_BASE_URL": server.openai_base_url})  # no key: a dry run calls nothing
        assert done.returncode == 0 and "no model was called" in done.stdout, done.stdout[-2000:] + done.stderr
        assert server.request_count == 0

        done = sh(run, env)
        assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-2000:]
        assert "socialbias summary" in done.stdout and (project / "reports" / "socialbias.html").is_file()
        cases = json.loads((project / "reports" / "socialbias.json").read_text(encoding="utf-8"))["cases"]
        assert cases and [c["id"] for c in cases if c["outcome"] == "error"] == []

        ci = {**env, "TARGET": "openai:my-model-v2", "JUDGE": "openai:gpt-4o-mini"}
        done = sh(record, ci)
        assert "socialbias summary" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
        recorded = server.request_count
        done = sh(replay, {k: v for k, v in ci.items() if k != "OPENAI_API_KEY"})
        assert server.request_count == recorded, "the replay sent a request"
        assert "no recorded answer" not in done.stdout, done.stdout[-3000:]

        done = sh(init, base, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        done = sh(starter, {**base, "OPENAI_BASE_URL": server.openai_base_url}, cwd=tmp_path)
        assert done.returncode == 0 and "no model was called" in done.stdout, done.stdout[-2000:] + done.stderr


# --------------------------------------------------------------------------- the docs' commands

#: Commands of the docs that cannot run here, and why (each is tested another way).
NOT_HERE = (
    ("python3 -m venv", "the set-up command: it is what CI runs (.ci/run)"),
    (". .venv/bin/activate", "the embedded-model job: tests/real/test_local_model.py runs the embedded model"),
    ("@http", "a server of yours (or a GPU host)"),
    ("vllm:", "a vLLM server on GPUs"),
    ("hfcls:", "a classifier checkpoint of yours and the gpu extra: tests/e2e/test_classifier_detector.py builds tiny ones"),
    ("...", "a placeholder, not a whole command"),
    ("[", "a usage line with optional parts"),
)


def _doc_commands() -> list[tuple[str, str]]:
    """(page, command) for every command of the docs pages (``_commands``)."""
    return [(page.name, command) for page in sorted((ROOT / "docs").glob("*.md"))
            for command in _commands(page.read_text(encoding="utf-8"))]


def _any_model(req):
    """The README script for targets, judges and simulated users, plus BenevDial
    generators (a well-formed dialogue of the class the prompt asks for) and detector
    ensembles' judges."""
    from ..e2e.test_generate_benevdial import class_of, dialogue_text

    try:
        return dialogue_text(class_of(req.prompt_text), req.model)  # a generator's prompt carries one class
    except AssertionError:
        pass
    if req.model not in ("gpt-4o-mini", "A", "B") and "classify" not in req.system_text:
        return "People differ as individuals; a group says little about one person."
    return _script(req)


def test_every_docs_command_is_run_or_named_as_not_runnable_here():
    commands = _doc_commands()
    assert len(commands) >= 12
    runnable = [c for _, c in commands if not any(marker in c for marker, _ in NOT_HERE)]
    assert {c.split()[0] for c in runnable} <= {"pytest", "python"}
    assert len(runnable) >= 6, runnable


@pytest.mark.slow
def test_the_docs_offline_commands_run_as_written(tmp_path):
    project = tmp_path / "checkout"
    shutil.copytree(ROOT / "suites", project / "suites")
    shutil.copy2(ROOT / "thresholds.yaml", project / "thresholds.yaml")
    shutil.copy2(ROOT / "suites" / "benevdial" / "dialogues.jsonl", project / "mine.jsonl")
    (project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PYTEST_"))}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    base["PYTEST_ADDOPTS"] = "-p no:randomly -p no:cacheprovider -k 'age-001 or n-001 or ob-001 or bb-001'"
    ran = []
    with FakeServer(_any_model) as server:
        env = {**base, "OPENAI_BASE_URL": server.openai_base_url, "ANTHROPIC_BASE_URL": server.anthropic_base_url,
               "OPENAI_API_KEY": "sk-test-docs", "ANTHROPIC_API_KEY": "sk-ant-test-docs"}
        for page, command in _doc_commands():
            if any(marker in command for marker, _ in NOT_HERE):
                continue
            cwd = tmp_path / "fresh" if " init " in f" {command} " or "my-gate" in command else project  # where init wrote it
            cwd.mkdir(exist_ok=True)
            done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=600)
            # 0, or 1 where a shipped gate judges the few cases run (a gate, never an error).
            assert done.returncode in (0, 1), (page, command, done.stdout[-2000:], done.stderr[-2000:])
            assert "Traceback" not in done.stderr and "INTERNALERROR" not in done.stdout, (page, command)
            if command.startswith("pytest"):
                shown = ("socialbias summary", "socialbias dry run", "socialbias shard")
                assert any(heading in done.stdout for heading in shown), (page, command)
            ran.append((command, done.returncode))
    assert len(ran) >= 6
    generated = next(rc for command, rc in ran if "generate-benevdial" in command)
    assert generated == 0 and len((project / "benevdial-gen.jsonl").read_text().splitlines()) == 300
    assert (tmp_path / "fresh" / "my-gate" / "thresholds.yaml").is_file()
