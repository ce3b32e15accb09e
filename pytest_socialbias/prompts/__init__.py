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
            out.append({"role": "system", "content": string.Template(self.system).substitute(values).strip()})
        out.append({"role": "user", "content": string.Template(self.user).substitute(values).strip()})
        return out


@lru_cache(maxsize=None)
def load(name: str) -> Template:
    text = resources.files(__package__).joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
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
