"""Suite files -> typed cases, validated with jsonschema.

A YAML file is a suite when its top level has ``socialbias: 1``. Errors name the file,
the line, the path inside the document and what was expected.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from .baselines import TRACKS
from .errors import ConfigError

CATEGORIES = ("age", "appearance", "disability", "gender", "race", "religion")
#: User-simulator styles (smoke, dymt) and scripted tracks (scripted): a case's ``style``.
STYLES = ("assessment", "implicit")
#: Category of cases whose source does not say (FairMT_1K files).
UNSPECIFIED = "unspecified"
DEFAULT_TURNS = 1
#: Per protocol: default turns and styles when the suite file does not set them.
PROTOCOL_DEFAULTS = {
    "smoke": {"turns": 1, "styles": (None,)},
    "dymt": {"turns": 5, "styles": STYLES},
    "zeroshot": {"turns": 1, "styles": (None,)},
    "scripted": {"turns": 5, "styles": TRACKS},
    "benevdial_agent": {"turns": 3, "styles": (None,)},
    "benevdial_pairs": {"turns": 3, "styles": (None,)},
    "benevdial_detect": {"turns": 1, "styles": (None,)},
}
BENEVDIAL = ("benevdial_agent", "benevdial_pairs")
VARIANTS = ("clean", "fold", "mask", "shuffle")
GUARD_UNITS = ("turn", "context", "exchange")
#: BenevDial defaults: conditions per role (agent mode), pairs per role, sampler seed.
BENEVDIAL_SAMPLE = {"benevdial_agent": 42, "benevdial_pairs": 24}
BENEVDIAL_SEED = 20251130
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
    style: str | None = None  # user-simulator style, or scripted track
    turns: int = DEFAULT_TURNS
    user_turns: tuple | None = None  # fixed user turns given by the source (FairMT files)
    suite_sha256: str = ""  # of the suite file (and its seeds file): report metadata
    # Protocol data that is not a seed (BenevDial: the condition or pair, its conditions
    # file, the judge options); left out of equality and hashing.
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    markers: tuple = ()  # extra pytest markers (BenevDial: role and demographic values)

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
            "user_turns": list(self.user_turns) if self.user_turns is not None else None,
            "suite_sha256": self.suite_sha256,
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
    notes: list = field(default_factory=list)  # e.g. what a lenient loader skipped


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


def load_seeds(path: Path, source: str) -> list[tuple[dict, list]]:
    """Seeds from a seeds file: (seed, its location path) pairs, validated."""
    data, node = read_yaml(path, "seeds file")
    validate(data, "seeds", str(path), node)
    return [(raw, ["seeds", i]) for i, raw in enumerate(data["seeds"])], node


def load_suite(
    path: str | Path,
    *,
    turns: int | None = None,
    fairmt_dir: str | Path | None = None,
    sample: int | str | None = None,
    guidance: str | None = None,
    judge_demographics: bool | None = None,
    dialogues: str | Path | None = None,
    guard_unit: str | None = None,
) -> Suite:
    """Load a suite file. ``turns`` overrides the turns of ``dymt`` and BenevDial suites
    (``--socialbias-turns``); ``fairmt_dir`` is where ``source: fairmt`` cases come from;
    ``sample``, ``guidance`` and ``judge_demographics`` override a BenevDial suite's own;
    ``dialogues`` (``--socialbias-dialogues``) and ``guard_unit`` a detector suite's."""
    path = Path(path)
    data, node = read_yaml(path, "suite file")
    validate(data, "suite", str(path), node)
    protocol = data["protocol"]
    defaults = PROTOCOL_DEFAULTS[protocol]
    if protocol == "scripted" and "styles" in data:
        raise ConfigError(f"{path}:{yaml_line(node, ['styles'])}: scripted suites take `tracks:`, not `styles:`")
    if protocol != "scripted" and ("tracks" in data or "source" in data):
        key = "tracks" if "tracks" in data else "source"
        raise ConfigError(f"{path}:{yaml_line(node, [key])}: `{key}:` is only for protocol: scripted")
    suite_turns = data.get("turns", defaults["turns"])
    if protocol in ("dymt",) + BENEVDIAL and turns is not None:
        suite_turns = turns
    if protocol == "benevdial_detect" or "dialogues" in data:
        return _detect_suite(path, data, node, dialogues, guidance, judge_demographics, guard_unit)
    if protocol in BENEVDIAL or "conditions" in data or "hand_pairs" in data:
        return _benevdial_suite(path, data, node, suite_turns, sample, guidance, judge_demographics)
    if protocol == "zeroshot" and suite_turns != 1:
        raise ConfigError(f"{path}:{yaml_line(node, ['turns'])}: the zero-shot probe has exactly one turn")
    styles = tuple(data.get("tracks") or data.get("styles") or defaults["styles"])
    if protocol == "scripted":
        suite_turns = 5  # the scripted tracks have five user turns each
    name = data["suite"]
    notes: list[str] = []
    if "source" in data:
        cases, notes = _fairmt_cases(name, fairmt_dir)
    else:
        if "seeds" in data:
            seeds_path = (path.parent / data["seeds"]).resolve()
            if not seeds_path.is_file():
                raise ConfigError(
                    f"{path}:{yaml_line(node, ['seeds'])}: seeds file {data['seeds']!r} not found "
                    f"(looked for {seeds_path}); the path is relative to the suite file"
                )
            entries, entries_node, source = *load_seeds(seeds_path, str(path)), seeds_path
        else:
            entries, entries_node, source = [(raw, ["cases", i]) for i, raw in enumerate(data["cases"])], node, path
        cases = _seed_cases(entries, entries_node, source, name, protocol, styles, suite_turns)
    digest = hashlib.sha256(path.read_bytes())
    if "seeds" in data:
        digest.update((path.parent / data["seeds"]).resolve().read_bytes())
    cases = [dataclasses.replace(c, suite_sha256=digest.hexdigest()) for c in cases]
    # Sorted, so that every xdist worker collects the same list in the same order.
    cases.sort(key=lambda c: (c.id, c.style or ""))
    return Suite(
        path=path,
        name=name,
        protocol=protocol,
        turns=suite_turns,
        styles=styles,
        batch_size=data.get("batch_size", DEFAULT_BATCH_SIZE),
        cases=cases,
        notes=notes,
    )


