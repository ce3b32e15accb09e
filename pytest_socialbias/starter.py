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
#: What ``init`` writes with no --suite and no --all: the smoke suite (a minute's proof that
#: the pipe works) and DyMT (the multi-turn measurement). Not the FairMT suites, which are
#: empty without the official release, nor every baseline (2,179 cases in all).
STARTER_SUITES = ("smoke", "dymt")
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
    suites: list[str] = field(default_factory=list)  # the suites it copies


def plan(root: Path, project: Path, suites: list[str], ci: str) -> Plan:
    """What ``init`` would write into ``project`` (read from ``root``, the shipped files):
    the suites named, or the starter set (STARTER_SUITES) when none is."""
    available = shipped_suites(root)
    unknown = [name for name in suites if name not in available]
    if unknown:
        raise ConfigError(
            f"--suite: no shipped suite named {', '.join(map(repr, unknown))}; the shipped suites are "
            + ", ".join(sorted(available))
        )
    chosen = suites or [name for name in STARTER_SUITES if name in available]
    out = Plan(suites=list(chosen))
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
                        help="a shipped suite to copy (repeatable; default: the starter set, "
                        f"{' and '.join(STARTER_SUITES)}; --list names them all)")
    parser.add_argument("--all", action="store_true", dest="all_suites",
                        help="copy every shipped suite (the FairMT ones are empty without the official release)")
    parser.add_argument("--ci", choices=CI_CHOICES, default="both",
                        help="which CI pipeline files to write (default both)")
    parser.add_argument("--force", action="store_true", help="overwrite files that exist (default: keep them)")
    parser.add_argument("--list", action="store_true", dest="list_suites",
                        help="list the shipped suites (cases, description, the starter set marked) and exit")


def run(args: argparse.Namespace) -> int:
    root = shipped_root()
    if args.list_suites:
        for line in list_lines(root):
            print(line)
        return 0
    project: Path = args.directory
    if project.exists() and not project.is_dir():
        raise ConfigError(f"init {project}: not a folder; name a folder to write the project into")
    every = getattr(args, "all_suites", False)
    if every and args.suites:
        raise ConfigError("--all copies every shipped suite: leave out --suite, or leave out --all")
    todo = plan(root, project, sorted(shipped_suites(root)) if every else args.suites, args.ci)
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
    chosen = todo.suites
    print(f"pytest-socialbias {installed_version()}: starter project in {project} (suites: {', '.join(chosen)})")
    for relative in written:
        print(f"  wrote {relative}")
    for relative in kept:
        print(f"  kept  {relative} (exists; --force overwrites it)")
    if "thresholds.yaml" in kept:
        lacking = _ungated_in(project / "thresholds.yaml", chosen)
        if lacking:
            print(f"  note: the thresholds.yaml kept has no gate for {', '.join(lacking)}, so a run of it fails "
                  "until one is added (the shipped gates are in `init --force`'s thresholds.yaml)")
    for note in todo.notes:
        print(f"  note: {note}")
    for line in cost_lines(root, chosen):
        print(line)
    where = "" if project == Path(".") else f"cd {project} && "
    print("next:")
    print(f"  {where}pytest suites/ --socialbias-dry-run          # what would run, no model called")
    print(f"  {where}pytest suites/ --target=openai:MODEL --judge=openai:JUDGE -n 4")
    print("  then set TARGET and JUDGE in the CI file(s) and store OPENAI_API_KEY as a CI secret")
    print(f"  more suites: {PROG_INIT} --list, then {PROG_INIT} --suite NAME; drop one: {PROG_REMOVE} NAME")
    return 0


PROG_INIT = "python -m pytest_socialbias init"
PROG_REMOVE = "python -m pytest_socialbias remove"


