"""Checks before any worker starts or any model is called (controller only).

* Suite files named on the command line (or found under the folders named there) are
  loaded once, so a broken suite file is a usage error (exit status 4) naming the file,
  the line and the fix, with ``-n 0`` and ``-n N`` alike, instead of a collection error
  that only some workers see.
* Every gate in the thresholds file must name a suite defined by some suite file of the
  project (any YAML file under the rootdir marked ``socialbias: 1``), or ``judge-check``:
  a misspelt suite name would otherwise leave its gate silently not evaluated.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import ConfigError
from .files import looks_like_suite, read_yaml, yaml_line
from .protocols import load_suite
from .vocabulary import JUDGE_CHECK_SUITE

#: Folders never searched for suite files.
SKIPPED_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "env", "node_modules", "__pycache__", ".tox", ".nox",
                ".pytest_cache", ".socialbias", "site-packages", "build", "dist", "__snapshots__"}
SPECIAL_SUITES = (JUDGE_CHECK_SUITE,)
_SUITE_NAME = re.compile(r"^suite\s*:\s*['\"]?([A-Za-z0-9_-]+)['\"]?\s*(#.*)?$", re.MULTILINE)


def suite_files(paths: list[Path], ignored: list[Path]) -> list[Path]:
    """Suite files among ``paths`` (files, or folders searched recursively)."""
    out = []
    for path in paths:
        if path.is_file():
            if looks_like_suite(path):
                out.append(path)
            continue
        if not path.is_dir():
            continue
        for folder, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")
                             and Path(folder, d).resolve() not in ignored)
            for name in sorted(files):
                candidate = Path(folder, name)
                if candidate.resolve() not in ignored and looks_like_suite(candidate):
                    out.append(candidate)
    return out


def project_suite_names(root: Path) -> set[str]:
    """Names of the suites defined anywhere under ``root`` (cheap: the ``suite:`` line)."""
    names = set()
    for path in suite_files([root], []):
        try:
            head = path.read_text(encoding="utf-8", errors="replace")[:65536]
        except OSError:
            continue
        match = _SUITE_NAME.search(head)
        if match:
            names.add(match.group(1))
    return names


def check_suites(paths: list[Path], ignored: list[Path], overrides) -> None:
    """Load every suite file the run will collect, with the options' overrides (the very
    object collection uses); ConfigError on the first broken one."""
    for path in suite_files(paths, ignored):
        load_suite(path, overrides)


def check_gate_suites(gates, thresholds: Path, root: Path) -> None:
    """ConfigError naming the gate's line when it names a suite no suite file defines."""
    if not gates:
        return
    known = project_suite_names(root) | set(SPECIAL_SUITES)
    _, node = read_yaml(thresholds, "thresholds file")
    for index, gate in enumerate(gates):
        if gate.suite not in known:
            line = yaml_line(node, ["gates", index, "suite"])
            listed = ", ".join(sorted(known)) or "none found"
            raise ConfigError(
                f"{thresholds}:{line}: gate {gate.name!r} names suite {gate.suite!r}, which no suite file "
                f"under {root} defines (known suites: {listed}); fix the name or remove the gate"
            )