def _seed_cases(entries, node, source: Path, suite: str, protocol: str, styles, turns: int) -> list:
    seen: dict[str, list] = {}
    cases = []
    for raw, where in entries:
        if raw["id"] in seen:
            line = yaml_line(node, where + ["id"])
            raise ConfigError(
                f"{source}:{line}: duplicate case id {raw['id']!r} (first at line "
                f"{yaml_line(node, seen[raw['id']] + ['id'])}); case ids must be unique within a suite"
            )
        seen[raw["id"]] = where
        for style in styles:
            cases.append(
                Case(
                    suite=suite,
                    protocol=protocol,
                    id=raw["id"],
                    category=raw["category"],
                    group=raw["group"],
                    statement=raw["statement"],
                    style=style,
                    turns=turns,
                )
            )
    return cases


def _fairmt_cases(suite: str, fairmt_dir) -> tuple[list, list]:
    """Cases from the official FairMT-Bench release files (none without the option),
    and notes on what the lenient loader skipped."""
    if fairmt_dir is None:
        return [], []
    from .fairmt import load_fairmt

    result = load_fairmt(Path(fairmt_dir))
    notes = [f"{suite}: skipped {reason}" for reason in result.skipped]
    return [
        Case(
            suite=suite,
            protocol="scripted",
            id=d.id,
            category=d.category or UNSPECIFIED,
            group="",
            statement="",
            style=d.track,
            turns=len(d.turns),
            user_turns=tuple(d.turns),
        )
        for d in result.dialogues
    ], notes


# --------------------------------------------------------------------------- BenevDial


