"""``python -m pytest_socialbias init``: the starter project a team begins from.

In-process tests read the shipped files from the checkout (an editable install); the
slow test builds the wheel offline, installs it into a fresh virtualenv, runs ``init``
there and runs the starter project against the loopback fake server, so the wheel is
shown to carry everything ``init`` copies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from pytest_socialbias.__main__ import main
from pytest_socialbias.errors import ConfigError
from pytest_socialbias.gates import load_gates
from pytest_socialbias.starter import SHIPPED, filter_thresholds, plan, run, shipped_root, shipped_suites

from ..support.helpers import model_args

ROOT = Path(__file__).resolve().parents[2]


def init(directory: Path, *suites: str, ci: str = "both", force: bool = False, every: bool = False) -> int:
    return run(SimpleNamespace(directory=directory, suites=list(suites), ci=ci, force=force, list_suites=False,
                               all_suites=every))


def test_the_checkout_is_the_shipped_root_of_an_editable_install():
    assert shipped_root() == ROOT
    names = shipped_suites(ROOT)
    assert {"smoke", "dymt", "scripted", "zeroshot", "benevdial-agent", "benevdial-pairs", "benevdial-detect"} <= set(names)
    assert names["dymt"] == Path("suites/dymt/dymt.yaml")


def test_init_one_suite_writes_a_whole_project_with_only_its_gates(tmp_path, capsys):
    assert init(tmp_path / "proj", "smoke") == 0
    project = tmp_path / "proj"
    written = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert written == [".github/workflows/socialbias.yml", ".gitignore", ".gitlab-ci.yml", "README.md",
                       "pytest.ini", "suites/smoke.yaml", "thresholds.yaml"]
    gates = load_gates(project / "thresholds.yaml")
    assert {g.suite for g in gates} == {"smoke", "judge-check"}
    assert [g.name for g in gates if g.suite == "smoke"] == ["smoke-cumulative-bias", "smoke-judge-errors"]
    text = (project / "thresholds.yaml").read_text()
    assert "# --- smoke" in text and "# --- DyMT" not in text and "description: At most half" in text
    assert text.startswith("# Release gates")
    version = metadata.version("pytest-socialbias")
    for pipeline in (".github/workflows/socialbias.yml", ".gitlab-ci.yml"):
        assert f'SOCIALBIAS_VERSION: "{version}"' in (project / pipeline).read_text()
    assert (project / ".gitignore").read_text().splitlines() == [".socialbias/", "reports/"]
    assert "[pytest]" in (project / "pytest.ini").read_text()
    out = capsys.readouterr().out
    assert "wrote suites/smoke.yaml" in out and "pytest suites/ --target=openai:MODEL" in out


def test_a_suite_brings_every_file_it_draws_cases_from(tmp_path):
    files = plan(ROOT, tmp_path, ["benevdial-detect", "dymt"], "none").files
    assert {"suites/benevdial-detect/detect.yaml", "suites/benevdial/dialogues.jsonl", "suites/benevdial/conditions.yaml",
            "suites/benevdial/cues.txt", "suites/dymt/dymt.yaml", "suites/dymt/seeds.yaml"} <= set(files)
    assert not any(name.startswith(".github") or name == ".gitlab-ci.yml" for name in files)


def test_every_suite_keeps_the_thresholds_file_as_shipped():
    text = (ROOT / "thresholds.yaml").read_text(encoding="utf-8")
    assert filter_thresholds(text, set(shipped_suites(ROOT))) == text.rstrip() + "\n"


def test_a_section_heading_goes_with_its_last_gate_and_stays_with_any():
    text = ("version: 1\ngates:\n  # --- A ---\n  - name: a1\n    suite: a\n    metric: error_rate\n    max: 0.1\n"
            "  # why a2\n  - name: a2\n    suite: b\n    metric: error_rate\n    max: 0.1\n"
            "\n  # --- C ---\n  - name: c1\n    suite: c\n    metric: error_rate\n    max: 0.1\n")
    only_b = filter_thresholds(text, {"b"})
    assert "# --- A ---" in only_b and "# why a2" in only_b and "# --- C ---" not in only_b
    assert [g["name"] for g in yaml.safe_load(only_b)["gates"]] == ["a2"]
    only_c = filter_thresholds(text, {"c"})
    assert "# --- A ---" not in only_c and [g["name"] for g in yaml.safe_load(only_c)["gates"]] == ["c1"]


def test_init_keeps_what_exists_and_fits_in_beside_a_project_of_its_own(tmp_path, capsys):
    project = tmp_path / "existing"
    project.mkdir()
    (project / "README.md").write_text("ours\n")
    (project / ".gitlab-ci.yml").write_text("stages: [test]\n")
    (project / "pyproject.toml").write_text("[tool.pytest.ini_options]\ntestpaths = ['tests']\n")
    (project / ".gitignore").write_text("*.pyc\n.socialbias/\n")
    (project / "thresholds.yaml").write_text("gates: []\n")
    assert init(project, "smoke") == 0
    out = capsys.readouterr().out
    assert (project / "README.md").read_text() == "ours\n" and (project / "SOCIALBIAS.md").is_file()
    assert (project / ".gitlab-ci.yml").read_text() == "stages: [test]\n"
    assert (project / ".gitlab" / "socialbias.gitlab-ci.yml").is_file()
    assert "- local: .gitlab/socialbias.gitlab-ci.yml" in out
    assert not (project / "pytest.ini").exists() and "pyproject.toml already configures pytest" in out
    assert (project / ".gitignore").read_text() == "*.pyc\n.socialbias/\nreports/\n"
    assert (project / "thresholds.yaml").read_text() == "gates: []\n"
    assert "kept  thresholds.yaml (exists; --force overwrites it)" in out
    assert init(project, "smoke", force=True) == 0
    assert "smoke-cumulative-bias" in (project / "thresholds.yaml").read_text()


def test_an_unknown_suite_is_one_line_naming_the_shipped_ones(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"no shipped suite named 'smok'; the shipped suites are .*smoke"):
        plan(ROOT, tmp_path, ["smok"], "both")
    assert main(["init", str(tmp_path / "p"), "--suite", "smok"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "init: error: --suite: no shipped suite named 'smok'" in err
    assert not (tmp_path / "p").exists()
    assert main(["init", "--list"]) == 0
    assert "benevdial-detect" in capsys.readouterr().out


def _run_project(python: Path, project: Path, server, *extra: str, clean: bool = False) -> subprocess.CompletedProcess:
    drop = ("OPENAI_", "ANTHROPIC_", "PYTEST_") + (("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") if clean else ())
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(OPENAI_API_KEY="sk-test-not-a-real-key", PYTEST_ADDOPTS="-p no:randomly")
    return subprocess.run(
        [str(python), "-m", "pytest", "suites/", *model_args(server), "-p", "no:cacheprovider",
         "--socialbias-report=reports/socialbias.json", *extra],
        cwd=project, env=env, capture_output=True, text=True, timeout=600,
    )


def test_the_starter_project_runs_as_written(tmp_path, server):
    project = tmp_path / "proj"
    assert init(project, "smoke") == 0
    done = _run_project(Path(sys.executable), project, server)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "socialbias: 3 gate(s) from thresholds.yaml" in done.stdout
    assert (project / ".socialbias" / "calls.sqlite3").is_file() and (project / "reports" / "socialbias.json").is_file()


@pytest.mark.slow
def test_the_built_wheel_carries_the_starter_and_its_project_runs(tmp_path, server):
    """pip install pytest-socialbias brings suites and gates: the wheel is built offline
    from a copy of the checkout, installed (without dependencies: they come from this
    environment) into a fresh virtualenv, and the project its `init` writes runs."""
    source = tmp_path / "source"
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "pytest_socialbias", *SHIPPED):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, timeout=600,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("pytest_socialbias-*.whl"))
    import zipfile

    carried = set(zipfile.ZipFile(wheel).namelist())
    # The simulated-user checks' lexicon and learned reading travel with the package.
    assert {"pytest_socialbias/data/group_terms.yaml", "pytest_socialbias/data/user_turn_model.json",
            "pytest_socialbias/data/user_turn_embed.json"} <= carried

    # The fresh environment sees only what it installed (and the dependencies below).
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                               capture_output=True, text=True, timeout=600, cwd=tmp_path, env=clean)
    assert installed.returncode == 0, installed.stderr[-3000:]
    # The dependencies, from this environment's site-packages (after the venv's own).
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, cwd=tmp_path, env=clean).stdout.strip()
    ours = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "openai").is_dir())
    Path(site, "socialbias-test-deps.pth").write_text(ours + "\n")

    where = subprocess.run([str(python), "-c", "import pytest_socialbias.starter as s; print(s.shipped_root())"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path, env=clean)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()) == Path(site) / "pytest_socialbias" / "_shipped"

    project = tmp_path / "proj"
    done = subprocess.run([str(python), "-m", "pytest_socialbias", "init", str(project), "--suite", "smoke",
                           "--suite", "dymt"], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=clean)
    assert done.returncode == 0, done.stderr
    assert (project / "suites" / "dymt" / "seeds.yaml").is_file()
    assert {g.suite for g in load_gates(project / "thresholds.yaml")} == {"smoke", "dymt", "judge-check"}
    done = _run_project(python, project, server, "-k", "smoke", clean=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "socialbias: 15 gate(s) from thresholds.yaml" in done.stdout  # smoke 2, dymt 12, judge-check 1
    assert "gates: 0 failed of 15" in done.stdout


# --------------------------------------------------------------------------- the starter set, --all, --list, remove


def _plan_total(stdout: str) -> tuple[int, int]:
    """(calls, est. prompt tokens) of the total row of a dry run's table."""
    import re

    row = next(line for line in stdout.splitlines() if line.startswith("total "))
    numbers = [int(n.replace(",", "")) for n in re.findall(r"[\d,]+", row)]
    return numbers[0], numbers[4]  # calls, cached, repeats, to call, prompt tokens, ...


