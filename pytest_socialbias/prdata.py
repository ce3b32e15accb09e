"""``python -m pytest_socialbias pr-data PR_TREE``: a pull request's suites and gates,
taken into a trusted checkout as data only.

The CI recipes' record job for pull requests runs with the API keys, after a maintainer's
approval. It runs the pinned plugin from a clean checkout of the base branch, and takes
from the pull request (checked out into ``PR_TREE``, never run) only data: what lies under
the paths named (``suites`` and ``thresholds.yaml`` by default), each a regular file with a
data suffix. Anything else there (a ``.py`` file, a ``conftest.py``, a symbolic link)
stops it before anything is copied, naming every offending path: code of the pull request
never runs beside the keys, and no link makes the run read the rest of the machine.

With ``--pipeline``, the pull request's own pipeline file (the first of those named that
it has) is read, never run, for the target, the judge and the plugin pin it sets, so that a
pull request that changes the target is recorded for the target it names. A value that
differs from the base's (the environment's) is taken only when it is plain: ``openai:`` or
``anthropic:`` and a model name (no base URL, which would send the key to another server,
and no parameters), or a release version. ``--output`` gets the values the record uses, the
pull request's or else the base's, as ``NAME=value`` lines (``$GITHUB_OUTPUT`` on GitHub; a
file the job sources on GitLab).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import stat
from pathlib import Path, PurePosixPath

import yaml

from .errors import ConfigError

#: What the pull request's data paths may hold: suite, seed, gate and prompt files.
DATA_SUFFIXES = (".yaml", ".yml", ".json", ".jsonl", ".csv", ".txt", ".md")
DEFAULT_PATHS = ("suites", "thresholds.yaml")
#: Pipeline variables a pull request may change (read from its pipeline file).
PIPELINE_VARIABLES = ("TARGET", "JUDGE", "SOCIALBIAS_VERSION")
#: A model spec the record job for pull requests takes from a pull request: a provider
#: whose key the job holds and a model name; no ``@BASE_URL`` and no ``?parameters``.
PLAIN_SPEC = re.compile(r"(openai|anthropic):[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}")
#: A release version of the plugin (what pip installs from the registry under the pin).
RELEASE = re.compile(r"[0-9]+(\.[0-9]+){0,3}((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tree", type=Path, metavar="PR_TREE",
                        help="the pull request's checkout (read, never run)")
    parser.add_argument("--paths", nargs="+", default=list(DEFAULT_PATHS), metavar="PATH",
                        help="the data paths to take, relative to both checkouts (default: suites thresholds.yaml)")
    parser.add_argument("--into", type=Path, default=Path("."), metavar="DIR",
                        help="the trusted checkout they replace (default: the current folder)")
    parser.add_argument("--pipeline", nargs="+", metavar="PATH",
                        help="pipeline files inside PR_TREE: the first it has gives TARGET, JUDGE and SOCIALBIAS_VERSION")
    parser.add_argument("--output", type=Path, metavar="FILE",
                        help="append the values the record uses to FILE as NAME=value lines ($GITHUB_OUTPUT)")


def _relative(path: str) -> PurePosixPath:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise ConfigError(f"pr-data --paths {path!r}: name a path inside the checkout (relative, no ..)")
    return pure


def not_data(tree: Path, paths: list[PurePosixPath]) -> list[str]:
    """Each entry under ``tree``'s ``paths`` that is not a regular data file, with why."""
    problems = []
    for relative in paths:
        top = tree / relative
        if not top.is_symlink() and not top.exists():
            continue  # the pull request removes it
        entries = [top]
        if top.is_dir() and not top.is_symlink():
            for folder, dirs, files in os.walk(top):
                entries += [Path(folder) / name for name in sorted(dirs) + sorted(files)]
        for entry in entries:
            mode = entry.lstat().st_mode
            shown = entry.relative_to(tree).as_posix()
            if stat.S_ISLNK(mode):
                problems.append(f"{shown} (a symbolic link, to {os.readlink(entry)})")
            elif stat.S_ISDIR(mode):
                continue
            elif not stat.S_ISREG(mode):
                problems.append(f"{shown} (not a regular file)")
            elif entry.suffix.lower() not in DATA_SUFFIXES:
                problems.append(f"{shown} (a {entry.suffix or 'suffix-less'} file, not data)")
    return problems


