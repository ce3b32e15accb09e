"""Reading and validating the files users write: the one leaf every loader imports.

Suite files, seeds files, conditions files, thresholds files and JSONL files (labelled
dialogues, judge reference labels) all come through here, so every error names the same
way: the file, the line, the place inside the document, what was expected.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tempfile
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from .errors import ConfigError

#: A YAML file is a suite when its top level has this key (``socialbias: 1``).
# ``socialbias:`` at the start of a line, also as the first key of a flow-style mapping
# (``{socialbias: 1, ...}``) or quoted (``"socialbias": 1``).
_SUITE_MARKER = re.compile(r"^(?:\{\s*)?[\"']?socialbias[\"']?\s*:", re.MULTILINE)


@lru_cache(maxsize=None)  # process-wide: files the package ships, which no run changes
def load_schema(name: str) -> dict:
    """A JSON schema shipped in the package (``schemas/NAME.schema.json``)."""
    text = resources.files("pytest_socialbias").joinpath("schemas", f"{name}.schema.json").read_text("utf-8")
    return json.loads(text)


def joined_path(base: Path, raw) -> Path:
    """``raw`` (a path the user wrote) under ``base``, normalised as pytest normalises the
    paths it is given (``my-gate/../bad/x.yaml`` is ``bad/x.yaml``), so that messages and
    reports name it as it is."""
    return Path(os.path.normpath(Path(base) / raw))


def shown_path(path: Path) -> str:
    """A path as the user would write it: normalised (``a/../b`` is ``b``), relative to the
    working directory when inside it."""
    path = Path(os.path.normpath(path))
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def looks_like_suite(path: Path) -> bool:
    """Cheap check before parsing: only YAML files marked ``socialbias:`` are suites."""
    if path.suffix not in (".yaml", ".yml"):
        return False
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            head = handle.read(65536)
    except OSError:
        return False
    return bool(_SUITE_MARKER.search(head))


#: PyYAML's C (libyaml) safe loader where it is built in, else the pure-Python one.
FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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


def path_text(path) -> str:
    """A place inside a document as a user reads it: ``cases[3].statement``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


#: How many schema problems one error message lists (the rest are counted).
MAX_PROBLEMS = 10


class SchemaProblems(ConfigError):
    """A file that breaks its schema: the message, and every problem found as
    ``(path inside the document, line, "source:line: at PATH: what", validator)`` in ``found``."""

    def __init__(self, message: str, found: list):
        super().__init__(message)
        self.found = found


