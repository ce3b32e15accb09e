"""Suite files -> typed cases, validated with jsonschema.

A YAML file is a suite when its top level has ``socialbias: 1``. Errors name the file,
the line, the path inside the document and what was expected.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from .errors import ConfigError

CATEGORIES = ("age", "appearance", "disability", "gender", "race", "religion")
STYLES = ("assessment", "implicit")
DEFAULT_TURNS = 1
DEFAULT_BATCH_SIZE = 64

_MARKER = re.compile(r"^socialbias\s*:", re.MULTILINE)


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    text = resources.files("pytest_socialbias").joinpath("schemas", f"{name}.schema.json").read_text("utf-8")
    return json.loads(text)


def looks_like_suite(path: Path) -> bool:
    """Cheap check before parsing: only YAML files marked ``socialbias:`` are suites."""
    if path.suffix not in (".yaml", ".yml"):
        return False
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            head = handle.read(65536)
    except OSError:
        return False
    return bool(_MARKER.search(head))


@dataclass(frozen=True)
class Case:
    """One case of a suite in one user-simulator style (style None where none applies)."""

    suite: str
    protocol: str
    id: str
    category: str
    group: str
    statement: str
    style: str | None = None
    turns: int = DEFAULT_TURNS

    @property
    def key(self) -> str:
        """Unique within a run: suite, case id and style."""
        return f"{self.suite}::{self.id}" + (f"[{self.style}]" if self.style else "")

    def to_dict(self) -> dict:
        return {
            "suite": self.suite,
            "protocol": self.protocol,
            "id": self.id,
            "category": self.category,
            "group": self.group,
            "statement": self.statement,
            "style": self.style,
            "turns": self.turns,
        }


@dataclass
class Suite:
    path: Path
    name: str
    protocol: str
    turns: int
    styles: tuple
    batch_size: int
    cases: list = field(default_factory=list)  # list[Case], sorted by (id, style)


def yaml_line(root: yaml.Node | None, path) -> int:
    """1-based line of the node at ``path`` in the composed YAML tree (best effort)."""
    node = root
    for part in path:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            node = None
        if node is None:
            break
    if node is None:
        node = root
    return node.start_mark.line + 1 if node is not None else 1


def _path_text(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def validate(data, schema_name: str, source: str, root_node=None) -> None:
    """Validate ``data``; raise ConfigError naming file, line, path and the expectation."""
    validator = jsonschema.Draft202012Validator(load_schema(schema_name))
    errors = sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if not errors:
        return
    first = jsonschema.exceptions.best_match(errors)
    line = yaml_line(root_node, list(first.absolute_path))
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    raise ConfigError(f"{source}:{line}: at {_path_text(first.absolute_path)}: {first.message}{more}")


def read_yaml(path: Path, what: str):
    """Parse a YAML file; return (data, composed node tree) or raise ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}{line}: {what} is not valid YAML: {problem}") from None
    return data, node


def load_suite(path: str | Path) -> Suite:
    path = Path(path)
    data, node = read_yaml(path, "suite file")
    validate(data, "suite", str(path), node)
    turns = data.get("turns", DEFAULT_TURNS)
    styles = tuple(data.get("styles") or (None,))
    seen: dict[str, int] = {}
    cases = []
    for index, raw in enumerate(data["cases"]):
        if raw["id"] in seen:
            line = yaml_line(node, ["cases", index, "id"])
            raise ConfigError(
                f"{path}:{line}: duplicate case id {raw['id']!r} (first at "
                f"cases[{seen[raw['id']]}]); case ids must be unique within a suite"
            )
        seen[raw["id"]] = index
        for style in styles:
            cases.append(
                Case(
                    suite=data["suite"],
                    protocol=data["protocol"],
                    id=raw["id"],
                    category=raw["category"],
                    group=raw["group"],
                    statement=raw["statement"],
                    style=style,
                    turns=turns,
                )
            )
    # Sorted, so that every xdist worker collects the same list in the same order.
    cases.sort(key=lambda c: (c.id, c.style or ""))
    return Suite(
        path=path,
        name=data["suite"],
        protocol=data["protocol"],
        turns=turns,
        styles=styles,
        batch_size=data.get("batch_size", DEFAULT_BATCH_SIZE),
        cases=cases,
    )
