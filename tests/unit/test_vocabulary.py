"""The shared vocabulary is declared once (vocabulary.py); the JSON schemas, which are
standalone files users and editors read, repeat some of its lists as enums. Every such
enum must equal the vocabulary's list, so a name added in one place cannot be missing in
the other."""

from __future__ import annotations

import pytest

from pytest_socialbias import vocabulary as v
from pytest_socialbias.files import load_schema
from pytest_socialbias.metrics.catalogue import CATALOGUE
from pytest_socialbias.protocols import PROTOCOLS


def at(schema: str, pointer: str):
    node = load_schema(schema)
    for part in pointer.strip("/").split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node["enum"]


@pytest.mark.parametrize(
    "schema, pointer, expected",
    [
        ("suite", "/properties/styles/items", v.STYLES),
        ("suite", "/properties/cases/items/properties/category", v.CATEGORIES),
        ("suite", "/properties/tracks/items", v.TRACKS),
        ("suite", "/properties/guidance", v.GUIDANCE),
        ("suite", "/properties/hand_pairs/items/properties/axis", v.AXES),
        ("suite", "/properties/variants/items", v.VARIANTS),
        ("suite", "/properties/guard_unit", v.GUARD_UNITS),
        ("seeds", "/properties/seeds/items/properties/category", v.CATEGORIES),
        ("thresholds", "/properties/gates/items/properties/axis", v.AXES),
        ("thresholds", "/properties/gates/items/properties/variant", v.VARIANTS),
        ("conditions", "/properties/agent_axes/items", v.PERSONA_AXES),
        ("dialogue", "/properties/class", v.CLASSES),
        ("report", "/properties/cases/items/properties/outcome", v.OUTCOMES),
        ("report", "/properties/cases/items/properties/errors/items/properties/kind", v.ERROR_KINDS),
        ("report", "/properties/cases/items/properties/labels/properties/treatment/items", v.CLASSES + (None,)),
    ],
)
def test_schema_enums_equal_the_vocabulary(schema, pointer, expected):
    assert tuple(at(schema, pointer)) == tuple(expected)


def test_every_protocol_name_has_its_entry_and_every_entry_feeds_known_families():
    assert tuple(PROTOCOLS) == ("smoke", "dymt", "zeroshot", "scripted", "benevdial_agent", "benevdial_pairs",
                                "benevdial_detect")
    families = {family for family, _ in CATALOGUE}
    for protocol in PROTOCOLS.values():
        assert set(protocol.metrics) <= families, protocol.name


def test_the_treatment_judge_speaks_the_shared_classes():
    from pytest_socialbias.judges.treatment import OUR_FORMAT, parse_treatment

    assert tuple(parse_treatment(letter) for letter in OUR_FORMAT.choices) == v.CLASSES


def test_the_docs_name_every_catalogue_metric():
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    readme = "\n".join(page.read_text(encoding="utf-8") for page in sorted(docs.glob("*.md")))
    for (family, name), metric in CATALOGUE.items():
        shown = f"{name}@T" if metric.by_turn else name
        if family == "judge-check" and name.startswith("refusal_"):
            shown = "refusal_judge_"  # the docs: "(and refusal_judge_...)"
        assert shown in readme, f"no docs page describes {shown} ({family})"
