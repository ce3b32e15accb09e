"""``python -m pytest_socialbias init [DIR]``: a starter project of the shipped suites.

``pip install pytest-socialbias`` brings the plugin; the suites, the gates and the CI
pipelines a team runs it with are files of the team's own repository. ``init`` writes
them: the chosen shipped suites (every file they draw their cases from included, at the
same relative paths), a ``thresholds.yaml`` holding only those suites' gates (comments and
descriptions kept), a ``pytest.ini`` that marks the project root (where the plugin looks
for ``thresholds.yaml`` and keeps ``.socialbias/``), the GitHub Actions and GitLab CI
pipelines with the installed version pinned, ``.gitignore`` lines for the cache and the
reports, and a README stub. No conftest.py is needed: the plugin loads by entry point.

Nothing that exists is overwritten unless ``--force``; each file is listed as written or
kept. Nothing is written through a symbolic link (a file or a folder on the way to it, a
dangling link included) or outside DIR: init stops first, naming it. The wheel carries what is copied under ``pytest_socialbias/_shipped/`` (setup.py
puts it there at build time); a source checkout reads it from the checkout itself.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import yaml

from .errors import ConfigError
from .vocabulary import JUDGE_CHECK_SUITE

#: The folder inside the installed package that holds the starter material (built in by setup.py).
SHIPPED_FOLDER = "_shipped"
#: What the wheel carries, as paths relative to the checkout (and to SHIPPED_FOLDER).
SHIPPED = ("suites", "thresholds.yaml", "docs/ci/github-actions.yml", "docs/ci/gitlab-ci.yml")
#: Suite keys that name a file relative to the suite file, which the suite cannot run without.
FILE_KEYS = ("seeds", "conditions", "dialogues", "cues")
CI_CHOICES = ("github", "gitlab", "both", "none")
GITLAB_INCLUDE = ".gitlab/socialbias.gitlab-ci.yml"
GITIGNORE_LINES = (".socialbias/", "reports/")
#: pytest reads its configuration from the first of these that has a pytest section.
PYTEST_CONFIGS = (("pytest.ini", None), ("pyproject.toml", "[tool.pytest.ini_options]"),
                  ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))
#: The pipelines' pin of the plugin version (`SOCIALBIAS_VERSION: "X.Y.Z"`).
_PIN = re.compile(r'(SOCIALBIAS_VERSION:\s*)"[^"]*"')


def shipped_root() -> Path:
    """The folder holding SHIPPED: inside the installed package (a wheel), else the
    source checkout the package was imported from (an editable install)."""
    package = Path(__file__).resolve().parent
    inside = package / SHIPPED_FOLDER
    if (inside / "thresholds.yaml").is_file():
        return inside
    checkout = package.parent
    if (checkout / "pyproject.toml").is_file() and all((checkout / name).exists() for name in SHIPPED):
        return checkout
    raise ConfigError(
        f"this installation of pytest-socialbias carries no starter files (looked in {inside} and {checkout}); "
        "reinstall it from the wheel: pip install --force-reinstall pytest-socialbias"
    )


def installed_version() -> str:
    try:
        return metadata.version("pytest-socialbias")
    except metadata.PackageNotFoundError:  # imported from a checkout that was never installed
        return "0+unknown"


def shipped_suites(root: Path) -> dict[str, Path]:
    """Suite name -> suite file (relative to ``root``), for every suite under ``root/suites``."""
    suites: dict[str, Path] = {}
    for path in sorted((root / "suites").rglob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "suite" in data and "protocol" in data:
            suites[str(data["suite"])] = path.relative_to(root)
    return suites


def suite_files(root: Path, suite: Path) -> list[Path]:
    """The suite file and every file it names under FILE_KEYS (relative to ``root``)."""
    data = yaml.safe_load((root / suite).read_text(encoding="utf-8"))
    files = [suite]
    for key in FILE_KEYS:
        if isinstance(data.get(key), str):
            named = (root / suite).parent / data[key]
            files.append(Path(posixpath.normpath(named.relative_to(root).as_posix())))
    return files


def filter_thresholds(text: str, keep: set[str]) -> str:
    """The thresholds file's text with only the gates of the suites in ``keep`` (and the
    judge-check gates, which any project can evaluate). Comments stay with the gate they
    precede; a section heading (``# --- ...``) stays when any gate of its section does."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == "gates:"), None)
    if start is None:
        raise ConfigError("the shipped thresholds.yaml has no top-level `gates:` list")
    head, body = lines[: start + 1], lines[start + 1:]
    blocks: list[tuple[list[str], list[str]]] = []  # (leading comments and blanks, the gate's lines)
    leading: list[str] = []
    for line in body:
        if line.startswith("  - "):
            blocks.append((leading, [line]))
            leading = []
        elif line.strip() == "" or line.lstrip().startswith("#"):
            leading.append(line)
        elif blocks:
            blocks[-1][1].append(line)
    out, pending = list(head), []
    for leading_lines, gate_lines in blocks:
        gate = yaml.safe_load("".join(gate_lines))[0]
        heading = [line for line in leading_lines if line.lstrip().startswith("# ---")]
        if heading:
            pending = []  # a new section: an earlier section's unused heading goes
        if gate.get("suite") in keep or gate.get("suite") == JUDGE_CHECK_SUITE:
            out += pending + leading_lines + gate_lines
            pending = []
        elif heading:
            pending = leading_lines
    out += leading  # the file's trailing comments
    return "".join(out).rstrip() + "\n"


@dataclass
class Plan:
    """What ``init`` writes: path (relative to the project) -> text."""

    files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def plan(root: Path, project: Path, suites: list[str], ci: str) -> Plan:
    """What ``init`` would write into ``project`` (read from ``root``, the shipped files)."""
    available = shipped_suites(root)
    unknown = [name for name in suites if name not in available]
    if unknown:
        raise ConfigError(
            f"--suite: no shipped suite named {', '.join(map(repr, unknown))}; the shipped suites are "
            + ", ".join(sorted(available))
        )
    chosen = suites or sorted(available)
    out = Plan()
    for name in chosen:
        for path in suite_files(root, available[name]):
            out.files[str(path)] = (root / path).read_text(encoding="utf-8")
    out.files["thresholds.yaml"] = filter_thresholds((root / "thresholds.yaml").read_text(encoding="utf-8"), set(chosen))
    config = next((name for name, section in PYTEST_CONFIGS if _has_pytest_section(project / name, section)), None)
    if config is None:
        out.files["pytest.ini"] = PYTEST_INI
    else:
        out.notes.append(f"{config} already configures pytest: no pytest.ini written (it would take precedence)")
    version = installed_version()
    pin = (lambda text: _PIN.sub(rf'\g<1>"{version}"', text))
    if ci in ("github", "both"):
        out.files[".github/workflows/socialbias.yml"] = pin((root / "docs/ci/github-actions.yml").read_text(encoding="utf-8"))
    if ci in ("gitlab", "both"):
        gitlab = pin((root / "docs/ci/gitlab-ci.yml").read_text(encoding="utf-8"))
        if (project / ".gitlab-ci.yml").exists():
            out.files[GITLAB_INCLUDE] = gitlab
            out.notes.append(
                f".gitlab-ci.yml exists: the pipeline is in {GITLAB_INCLUDE}; add to .gitlab-ci.yml:\n"
                f"      include:\n        - local: {GITLAB_INCLUDE}"
            )
        else:
            out.files[".gitlab-ci.yml"] = gitlab
    gitignore = project / ".gitignore"
    present = gitignore.read_text(encoding="utf-8").splitlines() if gitignore.is_file() else []
    missing = [line for line in GITIGNORE_LINES if line not in present]
    if missing:
        out.files[".gitignore"] = "".join(line + "\n" for line in present) + "".join(line + "\n" for line in missing)
    readme = "README.md" if not (project / "README.md").exists() else "SOCIALBIAS.md"
    out.files[readme] = README.format(suites=", ".join(chosen), version=version)
    return out


def _has_pytest_section(path: Path, section: str | None) -> bool:
    if not path.is_file():
        return False
    return section is None or section in path.read_text(encoding="utf-8", errors="replace")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", nargs="?", type=Path, default=Path("."), metavar="DIR",
                        help="the project folder to write into (default: the current folder; created if missing)")
    parser.add_argument("--suite", action="append", default=[], metavar="NAME", dest="suites",
                        help="a shipped suite to copy (repeatable; default: all of them; --list names them)")
    parser.add_argument("--ci", choices=CI_CHOICES, default="both",
                        help="which CI pipeline files to write (default both)")
    parser.add_argument("--force", action="store_true", help="overwrite files that exist (default: keep them)")
    parser.add_argument("--list", action="store_true", dest="list_suites",
                        help="list the shipped suites and exit")