def pipeline_values(tree: Path, pipelines: list[str], environ: dict) -> tuple[dict, list[str]]:
    """(values the pull request's pipeline file changes and may change, problems)."""
    present = [p for p in pipelines if (tree / _relative(p)).is_file() and not (tree / _relative(p)).is_symlink()]
    if not present:
        return {}, []  # no pipeline file of its own: the base's values hold
    pipeline = present[0]
    path = tree / pipeline
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        return {}, [f"{pipeline}: not readable as YAML ({exc})"]
    variables = (data.get("env") or data.get("variables") or {}) if isinstance(data, dict) else {}
    taken, problems = {}, []
    for name in PIPELINE_VARIABLES:
        if name not in variables or variables[name] is None:
            continue
        value = str(variables[name]).strip()
        if value == environ.get(name, ""):
            continue
        plain = RELEASE if name == "SOCIALBIAS_VERSION" else PLAIN_SPEC
        if plain.fullmatch(value):
            taken[name] = value
        elif name == "SOCIALBIAS_VERSION":
            problems.append(f"{pipeline}: {name}: {value!r} is not a release version (e.g. 0.2.0)")
        else:
            problems.append(
                f"{pipeline}: {name}: {value!r} is not openai:MODEL or anthropic:MODEL; a base URL or parameters "
                "changed by a pull request could send the key to another server"
            )
    return taken, problems


def take(tree: Path, into: Path, paths: list[str], pipelines: list[str] | None = None,
         environ: dict | None = None) -> tuple[list[str], dict]:
    """Replace ``into``'s ``paths`` by the pull request's, data only; ConfigError naming
    every problem first, before anything is copied. (lines saying what was taken, the
    pipeline values the pull request changes)."""
    environ = dict(os.environ) if environ is None else environ
    if not tree.is_dir():
        raise ConfigError(f"pr-data {tree}: not a folder; check out the pull request there first")
    relatives = [_relative(p) for p in paths]
    problems = [f"{tree / p}" for p in not_data(tree, relatives)]
    values, pipeline_problems = pipeline_values(tree, pipelines, environ) if pipelines else ({}, [])
    if problems or pipeline_problems:
        lines = []
        if problems:
            lines.append(
                f"the pull request's {' '.join(paths)} must hold data files only ({' '.join(DATA_SUFFIXES)}), and "
                "these are not: " + "; ".join(problems)
            )
        lines += pipeline_problems
        raise ConfigError(
            "pr-data: " + "\n  ".join(lines) + "\nThe record job for pull requests runs beside the API keys and takes "
            "data only: remove these from the pull request, or let the record job on the default branch record it "
            "after the merge."
        )
    said = []
    for relative in relatives:
        source, target = tree / relative, into / relative
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        if not source.exists():
            said.append(f"{relative}: removed (the pull request removes it)")
        elif source.is_dir():
            shutil.copytree(source, target, symlinks=True)
            count = sum(1 for entry in target.rglob("*") if entry.is_file())
            said.append(f"{relative}/: {count} file(s) from the pull request")
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            said.append(f"{relative}: from the pull request")
    said += [f"{name}={value} (the pull request's pipeline)" for name, value in values.items()]
    return said, values


def run(args: argparse.Namespace) -> int:
    said, values = take(args.tree, args.into, args.paths, args.pipeline)
    if args.output is not None:
        used = {name: values.get(name, os.environ.get(name)) for name in PIPELINE_VARIABLES}
        with open(args.output, "a", encoding="utf-8") as handle:
            handle.writelines(f"{name}={value}\n" for name, value in used.items() if value)
    print("pr-data: took, as data only:")
    for line in said:
        print(f"  {line}")
    return 0
