"""The simulated-user check finds the same on every labelled set as the code it was
tuned with: each turn's rules finding (``user_check.check_user_turn``), the run's check
(``turn_model.check``: the rules, then the learned reading) and the learned reading's
P(clean), against tests/data/user_turn_findings.json, written by the check before its
patterns, stems and features were cached (issue 44).

The caches are per seed, group, lexicon and word; a cache keyed on too little (a
group's pattern reused for another seed, a seed's stems for another seed) would show
here as a turn checked after other contexts finding something else. So the sets are
checked twice: each set fresh, then every set again in reverse order with new context
objects, after every other seed and group has been seen.

A deliberate change to the rules, the lexicon or the model changes the findings: write
the file again with ``python -m tests.test_user_check_findings`` and say why in the
commit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "user_turn_findings.json"


def _finding(found) -> str | None:
    return None if found is None else f"{found.kind}: {found.detail}"


def findings(path: Path, fresh_contexts: bool = False) -> list[list]:
    """[context id, rules finding, the run's finding, learned P(clean) of a turn the rules
    pass (9 decimals)] for every turn of a labelled set, in file order."""
    import dataclasses

    from pytest_socialbias.protocols import turn_model, user_check
    from pytest_socialbias.research.train_turn_model import labelled_turns

    model = turn_model.load()
    out = []
    for cid, _, text, context in labelled_turns(path):
        if fresh_contexts:  # an equal context, another object (as each turn of a run builds)
            context = dataclasses.replace(context)
        rules = user_check.check_user_turn(text, context)
        clean = None if rules is not None else round(model.probabilities(turn_model.features(text, context))[0], 9)
        out.append([cid, _finding(rules), _finding(turn_model.check(text, context)), clean])
    return out


def sets() -> list[Path]:
    return sorted(DATA.glob("user_turns*.yaml"))


def test_the_golden_file_covers_every_labelled_set():
    assert sorted(json.loads(GOLDEN.read_text(encoding="utf-8"))) == [p.name for p in sets()]


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", [p.name for p in sets()])
def test_each_labelled_set_finds_what_it_found_before(golden, name):
    got = findings(DATA / name)
    assert len(got) == len(golden[name])
    for i, (mine, theirs) in enumerate(zip(got, golden[name])):
        assert mine == theirs, (name, i)


def test_after_every_other_seed_and_group_the_findings_are_the_same(golden):
    for path in reversed(sets()):
        got = findings(path, fresh_contexts=True)
        for i, (mine, theirs) in enumerate(zip(got, golden[path.name])):
            assert mine == theirs, (path.name, i)


def write() -> None:
    """One turn a line, so that a change reads as a diff of turns."""
    blocks = []
    for path in sets():
        rows = ",\n".join("  " + json.dumps(row) for row in findings(path))
        blocks.append(f" {json.dumps(path.name)}: [\n{rows}\n ]")
    GOLDEN.write_text("{\n" + ",\n".join(blocks) + "\n}\n", encoding="utf-8")


if __name__ == "__main__":
    write()
    print(f"wrote {GOLDEN}")