def run(args: argparse.Namespace) -> int:
    root = shipped_root()
    if args.list_suites:
        for name, path in sorted(shipped_suites(root).items()):
            description = (yaml.safe_load((root / path).read_text(encoding="utf-8")) or {}).get("description", "")
            print(f"{name:18} {path}  {description}")
        return 0
    project: Path = args.directory
    if project.exists() and not project.is_dir():
        raise ConfigError(f"init {project}: not a folder; name a folder to write the project into")
    todo = plan(root, project, args.suites, args.ci)
    for relative in todo.files:
        check_target(project, relative)  # all of them before any is written
    written, kept = [], []
    for relative, text in todo.files.items():
        target = project / relative
        if target.exists() and not args.force and relative != ".gitignore":
            kept.append(relative)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        write_new(target, text)
        written.append(relative)
    print(f"pytest-socialbias {installed_version()}: starter project in {project}")
    for relative in written:
        print(f"  wrote {relative}")
    for relative in kept:
        print(f"  kept  {relative} (exists; --force overwrites it)")
    for note in todo.notes:
        print(f"  note: {note}")
    where = "" if project == Path(".") else f"cd {project} && "
    print("next:")
    print(f"  {where}pytest suites/ --socialbias-dry-run          # what would run, no model called")
    print(f"  {where}pytest suites/ --target=openai:MODEL --judge=openai:JUDGE -n 4")
    print("  then set TARGET and JUDGE in the CI file(s) and store OPENAI_API_KEY as a CI secret")
    return 0