def validate(data, schema_name: str, source: str, root_node=None, limit: int | None = MAX_PROBLEMS) -> None:
    """Validate ``data``; raise SchemaProblems (a ConfigError) naming file, line, path and
    the expectation of the most relevant problem, then every other one (up to ``limit``;
    None: all), each on its own line; an unknown key gets the nearest known one ("did
    you mean") and the line of that key."""
    schema = load_schema(schema_name)
    required = schema.get("required") or []
    if isinstance(data, dict) and required and not _any_known_key(data, schema):
        # Not the kind of file expected at all (another file named by mistake, or on
        # purpose: a suite naming a system file): say so without quoting what it holds.
        title = schema.get("title", f"{schema_name} file").removeprefix("pytest-socialbias ")
        raise ConfigError(f"{source}: not a {title}: it has none of the top-level keys {', '.join(required)} "
                          "(its content is not shown); check that the path names the file you meant")
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if not errors:
        return
    first = jsonschema.exceptions.best_match(errors)
    rest = [e for e in errors if e is not first]

    def line_of(error) -> int:
        where = list(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = (error.schema or {}).get("properties") or {} if isinstance(error.schema, dict) else {}
            unknown = [k for k in error.instance if k not in known]
            if unknown:
                where.append(unknown[0])  # the line of the unknown key, not of its mapping
        return yaml_line(root_node, where)

    def said(error) -> str:
        return f"{source}:{line_of(error)}: at {path_text(error.absolute_path)}: {_message(error)}{_hint(error)}"

    found = [(list(e.absolute_path), line_of(e), said(e), e.validator) for e in [first] + rest]
    message = said(first)
    if rest:
        shown = rest if limit is None else rest[: limit - 1]
        left = len(rest) - len(shown)
        message += f"\n  and {len(rest)} more problem(s):" + "".join(f"\n  {said(e)}" for e in shown)
        if left:
            message += f"\n  ... and {left} more"
    raise SchemaProblems(message, found)


def _any_known_key(data: dict, schema: dict) -> bool:
    """Whether a mapping has a top-level key the schema knows, or one near it (a typo,
    which validation names with a "did you mean")."""
    known = list(schema.get("properties") or {})
    return any(key in known or difflib.get_close_matches(str(key), known, n=1) for key in data)


def _message(error) -> str:
    """jsonschema's message, except that a value of the wrong type is named by its type,
    not quoted whole (a list given for a mapping would print the whole file)."""
    if error.validator == "type":
        names = {"object": "a mapping", "array": "a list", "string": "text", "integer": "a whole number",
                 "number": "a number", "boolean": "true or false", "null": "nothing"}
        expected = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        found = {dict: "a mapping", list: "a list", str: "text", bool: "true or false", int: "a whole number",
                 float: "a number", type(None): "nothing"}.get(type(error.instance), type(error.instance).__name__)
        return f"expected {' or '.join(names.get(e, e) for e in expected)}, found {found}"
    return error.message


def _hint(error) -> str:
    """What helps a reader more than the schema's wording: a pattern's description, the
    known key nearest an unknown one."""
    schema = error.schema if isinstance(error.schema, dict) else {}
    required = schema.get("required") or []
    if error.validator == "type" and isinstance(error.instance, list) and len(required) == 1 and not error.absolute_path:
        return f" (put the list under a top-level `{required[0]}:` key)"
    if error.validator == "required" and isinstance(error.instance, dict):
        properties = schema.get("properties") or {}
        missing = [k for k in required if k not in error.instance and (properties.get(k) or {}).get("description")]
        if missing:
            return f" ({missing[0]}: {properties[missing[0]]['description']})"
    if error.validator not in ("required", "additionalProperties") and schema.get("description"):
        return f" ({schema['description']})"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = list(schema.get("properties") or {})
        unknown = [k for k in error.instance if k not in known]
        guesses = [f"{match[0]!r} for {k!r}" for k in unknown if (match := difflib.get_close_matches(str(k), known, n=1))]
        if guesses:
            return f" (did you mean {', '.join(guesses)}?)"
    return ""


def first_problem(validator: jsonschema.protocols.Validator, data) -> str | None:
    """The most relevant schema violation of one JSON value, as ``at FIELD: message``."""
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if not errors:
        return None
    first = jsonschema.exceptions.best_match(errors)
    where = ".".join(str(p) for p in first.absolute_path) or "(the object)"
    return f"at {where}: {first.message}"


def refuse_aliases(text: str, source, what: str) -> None:
    """ConfigError at ``source:line`` when ``text`` uses a YAML alias (``*name``, merge
    keys ``<<: *name`` included). A dozen lines of nested aliases expand to billions of
    values (an "alias bomb": 4 GB and no end in the schema check), so no file the plugin
    reads may use them. Only text holding a ``*`` is scanned (parse events, no values
    built): no alias can be written without one."""
    if "*" not in text:
        return
    for event in yaml.parse(text, Loader=FAST_LOADER):
        if isinstance(event, yaml.AliasEvent):
            raise ConfigError(
                f"{source}:{event.start_mark.line + 1}: {what} uses the YAML alias *{event.anchor}; the files "
                "pytest-socialbias reads may not use aliases or merge keys (a few lines of them can expand to "
                "gigabytes): write the value out where the alias stands"
            )


def read_yaml(path: Path, what: str):
    """Parse a YAML file (no aliases: ``refuse_aliases``); return (data, composed node
    tree) or raise ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc}") from None
    try:
        refuse_aliases(text, path, what)
        # One parse, with libyaml where PyYAML has it: the node tree keeps every line for
        # error messages, and the data are built from it (the same values safe_load gives).
        node = yaml.compose(text, Loader=FAST_LOADER)
        data = None if node is None else yaml.SafeLoader("").construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}{line}: {what} is not valid YAML: {problem}") from None
    return data, node


def read_jsonl(path: Path, option: str, missing_fix: str) -> list[tuple[str, int, object]]:
    """(``file:line``, line number, parsed value) for every non-blank line of a JSONL file;
    ConfigError naming the option, the file or the line, and the fix."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"{option}={path}: file not found; {missing_fix}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{option}={path}: cannot read it ({exc})") from None
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        place = f"{path}:{number}"
        try:
            out.append((place, number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{place}: not a JSON object ({exc.msg}); write one JSON object per line") from None
    return out


#: The option that lets suite files name files outside the rootdir.
OUTSIDE_OPTION = "--socialbias-allow-outside-files"


def named_path(owner: Path, node, key: str, name: str, what: str, root: Path | None = None) -> Path:
    """A path a suite file names relative to itself, resolved (links followed); with a
    ``root``, ConfigError when it lies outside it: a suite from a pull request must not
    make the run read, and quote, the rest of the machine (``seeds: /etc/shadow``)."""
    path = (owner.parent / str(name)).resolve()
    if root is not None:
        inside = Path(root).resolve()
        if path != inside and inside not in path.parents:
            raise ConfigError(
                f"{owner}:{yaml_line(node, [key])}: {what} {name!r} lies outside the project ({inside}); the files "
                f"a suite names must be inside pytest's rootdir: copy it into the project, or pass {OUTSIDE_OPTION}"
            )
    return path


def relative_file(owner: Path, node, key: str, name: str, what: str, root: Path | None = None) -> Path:
    """A file a suite (or conditions) file names relative to itself, checked to exist
    (and, with a ``root``, to lie inside it: ``named_path``)."""
    path = named_path(owner, node, key, name, what, root)
    if not path.is_file():
        raise ConfigError(
            f"{owner}:{yaml_line(node, [key])}: {what} {name!r} not found "
            f"(looked for {path}); the path is relative to the suite file"
        )
    return path


def write_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to a temporary file beside ``path``, flush it to disk, then
    rename it into place: a reader (a CI step, a browser) finds the old file or the whole
    new one, never half of it, even when the process is killed or the disk fills while
    writing. On an error the temporary file is removed and the error raised (OSError);
    a kill leaves at most a ``.NAME.*.tmp`` file beside ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
