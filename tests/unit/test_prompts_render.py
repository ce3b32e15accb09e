"""The prompt renderer: byte-identical to string.Template.substitute, faster."""

from __future__ import annotations

import random
import string
from importlib import resources

import pytest
import yaml

import pytest_socialbias.prompts as prompts
from pytest_socialbias.prompts import render


def shipped_texts():
    for path in resources.files(prompts).iterdir():
        if path.name.endswith(".yaml"):
            for key, value in yaml.safe_load(path.read_text(encoding="utf-8")).items():
                if isinstance(value, str):
                    yield f"{path.name}:{key}", value


@pytest.mark.parametrize("name, text", list(shipped_texts()))
def test_every_shipped_template_renders_like_string_template(name, text):
    rng = random.Random(name)
    names = {m.group("named") or m.group("braced") for m in string.Template.pattern.finditer(text)} - {None}
    for _ in range(10):
        values = {n: "".join(rng.choice("ab$c{}\\n é") for _ in range(rng.randint(0, 30))) for n in names}
        assert render(text, values) == string.Template(text).substitute(values)


@pytest.mark.parametrize("text", ["a $$ b $x ${y}z $$x", "$$$x", "no placeholders", "$x$y", "${x}${y}$$"])
def test_escapes_and_braces(text):
    values = {"x": "1", "y": "$2"}
    assert render(text, values) == string.Template(text).substitute(values)


def test_missing_and_invalid_placeholders_raise_like_string_template():
    with pytest.raises(KeyError):
        render("hello $name", {})
    with pytest.raises(ValueError):
        render("a $ b", {})
