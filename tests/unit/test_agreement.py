"""python -m pytest_socialbias agreement: the human-validation numbers the papers report
(an annotator against generation labels: Cohen's kappa; three annotators: Gwet's AC1;
follow-ups coherent: a share), checked by hand."""

from __future__ import annotations

import json

import pytest

from pytest_socialbias.__main__ import main
from pytest_socialbias.research.agreement import many_rater_agreement

ITEMS = [
    {"a": "N", "b": "N", "c": "N", "ok": True},
    {"a": "BB", "b": "BB", "c": "OB", "ok": "yes"},
    {"a": "OB", "b": "OB", "c": "OB", "ok": False},
    {"a": "N", "b": None, "c": "N"},  # a label missing: left out, never read as agreement
]


def test_many_raters_by_hand():
    # pa = (1 + 1/3 + 1) / 3 = 7/9; pi = (1/3, 2/9, 4/9) for N, BB, OB.
    # Fleiss pe = 29/81 -> kappa = 34/52; AC1 pe = 52/162 -> AC1 = (7/9 - 26/81) / (1 - 26/81) = 37/55.
    stats = many_rater_agreement([["N", "N", "N"], ["BB", "BB", "OB"], ["OB", "OB", "OB"]], ["BB", "N", "OB"])
    assert stats["n"] == 3
    assert stats["agreement"] == pytest.approx(7 / 9)
    assert stats["fleiss_kappa"] == pytest.approx(34 / 52)
    assert stats["ac1"] == pytest.approx(37 / 55)
    perfect = many_rater_agreement([["N", "N"], ["N", "N"]], ["N"])
    assert perfect["fleiss_kappa"] == 1.0 and perfect["ac1"] == 1.0


def test_the_command_for_three_raters_two_raters_and_a_share(tmp_path, capsys):
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in ITEMS), encoding="utf-8")
    assert main(["agreement", str(path), "--raters", "a", "b", "c", "--share", "ok", "--json", str(tmp_path / "o.json")]) == 0
    out = capsys.readouterr().out
    assert "1 left out (a label missing)" in out
    assert "3 raters: n 3; agreement 77.8%; Fleiss' kappa 0.654 [" in out and "Gwet's AC1 0.673 [" in out
    assert "share of items with ok true: 2 of 3 (66.7%" in out
    saved = json.loads((tmp_path / "o.json").read_text())
    assert saved["many_raters"]["ac1_low"] <= saved["many_raters"]["ac1"] <= saved["many_raters"]["ac1_high"]
    assert main(["agreement", str(path), "--raters", "a", "c"]) == 0
    out = capsys.readouterr().out
    # a vs c: 3 of 4 equal; pe = (2/4)(2/4) + (1/4)(0) + (1/4)(2/4) = 3/8 -> kappa (3/4 - 3/8) / (5/8) = 0.6.
    assert "two raters: n 4; agreement 75.0%; Cohen's kappa 0.600 [" in out


def test_bad_input_is_one_line_naming_the_fix(tmp_path, capsys):
    path = tmp_path / "labels.jsonl"
    path.write_text('["not", "an", "object"]\n', encoding="utf-8")
    assert main(["agreement", str(path), "--raters", "a", "b"]) == 2
    assert "expected a JSON object with the fields a, b" in capsys.readouterr().err
    assert main(["agreement", str(path), "--raters", "a", "a"]) == 2
    assert "name two or more different fields" in capsys.readouterr().err


def test_a_rater_field_no_item_has_is_a_usage_error_naming_the_fields_there(tmp_path, capsys):
    """An annotation sample keeps the generation label in ``class``: a field named wrong
    (``generated``) is one line naming the fields the items have, not a traceback."""
    path = tmp_path / "joined.jsonl"
    path.write_text("".join(json.dumps({"id": f"d{i}", "class": c, "annotator": c}) + "\n"
                            for i, c in enumerate(["N", "OB", "BB", "N"])), encoding="utf-8")
    assert main(["agreement", str(path), "--raters", "generated", "annotator"]) == 2
    err = capsys.readouterr().err
    assert "no item has a label in generated" in err and "the items' fields: annotator, class, id" in err
    assert main(["agreement", str(path), "--raters", "class", "annotator"]) == 0
    assert "agreement 100.0%" in capsys.readouterr().out
