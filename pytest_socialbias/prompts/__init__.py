"""Prompt templates as package data, each with a name and a version.

A template file ``NAME.yaml`` holds ``name``, ``version``, ``system`` and ``user``, written
with ``$placeholders`` (string.Template, so JSON braces in prompts need no escaping).
``Template.id`` (``name@version``) enters the cache key and the report's metadata: change
a prompt's wording and bump its version, so recorded answers of the old prompt are not
replayed for the new one.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import yaml


@dataclass(frozen=True)
class Template:
    name: str
    version: int
    system: str
    user: str
    extras: dict = field(default_factory=dict)  # named snippets, e.g. per-style text

    @property
    def id(self) -> str:
        return f"{self.name}@{self.version}"

    def messages(self, **values) -> list[dict]:
        """Render to chat messages; a missing placeholder is a programming error (KeyError)."""
        out = []
        if self.system.strip():
            out.append({"role": "system", "content": render(self.system, values).strip()})
        out.append({"role": "user", "content": render(self.user, values).strip()})
        return out

    def text(self, **values) -> str:
        """The user template rendered exactly, whitespace included (for formats that a
        model was trained on character for character, such as WildGuard's)."""
        return render(self.user, values)


@lru_cache(maxsize=None)
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


@lru_cache(maxsize=None)
def load(name: str) -> Template:
    text = resources.files(__package__).joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    extras = {k: v for k, v in data.items() if k not in ("name", "version", "system", "user")}
    return Template(
        name=data["name"],
        version=int(data["version"]),
        system=data.get("system", ""),
        user=data["user"],
        extras=extras,
    )


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