def _ungated_in(thresholds: Path, suites: list[str]) -> list[str]:
    """The suites among ``suites`` that the thresholds file names in no gate and does not
    declare ungated (best effort: a file that does not read names none)."""
    try:
        data = yaml.safe_load(thresholds.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return []
    gates = data.get("gates") if isinstance(data, dict) else None
    gated = {gate.get("suite") for gate in gates or [] if isinstance(gate, dict)}
    declared = data.get("ungated") if isinstance(data, dict) and isinstance(data.get("ungated"), dict) else {}
    return [name for name in suites if name not in gated and name not in declared]


def list_lines(root: Path) -> list[str]:
    """``init --list``: every shipped suite with its cases, the starter set marked, its
    file and its description."""
    from .protocols import load_suite

    lines = []
    for name, path in sorted(shipped_suites(root).items()):
        data = yaml.safe_load((root / path).read_text(encoding="utf-8")) or {}
        try:
            cases = len(load_suite(root / path).cases)
        except ConfigError:
            cases = None
        count = "?" if cases is None else f"{cases:,}"
        mark = "*" if name in STARTER_SUITES else " "
        lines.append(f"{mark} {name:17} {count:>6} cases  {path}")
        lines.append(f"    {data.get('description', '(no description)')}")
    lines.append(f"* the starter set, written by `init` with no --suite ({', '.join(STARTER_SUITES)}); --all writes every suite")
    return lines


def cost_lines(root: Path, suites: list[str]) -> list[str]:
    """What one record of ``suites`` sends, counted by the dry-run planner (no model is
    called): cases, calls per role, estimated prompt and completion tokens; the same
    numbers `pytest suites/ --socialbias-dry-run` prints for the project."""
    totals, per_suite = plan_cost(root, suites)
    if not totals["cases"]:
        return []
    roles = totals["usage"]
    calls = sum(u["calls"] for u in roles.values())
    prompt = sum(u["prompt_tokens"] for u in roles.values())
    completion = sum(u["completion_tokens"] for u in roles.values())
    lines = [f"one record of these suites (planned like --socialbias-dry-run, no model called): "
             f"{totals['cases']:,} cases, {calls:,} calls, est. {prompt:,} prompt tokens and at most "
             f"{completion:,} completion tokens"]
    lines += [f"  {name}: {entry['cases']:,} cases, {entry['calls']:,} calls, est. {entry['prompt_tokens']:,} prompt tokens"
              for name, entry in per_suite.items()]
    lines.append("  by role: " + ", ".join(f"{role} {u['calls']:,}" for role, u in sorted(roles.items()))
                 + " calls (prompts at 4 characters per token; completions at each role's max_tokens)")
    return lines


def plan_cost(root: Path, suites: list[str]) -> tuple[dict, dict]:
    """(the whole plan, suite -> its cases, calls and prompt tokens), planned on
    placeholder models (modelset.ModelSet.use_placeholders): no model, key or extra needed."""
    from .modelset import ModelSet
    from .options import Settings
    from .protocols import load_suite
    from .worker import CaseRunner

    available = shipped_suites(root)
    loaded = {name: load_suite(root / available[name]).cases for name in suites if name in available}
    models = ModelSet(Settings(dry_run=True, record="off"))
    whole: dict = {"cases": 0, "usage": {}}
    per_suite = {}
    try:
        models.use_placeholders("init plans what it wrote")
        runner = CaseRunner(models)
        for name, cases in loaded.items():
            if not cases:
                continue
            usage = runner.dry_run_plan(cases)["usage"]
            per_suite[name] = {"cases": len(cases), "calls": sum(u["calls"] for u in usage.values()),
                               "prompt_tokens": sum(u["prompt_tokens"] for u in usage.values())}
            whole["cases"] += len(cases)
            for role, counts in usage.items():
                total = whole["usage"].setdefault(role, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
                for key in total:
                    total[key] += counts[key]
    finally:
        models.close()
    return whole, per_suite


# --------------------------------------------------------------------------- remove


def add_remove_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="+", metavar="SUITE", help="the `suite:` name of each suite to remove")
    parser.add_argument("--dir", type=Path, default=Path("."), dest="directory", metavar="DIR",
                        help="the project folder (default: the current folder)")
    parser.add_argument("--thresholds", type=Path, default=None, metavar="PATH",
                        help="the gates file to edit (default: DIR/thresholds.yaml)")


def run_remove(args: argparse.Namespace) -> int:
    """``remove SUITE...``: delete a suite from a project: its suite file, the files only it
    reads, its snapshot file, and its gates (and ``ungated:`` entry) in the thresholds file,
    whose other lines, comments included, stay as they are. A suite whose file is already
    gone has its gates removed all the same."""
    from .preflight import suite_files as project_suite_files

    project: Path = args.directory
    if not project.is_dir():
        raise ConfigError(f"remove --dir {project}: not a folder")
    thresholds = args.thresholds or project / "thresholds.yaml"
    names = list(dict.fromkeys(args.names))
    defined: dict[str, list[Path]] = {}
    for path in project_suite_files([project], []):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and "suite" in data:
            defined.setdefault(str(data["suite"]), []).append(path)
    gated = _gate_suites(thresholds)
    unknown = [name for name in names if name not in defined and name not in gated]
    if unknown:
        from .gates import did_you_mean

        known = sorted(set(defined) | gated)
        raise ConfigError(
            f"no suite file under {project} defines {', '.join(map(repr, unknown))} and no gate of {thresholds} names it"
            f"{did_you_mean(unknown[0], known)}; the project's suites: {', '.join(known) or 'none'}"
        )
    doomed = [path for name in names for path in defined.get(name, [])]
    kept_files = {named for name, paths in defined.items() if name not in names for path in paths
                  for named in _named_files(path)}
    removed = []
    for suite_file in doomed:
        for path in [suite_file, *_named_files(suite_file)]:
            relative = os.path.relpath(path, project)
            check_target(project, relative)
            if path.resolve() in kept_files:
                print(f"  kept    {relative} (another suite reads it)")
            elif path.is_file():
                path.unlink()
                removed.append(relative)
        snapshot = suite_file.parent / "__snapshots__" / f"{suite_file.stem}.ambr"
        if snapshot.is_file() and not snapshot.is_symlink():
            snapshot.unlink()
            removed.append(os.path.relpath(snapshot, project))
    for relative in removed:
        print(f"  removed {relative}")
    if thresholds.is_file():
        text = thresholds.read_text(encoding="utf-8")
        dropped = [name for name in names if name in gated]
        undeclared = [name for name in names if name in _ungated_suites(text)]
        if dropped or undeclared:
            new = remove_from_thresholds(text, set(names))
            write_new(thresholds, new)
            before, after = _gate_count(text), _gate_count(new)
            print(f"  edited  {os.path.relpath(thresholds, project)}: removed {before - after} gate(s) of "
                  f"{', '.join(dropped) or 'no suite'}" + (f" and the ungated entry of {', '.join(undeclared)}" if undeclared else ""))
    print(f"removed suite(s) {', '.join(names)} from {project}")
    return 0


def _named_files(suite_file: Path) -> list[Path]:
    """The files a suite file reads (FILE_KEYS), resolved; those outside its folder's
    project are left alone by the caller's check."""
    try:
        data = yaml.safe_load(suite_file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return []
    return [(suite_file.parent / data[key]).resolve() for key in FILE_KEYS if isinstance(data.get(key), str)]


def _gate_suites(thresholds: Path) -> set:
    try:
        data = yaml.safe_load(thresholds.read_text(encoding="utf-8")) if thresholds.is_file() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{thresholds}: not valid YAML ({exc}); fix it first") from None
    gates = data.get("gates") if isinstance(data, dict) else None
    return {str(gate.get("suite")) for gate in gates or [] if isinstance(gate, dict)}


def _ungated_suites(text: str) -> set:
    data = yaml.safe_load(text)
    declared = data.get("ungated") if isinstance(data, dict) else None
    return set(declared) if isinstance(declared, dict) else set()


def _gate_count(text: str) -> int:
    data = yaml.safe_load(text)
    return len(data.get("gates") or []) if isinstance(data, dict) else 0


def remove_from_thresholds(text: str, suites: set) -> str:
    """The thresholds file's text without the gates of ``suites`` and their ``ungated:``
    entries; every other line stays (filter_thresholds keeps comments with their gate)."""
    keep = _gate_suites_of(text) - suites
    out = filter_thresholds(text, keep) if _gate_suites_of(text) & suites else text
    lines, inside, result = out.splitlines(keepends=True), False, []
    for line in lines:
        if re.match(r"^ungated\s*:", line):
            inside = True
        elif inside and line.strip() and not line.startswith((" ", "\t", "#")):
            inside = False
        match = re.match(r"^\s+['\"]?([A-Za-z0-9_-]+)['\"]?\s*:", line) if inside else None
        if match and match.group(1) in suites:
            continue
        result.append(line)
    new = "".join(result)
    data = yaml.safe_load(new)
    if isinstance(data, dict) and isinstance(data.get("ungated"), dict) and set(data["ungated"]) & suites:
        raise ConfigError("the thresholds file's ungated: entries are not one per line; remove the suite's entry by hand")
    if isinstance(data, dict) and data.get("ungated") is None and "ungated" in (data or {}):
        new = re.sub(r"(?m)^ungated\s*:\s*\n", "", new)  # an emptied block
    return new


def _gate_suites_of(text: str) -> set:
    data = yaml.safe_load(text)
    gates = data.get("gates") if isinstance(data, dict) else None
    return {str(gate.get("suite")) for gate in gates or [] if isinstance(gate, dict)}


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
  `python -m pytest_socialbias init --list` shows the other shipped suites and
  `init --suite NAME` adds one; `python -m pytest_socialbias remove NAME` drops a suite
  with its gates (a suite file deleted by hand leaves gates that stop the next run).
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
