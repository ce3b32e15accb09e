"""Prompt templates as package data, each with a name and a version.

A template file ``NAME.yaml`` holds ``name``, ``version``, ``system`` and ``user``, written
with ``$placeholders`` (string.Template, so JSON braces in prompts need no escaping).
``Template.id`` (``name@version``) enters the cache key and the report's metadata: change
a prompt's wording and bump its version, so recorded answers of the old prompt are not
replayed for the new one.

A folder of override files (``--socialbias-prompts=DIR``, ``use_overrides``) replaces ours
by name: ``DIR/judge_treatment.yaml`` is used wherever ``judge_treatment`` is, so a
researcher can run with a paper's own prompt text (which we do not ship). An override's
id carries the sha256 of its file (``judge_treatment@3+1a2b3c4d5e6f``), so it enters the
cache key and the report; named snippets it leaves out are ours. Each file is checked
when the run starts: a name we have no prompt of, a file that is not a template, or a
placeholder we never fill (in any part: system, user or a named snippet such as a class
text) is a usage error naming the file and the part. The placeholders an override may
use are those of our text (all its parts), plus any our file lists under
``override_placeholders`` (values the code fills that our own wording does not need).
Named snippets are filled as the system and user texts are (``Template.snippet``), so an
override's class text may say ``The $agent_title ...``. A judge whose answer format can
be declared (``answer_format:``, judges/treatment.py) has its override's declaration
checked too. ``generate-benevdial --prompts DIR`` reads the same folders (``overriding``,
for the length of one command).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import string
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from ..errors import ConfigError
from ..files import refuse_aliases
from ..runcache import current

#: A suite's own override folder (its ``prompts:`` key), set while one of its cases runs
#: (worker.run_case): asyncio tasks copy it, so every call of that case sees it, and only
#: that case. It wins over the run's folder.
SUITE_OVERRIDES: contextvars.ContextVar = contextvars.ContextVar("suite_prompt_overrides", default=None)
TEMPLATE_KEYS = ("name", "version", "system", "user")
#: Prompts sent once per run, not per case (models/client.py's endpoint check): only the
#: run's folder replaces them, never a suite's.
RUN_WIDE = ("endpoint_check",)


@dataclass(frozen=True)
class Template:
    name: str
    version: int
    system: str
    user: str
    extras: dict = field(default_factory=dict)  # named snippets, e.g. per-style text
    sha256: str | None = None  # of an override file (use_overrides); None for ours
    path: str | None = None  # the override file, for errors; None for ours

    @property
    def id(self) -> str:
        return self.id_as(self.name)

    def id_as(self, label: str) -> str:
        """``label@version``, with ``+sha12`` when this is an override: the id of calls that
        are keyed under a label of their own (a guard's ``guard:KIND@version``, older than
        its prompt file), which must change with an override as ``id`` does."""
        return f"{label}@{self.version}" + (f"+{self.sha256[:12]}" if self.sha256 else "")

    def messages(self, **values) -> list[dict]:
        """Render to chat messages. A placeholder with no value is a programming error in
        ours (KeyError); in an override (which may use any placeholder its template fills
        somewhere), a ConfigError naming the file and what is filled there."""
        out = []
        if self.system.strip():
            out.append({"role": "system", "content": self._render("system", self.system, values).strip()})
        out.append({"role": "user", "content": self._render("user", self.user, values).strip()})
        return out

    def _render(self, part: str, text: str, values: dict) -> str:
        if self.path is not None:
            missing = sorted(placeholders(text) - set(values))
            if missing:
                raise ConfigError(f"{self.path}: {part} uses {', '.join('$' + m for m in missing)}, which has no "
                                  f"value in this call; here it fills {', '.join('$' + v for v in sorted(values))}")
        return render(text, values)

    def snippet(self, name: str, **values) -> str:
        """The named snippet ``name`` (a class text, a guidance level, a persona line)
        with its placeholders filled from ``values``, as the system and user texts are:
        an override's snippets may use any placeholder its template fills (the paper's
        class texts name both roles). A placeholder with no value here is a ConfigError
        naming the file, the snippet and what it can use."""
        text = self.extras[name]
        if not isinstance(text, str):
            raise ConfigError(f"{self.path or 'our ' + self.name + '.yaml'}: {name} must be text; write {name}: | "
                              "and the text below it")
        missing = sorted(placeholders(text) - set(values))
        if missing:
            raise ConfigError(
                f"{self.path or 'our ' + self.name + '.yaml'}: {name} uses "
                f"{', '.join('$' + m for m in missing)}, which has no value where {name} is used; there it "
                f"fills {', '.join('$' + v for v in sorted(values)) or 'none'}")
        return render(text, values)

    def text(self, **values) -> str:
        """The user template rendered exactly, whitespace included (for formats that a
        model was trained on character for character, such as WildGuard's)."""
        return render(self.user, values)


@lru_cache(maxsize=None)  # process-wide: a pure function of its text
def _compiled(text: str) -> tuple:
    """``text`` split at its placeholders, once: (literal, name, literal, name, ..., literal).

    Uses string.Template's own pattern, so ``$name``, ``${name}`` and ``$$`` mean exactly
    what they mean there; rendering then is a join instead of a regex pass per call.
    """
    parts: list = []
    last = 0
    literal = ""
    for match in string.Template.pattern.finditer(text):
        literal += text[last : match.start()]
        last = match.end()
        if match.group("escaped") is not None:
            literal += "$"
        elif match.group("named") is not None or match.group("braced") is not None:
            parts += [literal, match.group("named") or match.group("braced")]
            literal = ""
        else:  # an invalid placeholder: let string.Template raise its own error
            string.Template(text).substitute({})
    parts.append(literal + text[last:])
    return tuple(parts)


def render(text: str, values: dict) -> str:
    """``string.Template(text).substitute(values)``, faster (values are used as str())."""
    parts = _compiled(text)
    out = [parts[0]]
    for index in range(1, len(parts), 2):
        out.append(str(values[parts[index]]))
        out.append(parts[index + 1])
    return "".join(out)


def _parse(text: str, sha256: str | None = None) -> Template:
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    extras = {k: v for k, v in data.items() if k not in TEMPLATE_KEYS}
    return Template(
        name=data["name"],
        version=int(data["version"]),
        system=data.get("system", "") or "",
        user=data["user"],
        extras=extras,
        sha256=sha256,
    )


def _ours(name: str) -> Template:
    return _parse(resources.files(__package__).joinpath(f"{name}.yaml").read_text(encoding="utf-8"))


def load(name: str) -> Template:
    """The template ``name``: the running case's suite override, else the run's, else ours.
    Each is read once per run (runcache.py): the run's override folder, and the files in
    it, are the run's."""
    suite = SUITE_OVERRIDES.get()
    if suite is not None and name in suite:
        return _load_file(name, suite[name])
    return _load(name)


def _load(name: str) -> Template:
    """The run's override of ``name``, else ours."""
    loaded = current().prompts
    if name not in loaded:
        path = current().prompt_overrides.get(name)
        loaded[name] = _ours(name) if path is None else _load_file(name, path)
    return loaded[name]


def _load_file(name: str, path: Path) -> Template:
    loaded = current().prompt_files
    if (name, path) not in loaded:
        loaded[name, path] = _read_file(name, path)
    return loaded[name, path]


def _read_file(name: str, path: Path) -> Template:
    raw = path.read_bytes()
    override = _parse(raw.decode("utf-8"), hashlib.sha256(raw).hexdigest())
    # Named snippets the override leaves out are ours (per-style text, guidance levels...).
    return Template(override.name, override.version, override.system, override.user,
                    {**_ours(name).extras, **override.extras}, override.sha256, str(path))


def overridden() -> list[str]:
    """The ids of the run's overrides in use (``name@version+sha``)."""
    return [_load(name).id for name in sorted(current().prompt_overrides)]


def names() -> tuple[str, ...]:
    """The names of our templates."""
    return tuple(sorted(f.name[:-5] for f in resources.files(__package__).iterdir() if f.name.endswith(".yaml")))


def placeholders(text: str) -> set[str]:
    parts = _compiled(text)
    return {parts[i] for i in range(1, len(parts), 2)}


def use_overrides(folder: Path | None, option: str = "--socialbias-prompts") -> list[str]:
    """Use the ``*.yaml`` files of ``folder`` in place of our templates of the same name
    (None: ours only); returns the ids in use. ConfigError naming the file and the fix for
    a file that cannot stand in for ours."""
    _use({} if folder is None else check_folder(folder, option))
    return overridden()


def _use(overrides: dict[str, Path]) -> None:
    caches = current()
    caches.prompt_overrides = dict(overrides)
    caches.prompts.clear()
    caches.prompt_files.clear()


@contextlib.contextmanager
def overriding(folder: Path | None, option: str):
    """``use_overrides(folder, option)`` for the length of a ``with`` block (yields the ids in
    use), then the overrides that were in use before it, for a command run in-process."""
    before = dict(current().prompt_overrides)
    try:
        yield use_overrides(folder, option)
    finally:
        _use(before)


def check_folder(folder: Path, where: str, suite: bool = False) -> dict[str, Path]:
    """Name -> file of a folder of overrides, every file checked (ConfigError naming it).
    A ``suite``'s folder (its ``prompts:`` key) cannot hold a ``RUN_WIDE`` prompt."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{where}={folder}: not a folder; name a folder of NAME.yaml prompt files")
    found = sorted(folder.glob("*.yaml"))
    if not found:
        raise ConfigError(f"{where}={folder}: holds no NAME.yaml prompt file; ours are {', '.join(names())}")
    ours = names()
    for path in found:
        _check_override(path, ours)
        if suite and path.stem in RUN_WIDE:
            raise ConfigError(f"{path}: {path.stem} is sent once per endpoint for the whole run, before any "
                              "suite's case, so a suite's prompts: folder cannot replace it; put the file in "
                              "the folder of --socialbias-prompts instead")
    return {path.stem: path.resolve() for path in found}


def _check_override(path: Path, ours: tuple) -> None:
    name = path.stem
    if name not in ours:
        raise ConfigError(f"{path}: no prompt of ours is named {name!r}; name the file after the one it replaces "
                          f"({', '.join(ours)})")
    try:
        text = path.read_text(encoding="utf-8")
        refuse_aliases(text, path, "a prompt file")
        data = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not a readable YAML prompt file ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("user"), str) or not isinstance(data.get("version"), int):
        raise ConfigError(f"{path}: a prompt file holds name: {name}, version: N (a whole number), system: TEXT "
                          "(optional) and user: TEXT, with $placeholders")
    if data.get("name") != name:
        raise ConfigError(f"{path}: name: {data.get('name')!r} differs from the file name; write name: {name}")
    mine = _ours(name)
    known = known_placeholders(mine)
    parts = {"system": str(data.get("system") or ""), "user": data["user"]}
    parts.update({key: value for key, value in data.items()
                  if key not in TEMPLATE_KEYS and key not in NOT_TEXT and isinstance(value, str)})
    for part, text in parts.items():
        try:
            used = placeholders(text)
        except (ValueError, KeyError) as exc:
            raise ConfigError(f"{path}: a placeholder in {part} is malformed ({exc}); write $name or ${{name}}, and "
                              "$$ for a dollar sign") from None
        unknown = sorted(used - known)
        if unknown:
            raise ConfigError(f"{path}: placeholder(s) {', '.join('$' + u for u in unknown)} in {part} are never "
                              f"filled for {name}; it fills {', '.join('$' + k for k in sorted(known)) or 'none'}")
    if "answer_format" in data:
        check_answer_format(path, name, data["answer_format"], mine.extras.get("answer_format"))


#: Entries of a prompt file that are settings, not text with placeholders.
NOT_TEXT = ("override_placeholders", "answer_format")


def known_placeholders(template: Template) -> set:
    """The placeholders an override of ``template`` may use, in any of its parts: those of
    our text (system, user and the named snippets) and any our file lists under
    ``override_placeholders`` (values the code fills that our own wording does not need)."""
    known = placeholders(template.system) | placeholders(template.user)
    for key, value in template.extras.items():
        if key not in NOT_TEXT and isinstance(value, str):
            known |= placeholders(value)
    return known | set(template.extras.get("override_placeholders", ()))


def check_answer_format(path: Path, name: str, given, ours) -> None:
    """An override's ``answer_format:`` (the labels its text asks the judge for, and the
    JSON field the answer is in, if any): ConfigError naming the file and the fix."""
    if not isinstance(ours, dict):
        raise ConfigError(f"{path}: answer_format: {name} reads no declared answer format; remove it")
    classes = list(ours["labels"])
    example = ", ".join(f"{c}: {i}" for i, c in enumerate(classes, start=1))
    shape = (f"answer_format: {{labels: {{{example}}}, json_field: Classification}} (json_field optional: the "
             "answer is then that JSON object)")
    if not isinstance(given, dict) or set(given) - {"labels", "json_field"} or not isinstance(given.get("labels"), dict):
        raise ConfigError(f"{path}: answer_format must be {shape}")
    labels = given["labels"]
    if sorted(map(str, labels)) != sorted(classes):
        raise ConfigError(f"{path}: answer_format: labels must name each of {', '.join(classes)} once (got "
                          f"{', '.join(map(str, labels)) or 'none'}); write {shape}")
    words = [str(v).strip() for v in labels.values() if isinstance(v, (str, int)) and not isinstance(v, bool)]
    if len(words) != len(classes) or not all(words) or any(any(ch.isspace() for ch in w) for w in words):
        raise ConfigError(f"{path}: answer_format: each label is one word or number the judge answers with; "
                          f"write {shape}")
    if len({w.lower() for w in words}) != len(words):
        raise ConfigError(f"{path}: answer_format: two classes share the label "
                          f"{next(w for w in words if [x.lower() for x in words].count(w.lower()) > 1)!r}; "
                          "each class needs its own")
    field_name = given.get("json_field")
    if field_name is not None and (not isinstance(field_name, str) or not field_name.strip()):
        raise ConfigError(f"{path}: answer_format: json_field is the name of the JSON field that holds the label "
                          "(e.g. Classification); leave it out for a bare label")


def fence(*texts: str) -> str:
    """A fence tag for untrusted text, derived from the text itself.

    Model replies are untrusted: a reply could contain a fixed closing marker and then
    pose as instructions. The tag is a hash of the fenced texts, which a reply cannot
    predict, and it is deterministic, so the judge prompt (and its cache key) is stable.
    """
    digest = hashlib.sha256("\x00".join(texts).encode("utf-8", "replace")).hexdigest()[:10]
    return f"untrusted-{digest}"


def transcript(turns: list[dict]) -> str:
    """``User: ...`` / ``Assistant: ...`` lines for prompts that show the dialogue so far."""
    lines = []
    for turn in turns:
        lines.append(f"User: {turn['user']}")
        if turn.get("assistant") is not None:
            lines.append(f"Assistant: {turn['assistant']}")
    return "\n".join(lines)