def test_init_writes_the_starter_set_and_prints_what_a_dry_run_of_it_counts(tmp_path, capsys):
    project = tmp_path / "proj"
    assert main(["init", str(project), "--ci", "none"]) == 0
    out = capsys.readouterr().out
    suites = sorted(str(p.relative_to(project)) for p in (project / "suites").rglob("*") if p.is_file())
    assert suites == ["suites/dymt/dymt.yaml", "suites/dymt/seeds.yaml", "suites/smoke.yaml"]  # no FairMT, no baselines
    assert {g.suite for g in load_gates(project / "thresholds.yaml")} == {"smoke", "dymt", "judge-check"}
    assert "(suites: smoke, dymt)" in out
    line = next(line for line in out.splitlines() if line.startswith("one record of these suites"))
    import re

    cases, calls, prompt = (int(n.replace(",", "")) for n in re.search(
        r"([\d,]+) cases, ([\d,]+) calls, est\. ([\d,]+) prompt tokens", line).groups())
    assert cases == 486 and "  smoke: 6 cases" in out and "  dymt: 480 cases" in out
    # The very numbers the project's own dry run prints (no model, no key, no local extra).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PYTEST_"))}
    hide = ("import sys, pytest; from pytest_socialbias.models import local_backend; "
            "local_backend.RUNTIME_MODULE = 'llama_cpp_not_installed'; sys.exit(pytest.main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", hide, "suites/", "--socialbias-dry-run", "-p", "no:randomly",
                           "-p", "no:cacheprovider"], cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "which is not installed here" in done.stdout
    assert _plan_total(done.stdout) == (calls, prompt)