def check_target(project: Path, relative: str) -> None:
    """ConfigError unless ``relative`` names a place inside ``project`` reached through no
    symbolic link (a folder on the way, or the file itself, dangling or not): init writes
    what it is told into the project, never through a link to wherever it points."""
    parts = Path(relative).parts
    if Path(relative).is_absolute() or ".." in parts:
        raise ConfigError(f"init {project}: {relative} is not inside the project folder; init writes only there")
    place = project
    for part in parts:
        place = place / part
        if place.is_symlink():
            raise ConfigError(
                f"init {project}: {place.relative_to(project)} is a symbolic link (to {os.readlink(place)}); init "
                "writes nothing through a link, which could point anywhere: remove the link, or init another folder"
            )
        if not place.exists():
            return  # nothing below a missing folder can be a link yet


def write_new(target: Path, text: str) -> None:
    """Write ``text`` to ``target``, refusing to follow a link put there since it was
    checked (O_NOFOLLOW, where the system has it)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(target, flags, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(text)


PYTEST_INI = """\
# Written by `python -m pytest_socialbias init`. This file marks the project root: the
# plugin reads thresholds.yaml and keeps its record/replay cache (.socialbias/) here.
# Suites run when named on the command line (`pytest suites/ --target=...`) or when a
# model option is given; uncomment the line below to make a bare `pytest` run them too.
[pytest]
# socialbias_suites = suites
"""

README = """\
# Social-bias release gate

Written by `python -m pytest_socialbias init` (pytest-socialbias {version}).

- `suites/`: the suites this project runs ({suites}). Their stereotypes are test data
  for measurement, written by the pytest-socialbias authors; edit, add or remove cases
  freely (`pytest suites/ --socialbias-dry-run` checks them without calling a model).
- `thresholds.yaml`: the release gates of these suites; each says why its bound is
  where it is. A gate that cannot decide (no evidence) fails the run, and so does a
  suite no gate names: a suite you add needs gates here (or a line under `ungated:` saying
  why nothing gates it). A run of part of a suite (`-k`, `-m`, node ids) never passes.
- `.github/workflows/socialbias.yml` and/or `.gitlab-ci.yml`: record against the real
  models on a schedule, replay the recorded answers on every pull or merge request.
  Set `TARGET` and `JUDGE` there and store `OPENAI_API_KEY` as a CI secret.

Run it by hand:

    pip install "pytest-socialbias=={version}"
    pytest suites/ --target=openai:my-model --judge=openai:gpt-4o-mini -n 4 \\
        --socialbias-report=reports/socialbias.json --socialbias-html=reports/socialbias.html

Exit status 0: no gate crossed; 1: a gate crossed or a case errored (the terminal's
"socialbias summary" says which); 4: a usage error (the message names the fix).
"""