def _benevdial_suite(path: Path, data, node, suite_turns: int, sample, guidance, judge_demographics) -> Suite:
    from .benevdial.conditions import make_pairs, sample_conditions

    protocol = data["protocol"]
    if protocol not in BENEVDIAL:
        key = "conditions" if "conditions" in data else "hand_pairs"
        raise ConfigError(f"{path}:{yaml_line(node, [key])}: `{key}:` is only for protocols benevdial_agent and benevdial_pairs")
    for key in ("cases", "seeds", "styles", "tracks", "source"):
        if key in data:
            raise ConfigError(f"{path}:{yaml_line(node, [key])}: BenevDial suites take `conditions:`, not `{key}:`")
    if "conditions" not in data:
        raise ConfigError(f"{path}:1: a {protocol} suite needs `conditions: FILE` (e.g. conditions.yaml beside it)")
    if "hand_pairs" in data and protocol != "benevdial_pairs":
        raise ConfigError(f"{path}:{yaml_line(node, ['hand_pairs'])}: `hand_pairs:` is only for protocol benevdial_pairs")
    conditions, conditions_path = _suite_conditions(path, data, node)
    per_role = sample if sample is not None else data.get("sample", BENEVDIAL_SAMPLE[protocol])
    options = _judge_options(data, guidance, judge_demographics)
    seed = data.get("sample_seed", BENEVDIAL_SEED)
    name = data["suite"]
    digest = hashlib.sha256(path.read_bytes() + conditions_path.read_bytes()).hexdigest()
    cases = []
    if protocol == "benevdial_agent":
        count = None if per_role == "all" else int(per_role)
        for condition in sample_conditions(conditions, count, seed):
            cases.append(_benevdial_case(name, protocol, condition.id, condition.role, condition.profile, suite_turns, digest,
                                         {"conditions": conditions, "condition": condition, "options": options}))
    else:
        if per_role == "all":
            raise ConfigError(
                f"{path}: `sample: all` is for benevdial_agent suites; give benevdial_pairs a number of pairs per role"
            )
        for pair in make_pairs(conditions, int(per_role), seed):
            cases.append(_benevdial_case(name, protocol, pair.id, pair.role, pair.a, suite_turns, digest,
                                         {"conditions": conditions, "pair": pair, "options": options},
                                         extra_markers=(pair.axis, _marker(pair.b.value(pair.axis)))))
        seen = {c.id for c in cases}
        for index, raw in enumerate(data.get("hand_pairs", [])):
            if raw["id"] in seen:
                raise ConfigError(
                    f"{path}:{yaml_line(node, ['hand_pairs', index, 'id'])}: duplicate pair id {raw['id']!r}; ids must be unique"
                )
            if len(raw["a"]) != len(raw["b"]):
                raise ConfigError(
                    f"{path}:{yaml_line(node, ['hand_pairs', index])}: pair {raw['id']!r}: members a and b need the "
                    "same number of user turns (only the demographic details may differ)"
                )
            seen.add(raw["id"])
            spec = {**raw, "role": raw.get("role", "hand-written")}
            cases.append(
                Case(suite=name, protocol=protocol, id=raw["id"], category=_marker(spec["role"]), group=raw["axis"], statement="",
                     style=None, turns=len(raw["a"]), suite_sha256=digest,
                     extra={"pair": spec, "options": options, "conditions": conditions},
                     markers=(_marker(spec["role"]), raw["axis"]) + tuple(_marker(v) for v in raw["values"]))
            )
    cases.sort(key=lambda c: c.id)
    return Suite(
        path=path,
        name=name,
        protocol=protocol,
        turns=suite_turns,
        styles=(None,),
        batch_size=data.get("batch_size", DEFAULT_BATCH_SIZE),
        cases=cases,
        notes=[],
    )


def _suite_conditions(path: Path, data, node):
    """The BenevDial conditions file a suite names (relative to the suite file), loaded."""
    from .benevdial.conditions import load_conditions

    conditions_path = (path.parent / data["conditions"]).resolve()
    if not conditions_path.is_file():
        raise ConfigError(
            f"{path}:{yaml_line(node, ['conditions'])}: conditions file {data['conditions']!r} not found "
            f"(looked for {conditions_path}); the path is relative to the suite file"
        )
    return load_conditions(conditions_path), conditions_path