def test_init_all_writes_every_shipped_suite(tmp_path, capsys):
    project = tmp_path / "proj"
    assert init(project, ci="none", every=True) == 0
    out = capsys.readouterr().out
    for path in shipped_suites(ROOT).values():
        assert (project / path).is_file(), path
    assert "suites/dymt/fairmt.yaml" in out and "2,179 cases" in out
    assert main(["init", str(tmp_path / "other"), "--all", "--suite", "smoke"]) == 2
    assert "--all copies every shipped suite" in capsys.readouterr().err


def test_init_list_shows_every_suite_s_cases_and_description(capsys):
    assert main(["init", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name, path in shipped_suites(ROOT).items():
        row = next(i for i, line in enumerate(lines) if line[2:].split()[:1] == [name])
        assert f"{path}" in lines[row] and " cases " in lines[row]
        description = lines[row + 1].strip()
        assert description and description != "(no description)", name
        assert lines[row].startswith("* ") == (name in ("smoke", "dymt"))
    assert any(" dymt " in line and " 480 cases" in line for line in lines)
    assert any(" fairmt " in line and " 0 cases" in line for line in lines)


def test_remove_drops_a_suite_its_own_files_and_its_gates_keeping_the_rest_of_the_file(tmp_path, capsys):
    project = tmp_path / "proj"
    assert init(project, "dymt", "zeroshot", "smoke", ci="none") == 0
    before = (project / "thresholds.yaml").read_text()
    assert main(["remove", "zeroshot", "--dir", str(project)]) == 0
    out = capsys.readouterr().out
    assert not (project / "suites/dymt/zeroshot.yaml").exists()
    assert (project / "suites/dymt/seeds.yaml").is_file() and "kept    suites/dymt/seeds.yaml (another suite reads it)" in out
    after = (project / "thresholds.yaml").read_text()
    assert "zeroshot" not in after
    assert {g.suite for g in load_gates(project / "thresholds.yaml")} == {"smoke", "dymt", "judge-check"}
    # Only the zeroshot gates' lines went: every other line (comments too) is as init wrote it.
    import difflib

    ops = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines()).get_opcodes()
    assert {op for op, *_ in ops} <= {"equal", "delete"}
    deleted = [line for op, i1, i2, _, _ in ops if op == "delete" for line in before.splitlines()[i1:i2]]
    assert "    suite: zeroshot" in deleted and not any("suite:" in line and "zeroshot" not in line for line in deleted)
    assert "removed 2 gate(s) of zeroshot" in out


def test_a_suite_file_deleted_by_hand_is_named_with_the_fix_and_remove_clears_it(tmp_path, server):
    project = tmp_path / "proj"
    assert init(project, "smoke", "zeroshot", ci="none") == 0
    (project / "suites/dymt/zeroshot.yaml").unlink()
    done = _run_project(Path(sys.executable), project, server)
    assert done.returncode == 4  # a gate never disappears silently
    assert "names suite 'zeroshot', which no suite file under" in done.stderr
    assert "python -m pytest_socialbias remove zeroshot" in done.stderr
    assert main(["remove", "zeroshot", "--dir", str(project)]) == 0
    done = _run_project(Path(sys.executable), project, server)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert main(["remove", "zeroshot", "--dir", str(project)]) == 2  # nothing left of it


def test_init_adding_a_suite_to_a_project_says_when_the_kept_gates_lack_it(tmp_path, capsys):
    project = tmp_path / "proj"
    assert init(project, "smoke", ci="none") == 0
    capsys.readouterr()
    assert init(project, "zeroshot", ci="none") == 0
    out = capsys.readouterr().out
    assert "kept  thresholds.yaml" in out and "has no gate for zeroshot" in out