def _judge_options(data, guidance, judge_demographics) -> dict:
    """The treatment judge's guidance and demographics: the option, else the suite's."""
    return {
        "guidance": guidance or data.get("guidance", "operational"),
        "demographics": bool(judge_demographics if judge_demographics is not None else data.get("judge_demographics", False)),
    }


def _marker(value: str) -> str:
    """A pytest marker name for a role or demographic value (``non-binary`` -> ``non_binary``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", value)


def _benevdial_case(suite, protocol, case_id, role, profile, turns, digest, extra, extra_markers=()) -> Case:
    values = (profile.age, profile.gender, profile.race, profile.ability)
    return Case(
        suite=suite,
        protocol=protocol,
        id=case_id,
        category=role,
        group=profile.key,
        statement="",
        style=None,
        turns=turns,
        suite_sha256=digest,
        extra=extra,
        markers=tuple(dict.fromkeys((_marker(role),) + tuple(_marker(v) for v in values) + tuple(extra_markers))),
    )


def _detect_suite(path: Path, data, node, dialogues_override, guidance, judge_demographics, guard_unit) -> Suite:
    """A detector suite: one case per labelled dialogue and robustness variant."""
    from .benevdial.dialogues import load_dialogues

    if data["protocol"] != "benevdial_detect":
        raise ConfigError(f"{path}:{yaml_line(node, ['dialogues'])}: `dialogues:` is only for protocol benevdial_detect")
    for key in ("cases", "seeds", "styles", "tracks", "source", "hand_pairs", "sample"):
        if key in data:
            raise ConfigError(f"{path}:{yaml_line(node, [key])}: detector suites take `dialogues:`, not `{key}:`")
    if dialogues_override is not None:
        dialogues_path = Path(dialogues_override)
        option = "--socialbias-dialogues"
    elif "dialogues" in data:
        dialogues_path = (path.parent / data["dialogues"]).resolve()
        option = f"{path}:{yaml_line(node, ['dialogues'])}: dialogues"
    else:
        raise ConfigError(f"{path}:1: a benevdial_detect suite needs `dialogues: FILE.jsonl` or --socialbias-dialogues=FILE")
    dialogues = load_dialogues(dialogues_path, option)
    conditions = _suite_conditions(path, data, node)[0] if "conditions" in data else None
    variants = tuple(data.get("variants", VARIANTS))
    cues: tuple = ()
    if "mask" in variants:
        from .benevdial.transforms import load_cues

        if "cues" not in data:
            raise ConfigError(f"{path}:{yaml_line(node, ['variants'])}: the mask variant needs `cues: FILE` (one cue per line)")
        cues = load_cues((path.parent / data["cues"]).resolve())
    options = {
        **_judge_options(data, guidance, judge_demographics),
        "variant_seed": data.get("variant_seed", BENEVDIAL_SEED),
        "guard_unit": guard_unit or data.get("guard_unit", "exchange"),
    }
    digest = hashlib.sha256(path.read_bytes() + dialogues_path.read_bytes()).hexdigest()
    cases = []
    for dialogue in dialogues:
        for variant in variants:
            cases.append(
                Case(
                    suite=data["suite"],
                    protocol="benevdial_detect",
                    id=dialogue["id"],
                    category=_marker(dialogue["role"]),
                    group=dialogue["class"],
                    statement="",
                    style=variant,
                    turns=1,
                    suite_sha256=digest,
                    extra={"dialogue": dialogue, "conditions": conditions, "cues": cues, "options": options},
                    markers=(_marker(dialogue["role"]), f"class_{dialogue['class'].lower()}", variant),
                )
            )
    cases.sort(key=lambda c: (c.id, VARIANTS.index(c.style)))
    return Suite(
        path=path,
        name=data["suite"],
        protocol="benevdial_detect",
        turns=1,
        styles=variants,
        batch_size=data.get("batch_size", DEFAULT_BATCH_SIZE),
        cases=cases,
        notes=[],
    )
